"""txdb side by side with session-stripper (the surgery spec's own tool) on
the same copies of the same files.

    .venv/bin/python bench/bench_peer.py [--size-mb N] [--real PATH ...] [--reps N] [--only CMD ...] [--txdb EXE]

Files: the ~100 MB session bench_surgery.py times (``build_big_session`` of
bench_refresh.py) and two real corpus sessions (../shared/corpus/real).
Commands both tools have, as whole processes (start-up included), each run
on a fresh copy of the file in its own project folder (no pending copy, no
sidecars, no earlier fork), txdb and the peer interleaved run for run,
median of 3: wall-clock, CPU (user + system of the child, from ``wait4``)
and peak RSS; the ratio txdb/peer per command.

Same work on both sides: the same positions (txdb's span, checked against
the peer's: the compact-range sidecar names are the records' uuids in both
layouts, so the two sets must be equal), the peer's strip-all with
``--keep-attachments`` (txdb's strip-all leaves attachments to
strip-attachments), ``--no-backup`` (neither makes a backup before apply).
After each run the outputs are checked: the pending copy (or the new
session of compact), and the sidecar files (``tool-results/*.txt``,
``persisted/message/*.json``) are counted; a run whose outputs differ
from the other tool's is flagged in the table, never silently compared.

The peer: ``$TXDB_BENCH_STRIPPER`` (the path of stripper.py) or
``~/.cache/txdb-bench/skills/session-stripper/scripts/stripper.py`` (from
github.com/vicnaum/vics-agent-skills, skills/session-stripper). It is run,
never imported; its scripts are copied to the scratch folder and compiled
there, as txdb's bytecode is (``compile_txdb``), so that neither process
compiles its modules. Without it the peer column is skipped and the
script says how to get it.

Results go to bench/out/peer.json.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench_refresh import (  # noqa: E402
    DEFAULT_CORPUS, LAST_CPU, TXDB, build_big_session, compile_txdb, mb, median, rm_db, run_proc, say,
    session_files,
)
from bench_surgery import compact_cut, range_spans  # noqa: E402

from txdb.model.transcript import Transcript  # noqa: E402

CACHE = Path(os.environ.get("TXDB_BENCH_CACHE", Path.home() / ".cache" / "txdb-bench"))
STRIPPER = Path(os.environ.get("TXDB_BENCH_STRIPPER",
                               CACHE / "skills" / "session-stripper" / "scripts" / "stripper.py"))
REAL = [DEFAULT_CORPUS[0] / "hannibal8856-claude_backup" / "-home-moxa-sdc1-home-moxa-mds4xgl3-buildroot-dl"
        / "d3f32579-7f66-464a-b856-526a67163a15.jsonl",
        DEFAULT_CORPUS[0] / "4thehalibit-omarchy-backup" / "-home-vwestberg-Claude"
        / "1fb5e404-604d-4a2b-baf1-3beb42a67371.jsonl"]
KEEP_RECENT = 3
HOW_TO_GET = ("session-stripper not found: clone github.com/vicnaum/vics-agent-skills and point "
              "TXDB_BENCH_STRIPPER at skills/session-stripper/scripts/stripper.py (or unpack that folder "
              "to ~/.cache/txdb-bench/skills/session-stripper)")


def commands(span: tuple[int, int], cut: int) -> list[tuple[str, list[str], list[str]]]:
    """(name, txdb's arguments after the path, the peer's) for every command both have."""
    a, b = span
    return [
        ("strip-all", ["strip-all"], ["strip-all", "--keep-attachments", "--no-backup"]),
        ("strip-tools --only-results", ["strip-tools", "--only-results"],
         ["strip-tools", "--only-results", "--no-backup"]),
        ("strip-thinking", ["strip-thinking"], ["strip-thinking", "--no-backup"]),
        (f"persist-tools --keep-recent {KEEP_RECENT}",
         ["persist-tools", "--keep-recent", str(KEEP_RECENT), "--min-chars", "0"],
         ["persist-tools", "--keep-recent", str(KEEP_RECENT), "--no-backup"]),
        (f"compact-range --from {a} --to {b}", ["compact-range", "--from", str(a), "--to", str(b)],
         ["compact-range", "--from", str(a), "--to", str(b), "--no-backup"]),
        (f"compact --before {cut}", ["compact", "--before", str(cut)], ["compact", "--before", str(cut),
                                                                          "--no-backup"]),
        ("analyze", ["analyze"], ["analyze"]),
    ]


def fresh_copy(src: Path, proj: Path) -> Path:
    """The file alone in an empty project folder (no pending copy, sidecars or fork left)."""
    shutil.rmtree(proj, ignore_errors=True)
    proj.mkdir(parents=True)
    dst = proj / src.name
    shutil.copyfile(src, dst)
    return dst


def outputs(path: Path, session_id: str) -> dict:
    """What a run left: the pending copy's size, new session files, the sidecar names
    (the peer's persist-tools writes ``.tool-results/`` in the project folder)."""
    proj = path.parent
    pending = path.with_name(path.name + ".pending")
    sdir = proj / session_id
    return {
        "pending_bytes": pending.stat().st_size if pending.is_file() else None,
        "markers": pending.read_bytes().count(b"<persisted-output>") if pending.is_file() else 0,
        "new_sessions": sorted(p.name for p in proj.glob("*.jsonl") if p != path),
        "tool_results": sorted(p.name for d in (sdir / "tool-results", proj / ".tool-results")
                               for p in d.glob("*.txt")),
        "messages": sorted(p.name for p in (sdir / "persisted" / "message").glob("*.json")),
    }


def same_work(name: str, t: dict, p: dict) -> tuple[str, str]:
    """(what the two runs share, what differs beyond the tools' own rules: '' when nothing).

    compact-range: the same positions name the same records, but txdb leaves
    state records (``skill_listing``, ``*_delta``, the system prompt) in
    place, and the two tools' active chains may differ at an end: txdb's
    saved records must be the peer's (all but 1%). persist-tools: txdb
    moves only results whose marker is smaller than the result, the peer
    every one: the markers in each pending copy are counted (file names
    are not comparable: on the built session tool ids repeat, and txdb
    gives a second result of one id its own name where the peer overwrites
    the first); neither may be a no-op while the other is not."""
    if name.startswith("analyze"):
        return "", ""
    if name.startswith("compact --before"):
        ok = len(t["new_sessions"]) == len(p["new_sessions"]) == 1
        return "a new session each", "" if ok else f"new sessions {len(t['new_sessions'])}/{len(p['new_sessions'])}"
    if (t["pending_bytes"] is None) != (p["pending_bytes"] is None):
        return "", f"pending copy {t['pending_bytes'] is not None}/{p['pending_bytes'] is not None}"
    if name.startswith("compact-range"):
        common = len(set(t["messages"]) & set(p["messages"]))
        share = f"{len(t['messages']):,}/{len(p['messages']):,} records saved, {common:,} the same"
        return share, "" if t["messages"] and common >= 0.99 * len(t["messages"]) else "other records"
    if name.startswith("persist-tools"):
        share = (f"{t['markers']:,}/{p['markers']:,} results moved, "
                 f"{len(t['tool_results']):,}/{len(p['tool_results']):,} files")
        return share, "" if bool(t["markers"]) == bool(p["markers"]) else "one side moved nothing"
    return "", ""


# rescue's steps (txdb/surgery/rescue.py STEPS) and the command of both tools doing that step's work.
RESCUE_STEPS = [("strip-attachments", None), ("persist-tools", "persist-tools"),
                ("persist-thinkings", "strip-thinking"), ("compact-range", "compact-range")]


def rescue_steps(rows: list[dict], out: dict) -> None:
    """Per step rescue runs, txdb's and the peer's time for the command doing
    it, from this run's rows: a step slower than the peer's is flagged."""
    by = {r["command"].split()[0]: r for r in rows if "peer" in r}
    say("  rescue's steps, txdb against session-stripper (the same runs):")
    out["rescue_steps"] = []
    for step, cmd in RESCUE_STEPS:
        r = by.get(cmd or "")
        if r is None:
            say(f"    {step:<20} {'(no peer command)' if cmd is None else '(not run)'}")
            continue
        tx, pr = r["txdb"], r["peer"]
        flag = "  SLOWER" if tx["cpu_seconds"] > pr["cpu_seconds"] else ""
        say(f"    {step:<20} as {r['command']:<34} txdb {tx['seconds']:.2f}s / peer {pr['seconds']:.2f}s = "
            f"{r['ratio_wall']:.2f}x wall, {r['ratio_cpu']:.2f}x cpu{flag}")
        out["rescue_steps"].append({"step": step, "command": r["command"], "ratio_wall": r["ratio_wall"],
                                    "ratio_cpu": r["ratio_cpu"]})


def peer_scripts(scratch: Path) -> Path | None:
    if not STRIPPER.is_file():
        say(HOW_TO_GET)
        return None
    dst = scratch / "stripper-scripts"
    shutil.copytree(STRIPPER.parent, dst)
    compileall.compile_dir(str(dst), quiet=1)
    return dst / STRIPPER.name


def bench_file(src: Path, tag: str, scratch: Path, peer: Path | None, reps: int, only: list[str],
               results: dict) -> None:
    t = Transcript.load(src)
    sid, n = t.session_id, len(t.chain)
    cut = compact_cut(t)
    _a, _b, wa, wb = range_spans(t, cut)
    del t
    size = src.stat().st_size
    say(f"\n== {tag}: {src.name}, {mb(size):.1f} MB, chain {n:,} ==")
    proj = scratch / tag / "-bench-peer"
    db = scratch / f"{tag}.db"
    rm_db(db)
    fresh_copy(src, proj)
    _dt, _rss, rc, err = run_proc([TXDB, "refresh", "--root", str(proj.parent), "--db", str(db)])
    if rc:
        raise SystemExit(f"refresh failed: {err}")
    rows = []
    out = {"file": str(src), "bytes": size, "chain": n, "span": [wa, wb], "cut": cut, "commands": rows}
    results["files"].append(out)
    say(f"  {'command':<34} {'txdb s':>7} {'peer s':>7} {'wall':>6} {'txdb cpu':>8} {'peer cpu':>8} "
        f"{'cpu':>6} {'txdb MB':>7} {'peer MB':>7}  outputs (txdb/peer)")
    for name, targs, pargs in commands((wa, wb), cut):
        if only and not any(name.startswith(o) for o in only):
            continue
        runs: dict[str, list] = {"txdb": [], "peer": []}
        seen: dict[str, dict] = {}
        for _ in range(reps):
            sides = [("txdb", [TXDB, targs[0], "{path}", *targs[1:], "--db", str(db)])]
            if peer is not None:
                sides.append(("peer", [sys.executable, str(peer), pargs[0], "{path}", *pargs[1:]]))
            for side, cmd in sides:
                path = fresh_copy(src, proj)
                argv = [str(path) if a == "{path}" else a for a in cmd]
                dt, rss, rc, err = run_proc(argv)
                if rc:
                    raise SystemExit(f"{side} {name} failed ({rc}): {err}")
                runs[side].append((dt, LAST_CPU[0], rss))
                seen[side] = outputs(path, sid)
        row = {"command": name}
        for side, rs in runs.items():
            if rs:
                row[side] = {"seconds": median([r[0] for r in rs]), "cpu_seconds": median([r[1] for r in rs]),
                             "peak_rss": median([r[2] for r in rs]), "runs": rs,
                             "sidecars": len(seen[side]["tool_results"]) + len(seen[side]["messages"]),
                             "pending_bytes": seen[side]["pending_bytes"]}
        tx = row["txdb"]
        if "peer" in row:
            pr = row["peer"]
            row["ratio_wall"] = tx["seconds"] / pr["seconds"]
            row["ratio_cpu"] = tx["cpu_seconds"] / pr["cpu_seconds"]
            files, row["differs"] = same_work(name, seen["txdb"], seen["peer"])
            row["outputs"] = files
            say(f"  {name:<34} {tx['seconds']:7.2f} {pr['seconds']:7.2f} {row['ratio_wall']:5.2f}x "
                f"{tx['cpu_seconds']:8.2f} {pr['cpu_seconds']:8.2f} {row['ratio_cpu']:5.2f}x "
                f"{mb(tx['peak_rss']):7.0f} {mb(pr['peak_rss']):7.0f}  {files}"
                f"{'  NOT THE SAME WORK: ' + row['differs'] if row['differs'] else ''}")
        else:
            say(f"  {name:<34} {tx['seconds']:7.2f} {'-':>7} {'-':>6} {tx['cpu_seconds']:8.2f} {'-':>8} "
                f"{'-':>6} {mb(tx['peak_rss']):7.0f} {'-':>7}")
        rows.append(row)
    rescue_steps(rows, out)
    shutil.rmtree(proj.parent, ignore_errors=True)
    rm_db(db)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mb", type=int, default=100, help="size of the built session (0: none)")
    ap.add_argument("--real", action="append", type=Path, help="a real session file (repeatable)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--only", action="append", default=[], help="only commands starting so (repeatable)")
    ap.add_argument("--txdb", default=None, help="the txdb executable to run (default: the venv's)")
    ap.add_argument("--out", type=Path, default=HERE / "out" / "peer.json")
    args = ap.parse_args(argv)
    if args.txdb:
        global TXDB
        TXDB = args.txdb
    compile_txdb()
    scratch = Path(tempfile.mkdtemp(prefix="txdb-bench-peer-"))
    results: dict = {"reps": args.reps, "python": sys.version.split()[0], "machine": platform.platform(),
                     "cpus": os.cpu_count(), "started": time.strftime("%Y-%m-%dT%H:%M:%S"),
                     "peer": str(STRIPPER), "files": []}
    try:
        peer = peer_scripts(scratch)
        if args.size_mb:
            gen = [c for c in DEFAULT_CORPUS if c.name == "generated"]
            srcs = sorted((p for c in gen for p in session_files(c) if "subagents" not in p.parts),
                          key=lambda p: -p.stat().st_size)
            tmp = scratch / "building.jsonl"
            info = build_big_session(srcs, tmp, args.size_mb * 1_000_000)
            big = scratch / f"{info['session_id']}.jsonl"
            tmp.rename(big)
            bench_file(big, "big", scratch, peer, args.reps, args.only, results)
        for i, real in enumerate(args.real or [p for p in REAL if p.is_file()]):
            bench_file(real, f"real{i}", scratch, peer, args.reps, args.only, results)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2, default=str))
    say(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
