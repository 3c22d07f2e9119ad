"""Response time of every view of the catalog, plain SQLite and over HTTP
from a `txdb serve` process, on a benchmark catalog.

    .venv/bin/python bench/bench_views.py                 # ../shared/corpus, once
    .venv/bin/python bench/bench_views.py --copies 10     # the corpus under 10 roots
    .venv/bin/python bench/bench_views.py --copies 10 --keep /tmp/b10  # built once, reused next time
    .venv/bin/python bench/bench_views.py --db /tmp/big.db  # an existing catalog

Columns: `page` is the first page's SQL (select * ... limit 101), `count`
the count(*) Datasette runs beside it (best of --repeat), `html` and `json`
the whole response as a user fetches it over HTTP (page + count + facets;
median of --repeat); then the front page (the catalog's page) and the
charts page. A view is flagged when its page SQL takes more than 500 ms;
the run fails when any page does.
"""

from __future__ import annotations

import argparse
import shutil
import socket
import statistics
import subprocess
import sqlite3
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from txdb.catalog import db  # noqa: E402
from txdb.catalog.ingest.store import refresh  # noqa: E402

CORPUS = HERE.parent.parent / "shared" / "corpus"
LIMIT_MS = 500


def build(copies: int, workdir: Path) -> Path:
    roots = []
    for i in range(copies):
        for part in ("real", "generated"):
            src = CORPUS / part
            if copies == 1:
                roots.append(src)
            else:
                dst = workdir / f"copy{i}" / part
                shutil.copytree(src, dst)
                roots.append(dst)
    path = workdir / "bench.db"
    conn = db.connect(path)
    t = time.perf_counter()
    stats = refresh(conn, roots)
    print(f"built {path}: {stats.summary()} ({time.perf_counter() - t:.1f}s)", file=sys.stderr)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return path


def best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1000)
    return min(times)


def http_times(path: Path, names: list[str], repeat: int) -> dict[str, tuple[float, float]]:
    """Each view's HTML and JSON page, the front page and the charts page as
    a user fetches them: over HTTP from a `txdb serve` process (its
    settings, count and facets included), median of --repeat."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    txdb = Path(sys.executable).with_name("txdb")
    proc = subprocess.Popen([str(txdb), "serve", "--db", str(path), "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            try:
                urllib.request.urlopen(base + "/-/versions.json", timeout=5).read()
                break
            except OSError:
                if proc.poll() is not None:
                    raise SystemExit(f"txdb serve ended: {proc.stderr.read().decode()}")
                time.sleep(0.1)

        def fetch(url: str) -> float:
            times = []
            for _ in range(repeat):
                t = time.perf_counter()
                try:
                    with urllib.request.urlopen(base + url, timeout=60) as r:
                        r.read()
                    times.append((time.perf_counter() - t) * 1000)
                except urllib.error.HTTPError as e:  # a time limit hit: shown, not fatal
                    print(f"{url}: HTTP {e.code}", file=sys.stderr)
                    times.append(float("inf"))
            return statistics.median(times)

        out = {name: (fetch(f"/{path.stem}/{name}"), fetch(f"/{path.stem}/{name}.json")) for name in names}
        # the front page (the catalog's database page, txdb.web.front) and the charts
        for label, url in (("(front page)", f"/{path.stem}"), ("(charts page)", f"/-/txdb/charts?db={path.stem}")):
            out[label] = (fetch(url), float("nan"))
        return out
    finally:
        proc.terminate()
        proc.wait(10)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--db", type=Path, help="an existing catalog (else one is built from ../shared/corpus)")
    ap.add_argument("--keep", type=Path, metavar="DIR",
                    help="build into DIR and keep it (DIR/bench.db is reused by the next run with the same --keep)")
    ap.add_argument("--copies", type=int, default=1, help="refresh the corpus under this many copied roots")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-datasette", action="store_true", help="plain SQLite timings only")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="txdb-bench-views-") as tmp:
        if args.db:
            path = args.db
            db.connect(path).close()
        elif args.keep and (args.keep / "bench.db").exists():
            path = args.keep / "bench.db"
            db.connect(path).close()
        elif args.keep:
            args.keep.mkdir(parents=True, exist_ok=True)
            path = build(args.copies, args.keep)
        else:
            if not CORPUS.is_dir():
                raise SystemExit(f"no corpus at {CORPUS}; pass --db")
            path = build(args.copies, Path(tmp))
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'view' ORDER BY name")]
        counts = {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
                  for t in ("files", "records", "blocks")}
        print(f"catalog {path}: {path.stat().st_size / 1e6:.0f} MB, {counts['files']:,} files, "
              f"{counts['records']:,} records, {counts['blocks']:,} blocks")
        sql_times = {}
        for name in names:
            page = best(lambda: conn.execute(f'SELECT * FROM "{name}" LIMIT 101').fetchall(), args.repeat)
            count = best(lambda: conn.execute(f'SELECT count(*) FROM "{name}"').fetchall(), args.repeat)
            sql_times[name] = (page, count)
        # a full-text search, as the search views run it
        for name in [n for n in names if n.startswith("search_")]:
            q = (f'SELECT * FROM "{name}" WHERE block_rowid IN '
                 "(SELECT rowid FROM blocks_fts WHERE blocks_fts MATCH 'error') LIMIT 101")
            sql_times[name + "?_search=error"] = (best(lambda: conn.execute(q).fetchall(), args.repeat), 0.0)
        conn.close()
        ds_times = {} if args.no_datasette else http_times(path, names, args.repeat)
        print(f"{'view':34s} {'page':>8s} {'count':>8s} {'html':>8s} {'json':>8s}  (ms; page, count: best of {args.repeat}; html, json: median over HTTP)")
        slow = []
        for name, (page, count) in sql_times.items():
            h, j = ds_times.get(name, (float("nan"), float("nan")))
            flag = "  SLOW" if page > LIMIT_MS else ""
            if flag:
                slow.append(name)
            print(f"{name:34s} {page:8.1f} {count:8.1f} {h:8.1f} {j:8.1f}{flag}")
        for name in [n for n in ds_times if n.startswith("(")]:
            print(f"{name:34s} {'':8s} {'':8s} {ds_times[name][0]:8.1f}")
        slow_pages = [n for n, (h, j) in ds_times.items() if max(h, j if j == j else 0) > LIMIT_MS]
        print(f"\n{len(slow)} of {len(sql_times)} over {LIMIT_MS} ms (page SQL): {', '.join(slow) or 'none'}")
        print(f"{len(slow_pages)} of {len(ds_times)} Datasette pages over {LIMIT_MS} ms (with count and facets): "
              f"{', '.join(slow_pages) or 'none'}")
        return 1 if slow or slow_pages else 0


if __name__ == "__main__":
    sys.exit(main())
