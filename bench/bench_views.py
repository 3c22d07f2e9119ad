"""Response time of every view of the catalog, plain SQLite and through
Datasette (txdb serve's settings), on a benchmark catalog.

    .venv/bin/python bench/bench_views.py                 # ../shared/corpus, once
    .venv/bin/python bench/bench_views.py --copies 10     # the corpus under 10 roots
    .venv/bin/python bench/bench_views.py --db /tmp/big.db  # an existing catalog

Columns: `page` is the first page's SQL (select * ... limit 101), `count`
the count(*) Datasette runs beside it, `html` and `json` the whole Datasette
response (page + count + facets); then the front page (the catalog's page)
and the charts page. Best of --repeat runs. A view is flagged when its page
SQL takes more than 500 ms; the run fails when any page does.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from txdb.catalog import db  # noqa: E402
from txdb.web.metadata import make_datasette  # noqa: E402
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


async def datasette_times(path: Path, names: list[str], repeat: int) -> dict[str, tuple[float, float]]:
    ds = make_datasette(path)
    await ds.invoke_startup()
    out = {}
    for name in names:
        res = []
        for url in (f"/{path.stem}/{name}", f"/{path.stem}/{name}.json"):
            times = []
            for _ in range(repeat):
                t = time.perf_counter()
                r = await ds.client.get(url)
                times.append((time.perf_counter() - t) * 1000)
                if r.status_code != 200:  # a time limit hit: shown, not fatal
                    print(f"{url}: HTTP {r.status_code}", file=sys.stderr)
                    times[-1] = float("inf")
            res.append(min(times))
        out[name] = tuple(res)
    # the front page (the catalog's database page, txdb.web.front) and the charts
    for label, url in (("(front page)", f"/{path.stem}"), ("(charts page)", f"/-/txdb/charts?db={path.stem}")):
        times = []
        for _ in range(repeat):
            t = time.perf_counter()
            r = await ds.client.get(url)
            times.append((time.perf_counter() - t) * 1000 if r.status_code == 200 else float("inf"))
        out[label] = (min(times), float("nan"))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--db", type=Path, help="an existing catalog (else one is built from ../shared/corpus)")
    ap.add_argument("--copies", type=int, default=1, help="refresh the corpus under this many copied roots")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-datasette", action="store_true", help="plain SQLite timings only")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="txdb-bench-views-") as tmp:
        if args.db:
            path = args.db
            db.connect(path).close()
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
        ds_times = {} if args.no_datasette else asyncio.run(datasette_times(path, names, args.repeat))
        print(f"{'view':34s} {'page':>8s} {'count':>8s} {'html':>8s} {'json':>8s}  (ms, best of {args.repeat})")
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
