"""What an open costs that computes every stored estimate again (the open
after a migration that changed the estimate's rules: db.rederive), against
an open with nothing to do.

    .venv/bin/python bench/bench_rederive.py                 # ../shared/corpus, once
    .venv/bin/python bench/bench_rederive.py --copies 10     # the corpus under 10 roots
    .venv/bin/python bench/bench_rederive.py --db /tmp/big.db  # an existing catalog (a copy is used)

Best of --repeat runs of each; the catalog is a copy, flagged again before
each run of the first kind.
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from txdb.catalog import db  # noqa: E402
from bench_views import CORPUS, build  # noqa: E402


def timed_open(path: Path) -> float:
    t = time.perf_counter()
    db.connect(path).close()
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--copies", type=int, default=1)
    ap.add_argument("--db", type=Path, help="an existing catalog (else one is built from ../shared/corpus)")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        if args.db:
            path = work / "copy.db"
            src = sqlite3.connect(args.db.resolve().as_uri() + "?mode=ro", uri=True)
            src.backup(sqlite3.connect(path))
            src.close()
        else:
            if not CORPUS.is_dir():
                raise SystemExit(f"no corpus at {CORPUS}; pass --db")
            path = build(args.copies, work)
        db.connect(path).close()  # migrated, views made: what follows is only the work timed
        sessions = sqlite3.connect(path).execute("SELECT count(*) FROM sessions").fetchone()[0]
        redo, idle = [], []
        for _ in range(args.repeat):
            raw = sqlite3.connect(path)
            raw.execute("INSERT OR REPLACE INTO _txdb_meta VALUES (?, 'bench')", (db.REDERIVE_ESTIMATES,))
            raw.commit()
            raw.close()
            redo.append(timed_open(path))
            idle.append(timed_open(path))
        print(f"{sessions} sessions: open computing every estimate again {min(redo) * 1000:.0f} ms "
              f"({min(redo) / sessions * 1000:.2f} ms a session); open with nothing to do {min(idle) * 1000:.1f} ms")


if __name__ == "__main__":
    main()
