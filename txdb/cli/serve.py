"""`txdb serve`: browse the catalog in Datasette, read-only, on 127.0.0.1.

The equivalent plain command (the plugin loads through its entry point):

    datasette serve "$(txdb path)" -m "$(txdb serve --print-metadata-path)" \\
        --host 127.0.0.1 --port 8001 --setting sql_time_limit_ms 5000 \\
        --setting facet_time_limit_ms 500 --setting suggest_facets off
"""

from __future__ import annotations

import signal
import socket
import sqlite3
import threading
import webbrowser
from pathlib import Path

import click

from txdb import config
from txdb.catalog import db
from txdb.errors import TxdbError
from txdb.web.hostcheck import refuse_foreign_hosts
from txdb.web.metadata import make_datasette, metadata_path
from txdb.web.urls import DEFAULT_PORT
from txdb.cli.main import command, db_option, root_option, watch_reporter
from txdb.cli.output import echo, terminal_safe


@command("serve")
@db_option
@click.option("-p", "--port", type=click.IntRange(0, 65535), default=DEFAULT_PORT, show_default=True,
              help="Port on 127.0.0.1 (0 picks a free one).")
@click.option("--open", "open_browser", is_flag=True, help="Open the catalog in a web browser.")
@click.option("--print-metadata-path", is_flag=True,
              help="Print the path of txdb's Datasette metadata.json and exit.")
@click.option("--watch", is_flag=True,
              help="Keep the catalog current while serving, as `txdb refresh --watch` does.")
@root_option
def serve(db_path, port, open_browser, print_metadata_path, watch, roots):
    """Views worth opening: sessions_by_size, sessions_by_context,
    context_by_category, costliest_tool_calls, sessions_near_limit and the
    search_* views; each session's conversation is at /-/txdb/session/<session-id>
    (or a 4+ character prefix; `txdb sessions --urls` prints it).

    With --watch, a watcher in the same process refreshes the catalog as
    session files change (Datasette only reads it; each page shows what
    was committed when it was asked for).

    Example:

    \b
        txdb refresh && txdb serve --open
        txdb serve --watch
    """
    if print_metadata_path:
        echo(metadata_path())
        return
    import uvicorn

    path = Path(db_path or config.default_db_path())
    # Migrate and create the views once; Datasette itself only reads (so
    # there must be a catalog, unless --watch is to build it).
    db.connect(path, create=watch).close()
    host = "127.0.0.1"
    # Bound here and handed to uvicorn, so a second serve on the port gets
    # one Error line (never uvicorn's bind error) and no other process can
    # take the port in between.
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(128)
    except OSError:
        sock.close()
        raise click.ClickException(f"port {port} is in use (another txdb serve?)") from None
    port = sock.getsockname()[1]
    watcher = _start_watcher(path, config.projects_roots(roots)) if watch else None
    ds = make_datasette(path)
    url = f"http://{host}:{port}/"
    echo(f"Serving {path} read-only at {url}  (Ctrl-C to stop)", err=True)
    if open_browser:
        threading.Timer(1.0, _open_browser, [url]).start()
    # Requests naming another host are refused here, whatever plugins load
    # (the txdb plugin does the same for plain `datasette serve`).
    # Ctrl-C ends serve as it ends every command: KeyboardInterrupt, which
    # the group turns into exit 130. uvicorn's Server catches SIGINT, shuts
    # down, then raises it again through the handler it found: this one
    # (asyncio would swallow Python's default one, and uvicorn.run any
    # KeyboardInterrupt: exit 0).
    server = uvicorn.Server(uvicorn.Config(refuse_foreign_hosts(ds.app()), host=host, port=port,
                                           log_level="warning", lifespan="on"))
    previous = signal.signal(signal.SIGINT, _interrupt)
    try:
        server.run(sockets=[sock])
        if not server.started:
            raise click.exceptions.Exit(3)  # uvicorn said why (its startup failure status)
    finally:
        sock.close()
        signal.signal(signal.SIGINT, previous)
        if watcher is not None:
            stop, thread = watcher
            stop.set()  # the watcher ends between two files' transactions
            thread.join(1.0)
            if thread.is_alive():  # in a long rescan (a first build): its files commit whole either way
                echo("Waiting for the watcher to finish its refresh (Ctrl-C again to stop now)", err=True)
                thread.join()


def _open_browser(url: str) -> None:
    # webbrowser.open says False (never raises) when no browser could start.
    if not webbrowser.open(url):
        echo(f"No web browser found: open {url} yourself", err=True)


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def _start_watcher(path: Path, roots: list[Path]) -> tuple[threading.Event, threading.Thread]:
    """The watcher, in a thread of this process: it is the catalog's one
    writer while Datasette reads it."""
    from txdb.catalog.watch import watch, watched_roots

    roots = watched_roots(roots)  # a missing folder is an error before serving, not in the thread
    stop = threading.Event()
    report = watch_reporter(False)

    def run() -> None:
        try:
            watch(path, roots, report=report, stop=stop)
        except (TxdbError, sqlite3.OperationalError, OSError) as e:
            echo(terminal_safe(f"Error: {e} (the catalog is no longer kept current)"), err=True)

    thread = threading.Thread(target=run, name="txdb-watch", daemon=True)
    thread.start()
    return stop, thread
