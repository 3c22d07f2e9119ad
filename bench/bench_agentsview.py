"""txdb's catalog beside agentsview's index, on the same tree in one run.

    .venv/bin/python bench/bench_agentsview.py [--corpus DIR ...] [--reps N]

agentsview is installed on first use from PyPI (its wheel carries the
binary) into ~/.cache/txdb-bench/agentsview-venv, never the project's venv;
`TXDB_BENCH_AGENTSVIEW` names another requirement. Each corpus is copied
into Claude Code's layout (bench_refresh.normalise_corpus), once per corpus
given and once for all of them together, and for each tree it prints, both
tools side by side, runs alternating so they share the machine's noise:

- size: txdb's catalog (db + wal) and agentsview's `sessions.db` (+ wal)
  against the session bytes they hold, and agentsview's `archive capture`
  (the source files kept beside its database), which is what keeping every
  byte costs it;
- cold build: a first `txdb refresh` and a first `agentsview sync` (no
  daemon, a fresh home each), CPU (user + system) and peak RSS, median of
  ``--reps``;
- adding files: the tree's smaller half added to a catalog / index that
  holds the larger half;
- nothing changed: the same command run again.

Ratios are txdb / agentsview (below 1: txdb smaller or cheaper). Results
also go to bench/out/agentsview.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench_refresh import (  # noqa: E402
    CACHE, DEFAULT_CORPUS, LAST_CPU, TXDB, compile_txdb, db_bytes, median, normalise_corpus, run_proc,
    session_files,
)

AV_VENV = CACHE / "agentsview-venv"
AV_PACKAGE = os.environ.get("TXDB_BENCH_AGENTSVIEW", "agentsview==0.46.1")


def agentsview_exe() -> str | None:
    """The agentsview binary itself (not the wheel's Python launcher, whose
    peak RSS would be measured instead)."""
    found = sorted(AV_VENV.glob("lib/python*/site-packages/agentsview/bin/agentsview"))
    if not found:
        try:
            CACHE.mkdir(parents=True, exist_ok=True)
            subprocess.run([sys.executable, "-m", "venv", str(AV_VENV)], check=True, capture_output=True)
            subprocess.run([str(AV_VENV / "bin" / "pip"), "install", "-q", AV_PACKAGE],
                           check=True, capture_output=True, timeout=900)
        except (subprocess.SubprocessError, OSError) as e:
            print(f"agentsview could not be installed ({AV_PACKAGE}): {e}")
            return None
        found = sorted(AV_VENV.glob("lib/python*/site-packages/agentsview/bin/agentsview"))
    return str(found[0]) if found else None


def av_env(home: Path, projects: Path) -> dict:
    # A home of its own keeps it off the user's sessions and other agents';
    # no daemon makes `sync` a one-shot run.
    return {**os.environ, "HOME": str(home), "CLAUDE_PROJECTS_DIR": str(projects),
            "AGENTSVIEW_NO_DAEMON": "1", "DO_NOT_TRACK": "1"}


def run(cmd: list[str], env: dict | None = None) -> dict:
    wall, rss, rc, err = run_proc(cmd, env=env)
    if rc != 0:
        raise RuntimeError(f"{cmd[0]} exited {rc}: {err}")
    return {"wall": wall, "cpu": LAST_CPU[0], "rss": rss}


def split_tree(projects: Path, dest_big: Path, dest_small: Path) -> None:
    """The tree's project folders dealt into two trees: the larger half of
    the bytes and the rest (sessions stay whole with their subagents)."""
    folders = sorted(projects.iterdir(), key=lambda p: -sum(f.stat().st_size for f in session_files(p)))
    total = sum(f.stat().st_size for f in session_files(projects))
    acc = 0
    for folder in folders:
        size = sum(f.stat().st_size for f in session_files(folder))
        dest = dest_big if acc + size <= total * 0.6 or acc == 0 else dest_small
        acc += size if dest is dest_big else 0
        shutil.copytree(folder, dest / folder.name)


def bench_tree(name: str, projects: Path, scratch: Path, av: str, reps: int) -> dict:
    corpus = sum(f.stat().st_size for f in session_files(projects))
    out: dict = {"corpus_bytes": corpus, "files": len(session_files(projects))}
    cold: dict = {"txdb": [], "agentsview": []}
    for i in range(reps):
        db = scratch / f"{name}-{i}.db"
        cold["txdb"].append(run([TXDB, "refresh", "--root", str(projects), "--db", str(db)]))
        home = scratch / f"{name}-home-{i}"
        home.mkdir()
        cold["agentsview"].append(run([av, "sync"], env=av_env(home, projects)))
        if i == 0:
            again_t = run([TXDB, "refresh", "--root", str(projects), "--db", str(db)])
            again_a = run([av, "sync"], env=av_env(home, projects))
            out["unchanged"] = {"txdb": again_t, "agentsview": again_a}
            out["size"] = {"txdb": db_bytes(db), "agentsview": db_bytes(home / ".agentsview" / "sessions.db")}
            capture = scratch / f"{name}-capture"
            subprocess.run([av, "archive", "capture", str(capture), "--root", f"claude={projects}",
                            "--writers-stopped"], env=av_env(home, projects), check=True, capture_output=True)
            out["size"]["agentsview_capture"] = sum(
                p.stat().st_size for p in capture.rglob("*") if p.is_file() and not p.is_symlink())
        else:
            db.unlink()
            shutil.rmtree(home)
    out["cold"] = {tool: {k: median([r[k] for r in runs]) for k in ("wall", "cpu", "rss")}
                   for tool, runs in cold.items()}
    # Adding files: the small half added to what holds the big half.
    big, small = scratch / f"{name}-big", scratch / f"{name}-small"
    big.mkdir()
    small.mkdir()
    split_tree(projects, big, small)
    add: dict = {"txdb": [], "agentsview": []}
    for i in range(reps):
        both = scratch / f"{name}-add-{i}"
        shutil.copytree(big, both)
        db = scratch / f"{name}-add-{i}.db"
        run([TXDB, "refresh", "--root", str(both), "--db", str(db)])
        home = scratch / f"{name}-addhome-{i}"
        home.mkdir()
        run([av, "sync"], env=av_env(home, both))
        for folder in small.iterdir():
            shutil.copytree(folder, both / folder.name)
        add["txdb"].append(run([TXDB, "refresh", "--root", str(both), "--db", str(db)]))
        add["agentsview"].append(run([av, "sync"], env=av_env(home, both)))
    out["added_bytes"] = sum(f.stat().st_size for f in session_files(small))
    out["add"] = {tool: {k: median([r[k] for r in runs]) for k in ("wall", "cpu", "rss")}
                  for tool, runs in add.items()}
    return out


def report(name: str, r: dict) -> None:
    c = r["corpus_bytes"]
    s = r["size"]
    print(f"\n## {name}: {r['files']} session files, {c / 1e6:.1f} MB")
    print("| figure | txdb | agentsview | txdb / agentsview |\n|---|---|---|---|")
    print(f"| size (x the sessions) | {s['txdb'] / 1e6:.1f} MB = {s['txdb'] / c:.2f}x, every byte kept "
          f"| index {s['agentsview'] / 1e6:.1f} MB = {s['agentsview'] / c:.2f}x; with the files kept "
          f"(archive capture) {s['agentsview_capture'] / 1e6:.1f} MB = {s['agentsview_capture'] / c:.2f}x "
          f"| {s['txdb'] / s['agentsview']:.2f} (index), {s['txdb'] / s['agentsview_capture']:.2f} (capture) |")
    for key, label in (("cold", "cold build"), ("add", f"adding {r['added_bytes'] / 1e6:.1f} MB"),
                       ("unchanged", "nothing changed")):
        t, a = r[key]["txdb"], r[key]["agentsview"]
        print(f"| {label}: CPU | {t['cpu']:.2f} s | {a['cpu']:.2f} s | {t['cpu'] / a['cpu']:.2f} |")
        print(f"| {label}: peak RSS | {t['rss'] / 2**20:.0f} MiB | {a['rss'] / 2**20:.0f} MiB "
              f"| {t['rss'] / a['rss']:.2f} |")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", action="append", type=Path)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out", type=Path, default=HERE / "out" / "agentsview.json")
    args = ap.parse_args(argv)
    corpora = [c.resolve() for c in (args.corpus or DEFAULT_CORPUS) if c.exists()]
    if not corpora:
        print("no corpus found (../shared/corpus is absent): nothing to measure")
        return 0
    av = agentsview_exe()
    if av is None:
        return 1
    version = subprocess.run([av, "--version"], capture_output=True, text=True).stdout.strip()
    print(f"agentsview: {version}")
    compile_txdb()
    scratch = Path(tempfile.mkdtemp(prefix="txdb-av-"))
    results = {"agentsview": version}
    try:
        trees = [(c.name, [c]) for c in corpora] + ([("all", corpora)] if len(corpora) > 1 else [])
        for name, parts in trees:
            projects = scratch / f"{name}-projects"
            normalise_corpus(parts, projects)
            results[name] = bench_tree(name, projects, scratch, av, args.reps)
            report(name, results[name])
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
