"""Export and redaction against a baseline build, side by side: whole-process
CPU (user + system) of each command, the two builds run in turn (A, B, A,
B, ...) so a loaded machine slows both alike; median of --repeat.

    .venv/bin/python bench/bench_redact_ab.py                     # baseline 187a943 (issue 25's parent)
    .venv/bin/python bench/bench_redact_ab.py --base REF --repeat 7
    .venv/bin/python bench/bench_redact_ab.py --a OTHER/.venv/bin/txdb   # a baseline already built

Build A is the baseline: a detached worktree of ``--base`` under the bench
cache (``~/.cache/txdb-bench/ab-<commit>``, its own venv, kept for the next
run; ``--drop-base`` removes it at the end). Build B is this checkout's
``.venv``. Each builds its own catalog of the corpus (a build's migrations
change the file it opens), then per round and build:

- ``export``: ``txdb export DIR`` of the catalog (no scan);
- ``export --redact`` unscanned: on a fresh copy of the catalog no scan has
  read (the export scans it first, as a user's first redacted export does);
- ``export --redact`` scanned: on a copy a ``secrets scan`` has read (only
  the masking is left);
- ``secrets scan``: on a fresh unscanned copy.

Copies are made before a run starts and are not timed. It prints each
command's median CPU per build, B/A, and what redaction adds over the plain
export (redact minus export) per build.

``--instructions``: each command once per build under
``valgrind --tool=callgrind``, its instruction count (repeatable whatever
the machine's load; about 50x slower than a plain run), and B/A. Its corpus
(unless ``--corpus``) is a subset that runs in seconds natively: copies of
six small real projects (INSTRUCTION_PROJECTS, about 3 MB) and the
planted-secrets corpus of tests/test_redact_planted.py (every detector's
kind, multi-line keys, sidecars, subagents), both builds reading the same
copies.

    .venv/bin/python bench/bench_redact_ab.py --instructions
"""

from __future__ import annotations

import argparse
import compileall
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DEFAULT_CORPUS = [REPO.parent / "shared" / "corpus" / "real", REPO.parent / "shared" / "corpus" / "generated"]
CACHE = Path(os.environ.get("TXDB_BENCH_CACHE", Path.home() / ".cache" / "txdb-bench"))
DEFAULT_BASE = "187a943"  # the commit before issue 25 widened redaction
# --instructions' real part: small projects of the shared real corpus (about 3 MB).
INSTRUCTION_PROJECTS = ("trollz1004-omega-public", "dalvarezrod-proyecto_jarvis", "kfischer-okarin-scripts-and-tools",
                        "mnogodumalon-69973d57", "d-kimuson-claude-code-viewer", "entireio-cli")
COMMANDS = ("export", "export --redact (unscanned)", "export --redact (scanned)", "secrets scan")


def cpu_run(argv: list[str]) -> float:
    """User + system CPU seconds of one process (its children included)."""
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    err = proc.stderr.read() if proc.stderr else b""
    _, status, ru = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({proc.returncode}): {err.decode(errors='replace')[-500:]}")
    return ru.ru_utime + ru.ru_stime


def instructions_run(argv: list[str]) -> int:
    """Instructions one process executes, counted by callgrind."""
    python = Path(argv[0]).parent / "python"  # the console script run by its venv's interpreter
    proc = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", str(python), *argv],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed under callgrind ({proc.returncode}): {proc.stderr[-500:]}")
    m = re.search(r"Collected : (\d+)", proc.stderr)
    if m is None:
        raise SystemExit(f"no instruction count from callgrind: {proc.stderr[-500:]}")
    return int(m.group(1))


def instruction_corpus(scratch: Path) -> list[Path]:
    """The --instructions corpus: copies of INSTRUCTION_PROJECTS, and the planted-secrets corpus."""
    real = scratch / "corpus-real"
    for name in INSTRUCTION_PROJECTS:
        shutil.copytree(REPO.parent / "shared" / "corpus" / "real" / name, real / name, symlinks=True)
    planted = scratch / "corpus-planted"
    planted.mkdir()
    code = ("import sys; from pathlib import Path; sys.path[:0] = [sys.argv[1]]; "
            "from test_redact_planted import plant; plant(Path(sys.argv[2]))")
    subprocess.run([sys.executable, "-c", code, str(REPO / "tests"), str(planted)], check=True)
    return [real, planted / "projects"]


def build_base(ref: str) -> Path:
    """The baseline's txdb: a worktree of ``ref`` with its own venv (cached)."""
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", ref], capture_output=True, text=True,
                            check=True).stdout.strip()
    tree = CACHE / f"ab-{commit[:12]}"
    txdb = tree / ".venv" / "bin" / "txdb"
    if txdb.exists():
        return txdb
    CACHE.mkdir(parents=True, exist_ok=True)
    if not tree.exists():
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(tree), commit], check=True)
    print(f"building the baseline's venv in {tree} ...", flush=True)
    subprocess.run([sys.executable, "-m", "venv", str(tree / ".venv")], check=True)
    subprocess.run([str(tree / ".venv" / "bin" / "pip"), "install", "-q", "-e", f"{tree}[parquet]"], check=True)
    return txdb


def drop_base(txdb: Path) -> None:
    tree = txdb.parent.parent.parent
    subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(tree)], check=False)
    shutil.rmtree(tree, ignore_errors=True)


def package_dir(txdb: Path) -> Path:
    """The txdb package a build's venv runs (its checkout's, editable)."""
    out = subprocess.run([str(txdb.parent / "python"), "-c", "import txdb, os; print(os.path.dirname(txdb.__file__))"],
                         capture_output=True, text=True, check=True, cwd=tempfile.gettempdir()).stdout.strip()
    return Path(out)  # (run elsewhere than here: `-c` puts the working folder first, this checkout's txdb)


def copy_db(src: Path, dst: Path) -> Path:
    for suffix in ("", "-wal", "-shm"):
        if Path(f"{dst}{suffix}").exists():
            os.unlink(f"{dst}{suffix}")
    shutil.copyfile(src, dst)
    return dst


def command_argv(command: str, name: str, builds: dict, clean: dict, scanned: dict, scratch: Path) -> list[str]:
    """One timed command of build ``name`` (its output folder emptied, a fresh work copy made first)."""
    txdb, out = str(builds[name]), scratch / "out"
    shutil.rmtree(out, ignore_errors=True)
    if command == "export":
        return [txdb, "export", str(out), "--db", str(clean[name])]
    if command == "export --redact (scanned)":
        return [txdb, "export", str(out), "--redact", "--db", str(scanned[name])]
    work = copy_db(clean[name], scratch / f"{name}-work.db")
    return ([txdb, "export", str(out), "--redact", "--db", str(work)]
            if command.startswith("export") else [txdb, "secrets", "scan", "--db", str(work)])


def instructions(builds: dict, commands: list[str], clean: dict, scanned: dict, scratch: Path,
                 corpus: list[Path]) -> int:
    """Each command once per build under callgrind: instructions, B/A."""
    print(f"corpus: {', '.join(map(str, corpus))}; A = {builds['A']}, B = {builds['B']}")
    count: dict[tuple[str, str], int] = {}
    for command in commands:
        for name in ("A", "B"):
            count[(command, name)] = instructions_run(command_argv(command, name, builds, clean, scanned, scratch))
        print(f"{command}: {count[(command, 'A')]:,} / {count[(command, 'B')]:,}", flush=True)
    print(f"\n{'command (instructions, millions)':34s} {'A':>9s} {'B':>9s} {'B/A':>6s}")
    for c in commands:
        a, b = count[(c, "A")], count[(c, "B")]
        print(f"{c:34s} {a / 1e6:9.1f} {b / 1e6:9.1f} {b / a:6.3f}")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", default=DEFAULT_BASE, help="baseline commit (default %(default)s)")
    ap.add_argument("--a", type=Path, help="the baseline's txdb, already built (instead of --base)")
    ap.add_argument("--b", type=Path, default=REPO / ".venv" / "bin" / "txdb", help="the build measured")
    ap.add_argument("--corpus", type=Path, action="append", help="a projects folder (repeatable)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--drop-base", action="store_true", help="remove the baseline's worktree at the end")
    ap.add_argument("--instructions", action="store_true",
                    help="callgrind instruction counts, once per build, on a small corpus (see above)")
    ap.add_argument("--only", action="append", choices=COMMANDS, help="only these commands (repeatable)")
    args = ap.parse_args()
    a = args.a or build_base(args.base)
    builds = {"A": a, "B": args.b}
    commands = args.only or list(COMMANDS)
    scratch = Path(tempfile.mkdtemp(prefix="txdb-redact-ab-"))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a kill still removes the scratch folder
    try:
        corpus = args.corpus or (instruction_corpus(scratch) if args.instructions else DEFAULT_CORPUS)
        roots = [x for c in corpus for x in ("--root", str(c))]
        clean, scanned = {}, {}
        for name, txdb in builds.items():
            compileall.compile_dir(package_dir(txdb), quiet=1)  # as an installed package: no compile per process
            clean[name] = scratch / f"{name}.db"
            subprocess.run([str(txdb), "refresh", *roots, "--db", str(clean[name])], check=True,
                           stdout=subprocess.DEVNULL)
            scanned[name] = copy_db(clean[name], scratch / f"{name}-scanned.db")
            subprocess.run([str(txdb), "secrets", "scan", "--db", str(scanned[name])], check=True,
                           stdout=subprocess.DEVNULL)
            # A first export of each, untimed: whatever a first open does (views, prices) is done.
            for db in (clean[name], scanned[name]):
                subprocess.run([str(txdb), "export", str(scratch / "warm"), "--replace", "--db", str(db)],
                               check=True, stdout=subprocess.DEVNULL)
            clean[name] = copy_db(clean[name], scratch / f"{name}-clean.db")  # the master unscanned copy
        if args.instructions:
            return instructions(builds, commands, clean, scanned, scratch, corpus)
        cpu: dict[tuple[str, str], list[float]] = {}
        print(f"corpus: {', '.join(map(str, corpus))}; A = {a}, B = {args.b}")
        print(f"load average at start: {os.getloadavg()[0]:.1f}", flush=True)
        for r in range(args.repeat):
            for command in commands:
                for name in (("A", "B") if r % 2 == 0 else ("B", "A")):
                    argv = command_argv(command, name, builds, clean, scanned, scratch)
                    cpu.setdefault((command, name), []).append(cpu_run(argv))
            print(f"round {r + 1}: " + ", ".join(f"{c} {cpu[(c, 'A')][-1]:.2f}/{cpu[(c, 'B')][-1]:.2f}"
                                               for c in commands), flush=True)
        print(f"load average at end: {os.getloadavg()[0]:.1f}")
        med = {k: statistics.median(v) for k, v in cpu.items()}
        print(f"\n{'command (whole-process CPU, s)':34s} {'A':>7s} {'B':>7s} {'B/A':>6s}  (median of {args.repeat})")
        for c in commands:
            print(f"{c:34s} {med[(c, 'A')]:7.2f} {med[(c, 'B')]:7.2f} {med[(c, 'B')] / med[(c, 'A')]:6.2f}")
        if "export" in commands:
            for c in commands:
                if c.startswith("export --redact"):
                    ea, eb = (med[(c, n)] - med[("export", n)] for n in "AB")
                    print(f"{'  --redact adds, ' + c[len('export --redact ('):-1]:34s} {ea:+7.2f} {eb:+7.2f}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        if args.drop_base and args.a is None:
            drop_base(a)
    return 0


if __name__ == "__main__":
    sys.exit(main())
