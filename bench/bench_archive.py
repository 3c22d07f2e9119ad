"""The catalog as an archive: its size against what it holds.

    .venv/bin/python bench/bench_archive.py [--corpus DIR ...]

Copies the corpus (sessions, subagent transcripts, their folders'
tool-results/, persisted/, .meta.json) to a scratch folder, builds a
catalog of it with `txdb refresh`, and prints:

- with more than one corpus, each one's catalog built alone: its size
  against the sessions it holds (the ratio);
- the sessions' bytes and the sidecars' bytes the catalog of all of them
  holds, and the catalog's size against both (the ratio);
- the catalog's size by table (indexes with their table; SQLite's dbstat);
- the raw lines' bytes and what ``raw_chunks`` stores of them, beside
  each line zlib-compressed on its own (what a compressed column,
  decompressed per row, would store) and each file compressed whole (one
  blob per file), with the catalog's ratio with each instead.

- restore beside `cp` (``--restore-mb``, default 100; 0 skips it): a
  session of that size built from the generated corpus
  (``bench_refresh.build_big_session``, the surgery bench's big session),
  catalogued, deleted, and given back by `txdb restore`: its time and peak
  RSS against `cp` of the same file (ratios), and what the next refresh
  then reads (nothing: the restored file is the catalogued one); beside
  `cp` + `sync` of the copy too (restore fsyncs its file). With
  ``TXDB_BENCH_BASE=path/to/txdb``, that build's restores interleaved.

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
import os
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
sys.path.insert(0, str(HERE))
from bench_refresh import LAST_CPU, build_big_session, compile_txdb, median, run_proc, session_files  # noqa: E402
TXDB = str(REPO / ".venv" / "bin" / "txdb")
# another build's txdb (TXDB_BENCH_BASE), its restores interleaved with this one's, same catalog
BASE_TXDB = os.environ.get("TXDB_BENCH_BASE")
DEFAULT_CORPUS = [REPO.parent / "shared" / "corpus" / "real", REPO.parent / "shared" / "corpus" / "generated"]
sys.path.insert(0, str(REPO))
from txdb.catalog.ingest import chunks  # noqa: E402


def mb(n: float) -> str:
    return f"{n / 1e6:.1f} MB"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", action="append", type=Path)
    ap.add_argument("--out", type=Path, default=HERE / "out" / "archive.json")
    ap.add_argument("--restore-mb", type=int, default=100, help="size of the restored session (0: skip)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--restore-only", action="store_true", help="only the restore figures")
    ap.add_argument("--export", action="store_true", help="also time a full and an incremental export")
    args = ap.parse_args(argv)
    compile_txdb()  # the bytecode an installed txdb has: no restore compiles its modules first
    if args.restore_only:
        res = bench_restore([c.resolve() for c in (args.corpus or DEFAULT_CORPUS)], args.restore_mb, args.reps)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"restore": res}, indent=2))
        return 0
    corpora = [c.resolve() for c in (args.corpus or DEFAULT_CORPUS)]
    scratch = Path(tempfile.mkdtemp(prefix="txdb-archive-"))
    try:
        roots = []
        for c in corpora:
            dest = scratch / c.name
            shutil.copytree(c, dest, ignore=shutil.ignore_patterns("README.md"))
            roots += ["--root", str(dest)]
        # Each corpus alone first (its ratio only), then all of them in one catalog.
        each = {}
        if len(corpora) > 1:
            for c in corpora:
                one = measure(scratch, ["--root", str(scratch / c.name)], f"alone-{c.name}")
                each[c.name] = {k: one[k] for k in ("sessions_bytes", "catalog_bytes", "ratio", "ratio_to_sessions")}
                print(f"{c.name} alone: sessions {mb(one['sessions_bytes'])}, catalog {mb(one['catalog_bytes'])}: "
                      f"{one['ratio_to_sessions']:.2f}x the sessions ({one['ratio']:.2f}x with sidecars)")
        db = scratch / "catalog.db"
        res = measure(scratch, roots, "catalog", detail=True)
        res["each"] = each
        conn = sqlite3.connect(db)
        if args.restore_mb:
            res["restore"] = bench_restore(corpora, args.restore_mb, args.reps)
        if args.export:
            res["export"] = bench_export(conn, db, roots, scratch)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(res, indent=2))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


def measure(scratch: Path, roots: list[str], name: str, detail: bool = False) -> dict:
    """Build a catalog of ``roots`` with `txdb refresh` and measure it: its
    size against the sessions (and sidecars) it holds, by table; with
    ``detail``, the raw lines against zlib per line and per file (printed)."""
    db = scratch / f"{name}.db"
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
    per_file = 0
    packed = conn.execute("SELECT coalesce(sum(length(data)), 0) FROM raw_chunks").fetchone()[0]
    for (fid,) in conn.execute("SELECT id FROM files").fetchall() if detail else []:
        pieces = [data for _, data in chunks.raw_lines(conn, fid)]
        for data in pieces:
            raw += len(data)
            per_line += len(zlib.compress(data, 6))
        per_file += len(zlib.compress(b"\n".join(pieces), 6))
    held = sessions + sidecars
    res = {
        "sessions_bytes": sessions, "sidecar_bytes": sidecars, "sidecar_stored_bytes": stored,
        "catalog_bytes": catalog, "ratio": catalog / held if held else None,
        "ratio_to_sessions": catalog / sessions if sessions else None,
        "by_table": dict(sorted(by_table.items(), key=lambda kv: -kv[1])),
        "records_raw_bytes": raw, "raw_zlib_per_line": per_line, "raw_zlib_per_file": per_file,
        "raw_stored": packed,
        "ratio_raw_per_line": (catalog - packed + per_line) / held if held else None,
        "ratio_raw_per_file": (catalog - packed + per_file) / held if held else None,
    }
    if not detail:
        conn.close()
        return res
    print(f"sessions {mb(sessions)}, sidecars {mb(sidecars)} (stored {mb(stored)}); "
          f"catalog {mb(catalog)}: {res['ratio']:.2f}x what it holds ({res['ratio_to_sessions']:.2f}x the sessions)")
    for t, size in res["by_table"].items():
        if size >= 0.01 * catalog:
            print(f"  {t:<22} {mb(size):>10}  {size / catalog:5.1%}")
    print(f"raw lines {mb(raw)}: stored in raw_chunks {mb(packed)} ({packed / raw:.2f}x); instead zlib per "
          f"line {mb(per_line)} -> catalog {res['ratio_raw_per_line']:.2f}x, per file {mb(per_file)} -> "
          f"{res['ratio_raw_per_file']:.2f}x")
    conn.close()
    return res


def bench_restore(corpora: list[Path], target_mb: int, reps: int) -> dict:
    """`txdb restore` of a deleted session of ``target_mb`` MB against `cp`
    of it: time and peak RSS (medians of ``reps``), as ratios."""
    gen = [c for c in corpora if c.name == "generated"] or corpora
    srcs = sorted((p for c in gen for p in session_files(c) if "subagents" not in p.parts),
                  key=lambda p: -p.stat().st_size)
    scratch = Path(tempfile.mkdtemp(prefix="txdb-restore-"))
    try:
        proj = scratch / "projects" / "-bench-restore"
        proj.mkdir(parents=True)
        tmp = proj / "building.jsonl"
        info = build_big_session(srcs, tmp, target_mb * 1_000_000)
        big = proj / f"{info['session_id']}.jsonl"
        tmp.rename(big)
        size = big.stat().st_size
        db = scratch / "catalog.db"
        env = dict(os.environ, TXDB_DB=str(db))
        subprocess.run([TXDB, "refresh", "--root", str(scratch / "projects")], check=True, capture_output=True, env=env)
        original = big.read_bytes()
        cps, cp_rss, restores, restore_rss, reread = [], [], [], [], []
        syncs, cpus, base, base_cpu = [], [], [], []
        for rnd in range(reps):
            copy = scratch / "copy.jsonl"
            dt, rss, rc, err = run_proc(["cp", str(big), str(copy)])
            assert rc == 0, err
            cps.append(dt)
            cp_rss.append(rss)
            copy.unlink()
            # cp, then the copy made durable as restore makes its file (`sync FILE`: an fsync of it)
            dt, _, rc, err = run_proc(["sh", "-c", 'cp "$0" "$1" && sync "$1"', str(big), str(copy)])
            assert rc == 0, err
            syncs.append(dt)
            copy.unlink()
            for which in ((BASE_TXDB, TXDB) if rnd % 2 else (TXDB, BASE_TXDB)) if BASE_TXDB else (TXDB,):
                big.unlink()
                subprocess.run([TXDB, "refresh", "--root", str(scratch / "projects")], check=True,
                               capture_output=True, env=env)
                dt, rss, rc, err = run_proc([which, "restore", info["session_id"]], env=env)
                assert rc == 0, err
                assert big.read_bytes() == original, "restore was not byte-identical"
                if which == TXDB:
                    restores.append(dt)
                    restore_rss.append(rss)
                    cpus.append(LAST_CPU[0])
                else:
                    base.append(dt)
                    base_cpu.append(LAST_CPU[0])
            out = subprocess.run([TXDB, "refresh", "--root", str(scratch / "projects"), "--json"], check=True,
                                 capture_output=True, env=env).stdout
            reread.append(json.loads(out)["bytes"])
        res = {"bytes": size, "cp_seconds": median(cps), "restore_seconds": median(restores),
               "cp_sync_seconds": median(syncs), "restore_cpu": median(cpus),
               "cp_peak_rss": median(cp_rss), "restore_peak_rss": median(restore_rss),
               "time_ratio": median(restores) / median(cps), "rss_to_file": median(restore_rss) / size,
               "sync_ratio": median(restores) / median(syncs),
               "refresh_after_restore_bytes": max(reread)}
        print(f"restore of a {mb(size)} session: {res['restore_seconds']:.2f}s against {res['cp_seconds']:.3f}s "
              f"for cp ({res['time_ratio']:.1f}x) and {res['cp_sync_seconds']:.3f}s for cp + sync of the copy "
              f"({res['sync_ratio']:.1f}x); CPU {res['restore_cpu']:.2f}s; peak RSS {mb(res['restore_peak_rss'])} "
              f"({res['rss_to_file']:.2f}x the file; cp {mb(res['cp_peak_rss'])}); "
              f"the next refresh read {res['refresh_after_restore_bytes']:,} bytes")
        if BASE_TXDB:
            res.update(base_seconds=median(base), base_cpu=median(base_cpu))
            print(f"  interleaved, {BASE_TXDB}: {median(base):.2f}s, CPU {median(base_cpu):.2f}s; this / that: "
                  f"wall {median(restores) / median(base):.2f}x, CPU {median(cpus) / median(base_cpu):.2f}x")
        return res
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


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
