"""The catalog as an archive: its size against what it holds.

    .venv/bin/python bench/bench_archive.py [--corpus DIR ...]

Copies the corpus (sessions, subagent transcripts, their folders'
tool-results/, persisted/, .meta.json) to a scratch folder, builds a
catalog of it with `txdb refresh`, and prints:

- the sessions' bytes and the sidecars' bytes the catalog holds, and the
  catalog's size against both (the ratio);
- the catalog's size by table (indexes with their table; SQLite's dbstat);
- what compressing ``records.raw`` would give: each line zlib-compressed on
  its own (what a compressed column, decompressed per row, would store),
  and each file compressed whole (a lower bound, one blob per file), with
  the catalog's ratio after each.

With ``--export`` (needs pyarrow): the time and bytes of a full `txdb
export`, then of a second export into the same folder after a small append
(the last 4 lines of the largest session written again at its end, and a
refresh), and their ratio: what a daily sync of the folder costs; then
of one more export with nothing changed.

Results also go to bench/out/archive.json.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
TXDB = str(REPO / ".venv" / "bin" / "txdb")
DEFAULT_CORPUS = [REPO.parent / "shared" / "corpus" / "real", REPO.parent / "shared" / "corpus" / "generated"]


def mb(n: float) -> str:
    return f"{n / 1e6:.1f} MB"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", action="append", type=Path)
    ap.add_argument("--out", type=Path, default=HERE / "out" / "archive.json")
    ap.add_argument("--export", action="store_true", help="also time a full and an incremental export")
    args = ap.parse_args(argv)
    corpora = [c.resolve() for c in (args.corpus or DEFAULT_CORPUS)]
    scratch = Path(tempfile.mkdtemp(prefix="txdb-archive-"))
    try:
        roots = []
        for c in corpora:
            dest = scratch / c.name
            shutil.copytree(c, dest, ignore=shutil.ignore_patterns("README.md"))
            roots += ["--root", str(dest)]
        db = scratch / "catalog.db"
        subprocess.run([TXDB, "refresh", *roots, "--db", str(db)], check=True, capture_output=True)
        conn = sqlite3.connect(db)
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        catalog = db.stat().st_size
        sessions = conn.execute("SELECT coalesce(sum(size), 0) FROM files").fetchone()[0]
        sidecars, stored = conn.execute(
            "SELECT coalesce(sum(size), 0), (SELECT coalesce(sum(length(data)), 0) FROM blobs) FROM sidecars"
        ).fetchone()
        by_table: dict[str, int] = {}
        owner = dict(conn.execute("SELECT name, tbl_name FROM sqlite_master WHERE type IN ('table', 'index')"))
        for name, size in conn.execute("SELECT name, sum(pgsize) FROM dbstat GROUP BY name"):
            t = owner.get(name, name)
            t = "blocks_fts" if t.startswith("blocks_fts") else t
            by_table[t] = by_table.get(t, 0) + size
        raw = per_line = 0
        for (data,) in conn.execute("SELECT CAST(raw AS BLOB) FROM records"):
            raw += len(data)
            per_line += len(zlib.compress(data, 6))
        per_file = 0
        for (fid,) in conn.execute("SELECT id FROM files").fetchall():
            blob = b"\n".join(r[0] for r in conn.execute(
                "SELECT CAST(raw AS BLOB) FROM records WHERE file_id = ? ORDER BY offset", (fid,)))
            per_file += len(zlib.compress(blob, 6))
        held = sessions + sidecars
        res = {
            "sessions_bytes": sessions, "sidecar_bytes": sidecars, "sidecar_stored_bytes": stored,
            "catalog_bytes": catalog, "ratio": catalog / held if held else None,
            "ratio_to_sessions": catalog / sessions if sessions else None,
            "by_table": dict(sorted(by_table.items(), key=lambda kv: -kv[1])),
            "records_raw_bytes": raw, "raw_zlib_per_line": per_line, "raw_zlib_per_file": per_file,
            "ratio_raw_per_line": (catalog - raw + per_line) / held if held else None,
            "ratio_raw_per_file": (catalog - raw + per_file) / held if held else None,
        }
        print(f"sessions {mb(sessions)}, sidecars {mb(sidecars)} (stored {mb(stored)}); "
              f"catalog {mb(catalog)}: {res['ratio']:.2f}x what it holds ({res['ratio_to_sessions']:.2f}x the sessions)")
        for t, size in res["by_table"].items():
            if size >= 0.01 * catalog:
                print(f"  {t:<22} {mb(size):>10}  {size / catalog:5.1%}")
        print(f"records.raw {mb(raw)}: zlib per line {mb(per_line)} -> catalog {res['ratio_raw_per_line']:.2f}x; "
              f"per file {mb(per_file)} -> {res['ratio_raw_per_file']:.2f}x")
        if args.export:
            res["export"] = bench_export(conn, db, roots, scratch)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(res, indent=2))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


def bench_export(conn: sqlite3.Connection, db: Path, roots: list[str], scratch: Path) -> dict:
    out = scratch / "export"

    def export() -> dict:
        t0 = time.perf_counter()
        r = subprocess.run([TXDB, "export", str(out), "--db", str(db), "--json"], check=True, capture_output=True)
        rep = json.loads(r.stdout)
        rep["wall"] = time.perf_counter() - t0
        return rep

    full = export()
    path, size = conn.execute("SELECT path, size FROM files WHERE kind = 'session' ORDER BY size DESC").fetchone()
    with open(path, "rb") as fh:
        tail = fh.read().splitlines(keepends=True)[-4:]
    with open(path, "ab") as fh:
        fh.writelines(tail)
    subprocess.run([TXDB, "refresh", *roots, "--db", str(db)], check=True, capture_output=True)
    again = export()
    idle = export()  # nothing changed since: reads the fingerprints, writes nothing
    res = {"noop_seconds": idle["wall"], "full_seconds": full["wall"], "full_bytes": full["bytes"], "full_files": full["files"],
           "update_seconds": again["wall"], "update_bytes": again["bytes"], "update_files": again["files"],
           "superseded": again["superseded"], "appended_to_bytes": size}
    print(f"export: full {full['wall']:.2f}s, {mb(full['bytes'])} in {full['files']} files; after appending "
          f"{len(tail)} lines to the largest session ({mb(size)}): {again['wall']:.2f}s, {mb(again['bytes'])} "
          f"in {again['files']} files ({again['superseded']} superseded) -> "
          f"{again['wall'] / full['wall']:.2f}x the time, {again['bytes'] / max(full['bytes'], 1):.3f}x the bytes; "
          f"with nothing changed {idle['wall']:.2f}s ({idle['wall'] / full['wall']:.2f}x)")
    return res


if __name__ == "__main__":
    sys.exit(main())
