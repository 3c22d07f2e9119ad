"""``txdb-hook``: the Claude Code hook of txdb's plugin (Stop, SessionEnd).

Claude Code runs it with the hook's JSON on stdin (``session_id``,
``transcript_path``, ...). It refreshes the catalog for that session's files
only (the transcript and its subagent transcripts), through the same one-file
refresh as every other command. It must never slow down or break Claude
Code, so it is its own small entry point (no click, no CLI group: the
ingest code is imported only when a file has changed), waits at most
:data:`BUSY_TIMEOUT_MS` on a locked catalog, writes every failure as one line
to ``txdb-hook.log`` beside the catalog, and always exits 0.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from txdb.model import paths, regular

# A hook waits this long for a catalog another txdb is writing, then gives up
# (the next hook, or `txdb refresh`, catches up).
BUSY_TIMEOUT_MS = 300
# The most of history.jsonl a hook reads (a turn's prompts, their pastes):
# what a rewritten or hostile file leaves is read by `txdb refresh`.
HISTORY_BYTES = 64 << 10
LOG_NAME = "txdb-hook.log"
LOG_MAX_BYTES = 256 * 1024  # past this the log starts over


def session_files(payload: bytes | str) -> list[Path]:
    """The transcript a hook payload names and its subagent transcripts,
    when it is a session file under a projects folder txdb reads."""
    from txdb import config
    from txdb.model.paths import is_session_path
    from txdb.catalog.ingest.discover import reached

    data = json.loads(payload)
    if not isinstance(data, dict):
        raise ValueError("the hook input is not a JSON object")
    given = data.get("transcript_path")
    if not isinstance(given, str) or not given or "\x00" in given:
        raise ValueError("the hook input has no transcript_path")
    # Its folder's real path (as discovery sees it: the roots are resolved);
    # `..` and links in the folders are resolved before the checks.
    given_path = Path(os.path.abspath(os.path.expanduser(given)))
    path = Path(os.path.realpath(given_path.parent)) / given_path.name
    if not is_session_path(path):
        raise ValueError(f"{given} is not a session file")
    roots = [r for r in config.projects_roots() if path.is_relative_to(r)]
    if not roots:
        raise ValueError(f"{given} is outside the projects folder ({config.projects_roots()[0]})")
    if not path.is_file():
        return []  # a session that never wrote a line: nothing to index
    # Its subagents as discovery finds them: a symlinked `<session>` or
    # `subagents` folder is not followed (refresh would not catalogue them).
    subagents = sorted(paths.subagents_dir(path).glob("*" + paths.SESSION_SUFFIX))
    return [path, *[p for p in subagents if reached(p, roots[0])]]


def refresh_session(db_path: str | Path, payload: bytes | str) -> dict[str, str]:
    """Refresh the catalog at ``db_path`` for the files the payload names:
    {path: status} ('unchanged', 'new', 'grown', 'rewritten')."""
    from txdb import config

    files = session_files(payload)
    if not files or up_to_date(db_path, files):
        return {}
    from txdb.catalog import db, history
    from txdb.catalog.ingest.store import refresh_path

    root = next(r for r in config.projects_roots() if files[0].is_relative_to(r))
    conn = db.connect(db_path, busy_timeout_ms=BUSY_TIMEOUT_MS)
    try:
        done = {str(p): refresh_path(conn, p, str(root)) for p in files}
        # The prompt Claude Code wrote to history.jsonl as the session grew
        # (read from where the catalog left off; a problem is only skipped;
        # more than a few prompts' worth, a rewritten file: the next refresh).
        history.refresh_roots(conn, [root], warnings=[], max_bytes=HISTORY_BYTES)
        return done
    finally:
        conn.close()


def up_to_date(db_path: str | Path, files: list[Path]) -> bool:
    """Whether the catalog already has every file as it is on disk, asked
    read-only and without the ingest code (the hook's no-op stays short)."""
    import sqlite3

    from txdb.catalog.staleness import stale

    path = Path(db_path).absolute()
    if not path.is_file():
        return False
    try:
        regular.check_sqlite_side_files(path)  # a FIFO there would hang the hook
    except OSError:
        return False  # the full path reports it
    try:
        conn = sqlite3.connect(path.as_uri() + "?mode=ro", uri=True, timeout=BUSY_TIMEOUT_MS / 1000)
        try:
            return not any(stale(conn, str(p)) for p in files)
        finally:
            conn.close()
    except sqlite3.Error:
        return False  # not a catalog yet, or locked: the full path decides and reports


def log_failure(db_path: Path, event: str, error: BaseException) -> None:
    """One line in ``txdb-hook.log`` beside the catalog; never raises."""
    try:
        log = db_path.parent / LOG_NAME
        log.parent.mkdir(parents=True, exist_ok=True)
        mode = "a"
        try:
            if log.stat().st_size > LOG_MAX_BYTES:
                mode = "w"
        except OSError:
            pass
        line = (f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {event or 'hook'}: "
                f"{type(error).__name__}: {error}").replace("\n", " ")
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | (os.O_APPEND if mode == "a" else os.O_TRUNC), 0o600)
        with os.fdopen(fd, "w", encoding="utf-8", errors="replace") as f:
            f.write(line[:2000] + "\n")
    except BaseException:  # noqa: BLE001 - the hook must never fail Claude Code
        pass


def main() -> int:
    """Entry point ``txdb-hook``: read the hook JSON on stdin, refresh, exit 0."""
    db_path = None
    event = ""
    try:
        from txdb import config

        db_path = config.default_db_path()
        payload = sys.stdin.buffer.read(1 << 20)
        try:
            event = str(json.loads(payload).get("hook_event_name") or "")
        except Exception:  # noqa: BLE001 - reported by refresh_session below
            pass
        refresh_session(db_path, payload)
    except BaseException as e:  # noqa: BLE001 - every failure is a log line, never an exit status
        log_failure(Path(db_path) if db_path else Path.home() / ".local/share/txdb/txdb.db", event, e)
    return 0


if __name__ == "__main__":
    sys.exit(main())
