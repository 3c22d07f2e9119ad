"""The minimal mirror that `txdb refresh` is measured against.

Run as its own process: ``python bench/mirror.py --db OUT.db ROOT [ROOT ...]``.
It does the least a line-by-line mirror can do: find every ``*.jsonl``
under the roots (skipping ``tool-results/`` folders, as txdb does), read it
line by line, ``orjson.loads`` each line, and INSERT the raw text of each
line into one table; WAL with ``synchronous=off``, one transaction per file.
No indexes beyond the primary key, no derived rows, no incremental cursor.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import sys
import time

import orjson


def files_under(root: str):
    for folder, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if d != "tool-results"]
        for name in names:
            if name.endswith(".jsonl"):
                yield os.path.join(folder, name)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--db", required=True)
    ap.add_argument("roots", nargs="+")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    conn = sqlite3.connect(args.db, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = OFF")
    conn.execute(
        "CREATE TABLE IF NOT EXISTS lines (path TEXT NOT NULL, line INTEGER NOT NULL, "
        "raw TEXT NOT NULL, PRIMARY KEY (path, line))"
    )
    n_lines = n_bytes = bad = 0
    for root in args.roots:
        for path in files_under(root):
            conn.execute("BEGIN")
            with open(path, "rb") as fh:
                for number, raw in enumerate(fh, 1):
                    n_bytes += len(raw)
                    body = raw.rstrip(b"\r\n")
                    try:
                        orjson.loads(body)
                    except orjson.JSONDecodeError:
                        bad += 1
                    conn.execute(
                        "INSERT INTO lines VALUES (?, ?, ?)",
                        (path, number, body.decode("utf-8", "replace")),
                    )
                    n_lines += 1
            conn.execute("COMMIT")
    conn.close()
    dt = time.perf_counter() - t0
    print(f"{n_lines} lines ({bad} unparseable), {n_bytes / 1e6:.1f} MB in {dt:.2f}s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
