"""Two builds side by side: each serves its own copy of one catalog and the
same pages are fetched from both in turn (A, B, A, B, ...), so a loaded
machine slows both alike; median of --repeat per page and build.

    .venv/bin/python bench/bench_views_ab.py \\
        --a ../base/.venv/bin/txdb /tmp/a/bench.db --b .venv/bin/txdb /tmp/b/bench.db \\
        context_by_category usage_blocks /

A page is a view name (its HTML page, count and facets as Datasette serves
them; add .json for the JSON; a query string may follow), `/` for the
catalog's front page, or a plugin page (`/-/txdb/session/ID`). Give
each build its own copy: a build's migrations change the file it opens.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path


def serve(txdb: str, path: Path) -> tuple[subprocess.Popen, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([txdb, "serve", "--db", str(path), "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    base = f"http://127.0.0.1:{port}"
    for _ in range(1200):
        try:
            urllib.request.urlopen(base + "/-/versions.json", timeout=5).read()
            return proc, base
        except OSError:
            if proc.poll() is not None:
                raise SystemExit(f"{txdb} serve ended: {proc.stderr.read().decode() if proc.stderr else ''}")
            time.sleep(0.1)
    raise SystemExit(f"{txdb} serve did not answer")


def fetch(url: str) -> float:
    t = time.perf_counter()
    try:
        with urllib.request.urlopen(url, timeout=120) as r:
            r.read()
    except urllib.error.HTTPError as e:  # a time limit hit: shown, not fatal
        print(f"{url}: HTTP {e.code}", file=sys.stderr)
        return float("inf")
    return (time.perf_counter() - t) * 1000


def url(base: str, stem: str, page: str) -> str:
    """A page's URL on one server: a view under its database, `/` the
    database's page, a plugin page (`/-/txdb/session/ID`) with ``?db=``."""
    if page.startswith("/-/"):
        return base[:-len(stem) - 1] + page + ("&" if "?" in page else "?") + f"db={stem}"
    return base if page == "/" else f"{base}/{page}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--a", nargs=2, metavar=("TXDB", "DB"), required=True, help="the baseline build and its catalog")
    ap.add_argument("--b", nargs=2, metavar=("TXDB", "DB"), required=True, help="the build measured and its catalog")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("pages", nargs="+")
    args = ap.parse_args()
    procs = []
    try:
        bases = []
        for txdb, dbp in (args.a, args.b):
            proc, base = serve(txdb, Path(dbp))
            procs.append(proc)
            bases.append(f"{base}/{Path(dbp).stem}")
        for b in bases:  # warm each server and its page cache once
            fetch(b)
        stems = [Path(dbp).stem for _, dbp in (args.a, args.b)]
        print(f"load average at start: {os.getloadavg()[0]:.1f}")
        print(f"{'page':34s} {'A ms':>8s} {'B ms':>8s} {'B/A':>6s}  (median of {args.repeat}, interleaved)")
        for page in args.pages:
            times: list[list[float]] = [[], []]
            for _ in range(args.repeat):
                for i, b in enumerate(bases):
                    times[i].append(fetch(url(b, stems[i], page)))
            a, b = (statistics.median(t) for t in times)
            print(f"{page:34s} {a:8.1f} {b:8.1f} {b / a:6.2f}", flush=True)
        print(f"load average at end: {os.getloadavg()[0]:.1f}")
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
