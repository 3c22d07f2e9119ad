"""Start-up cost of the CLI: whole-process times against the bare interpreter.

    .venv/bin/python bench/bench_startup.py [-n RUNS]

Each command runs RUNS times (default 20) as its own process, interleaved
with ``python -c pass``; the median of each (wall time, and CPU time, which
a loaded machine disturbs less) is printed with its ratio to the bare
interpreter (target: within 2x for ``--version``, ``query`` and a
``refresh`` with nothing to do). The catalog and the projects folder are a
scratch tree of one small session, refreshed once first, so ``refresh`` has
nothing to read. Bytecode is compiled first, as an installed package has it.
"""

from __future__ import annotations

import argparse
import compileall
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "tests" / "data" / "projects"


def timed(argv: list[str], env: dict) -> tuple[float, float]:
    """(wall seconds, CPU seconds: user + system) of one process."""
    t0 = time.perf_counter()
    p = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _pid, _status, usage = os.wait4(p.pid, 0)
    return time.perf_counter() - t0, usage.ru_utime + usage.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", "--runs", type=int, default=20)
    args = ap.parse_args()
    compileall.compile_dir(str(ROOT / "txdb"), quiet=1)
    py = sys.executable
    with tempfile.TemporaryDirectory() as tmp:
        projects = Path(tmp) / "projects"
        shutil.copytree(SAMPLE, projects)
        db = str(Path(tmp) / "c.db")
        env = dict(os.environ, TXDB_DB=db)
        txdb = [py, "-m", "txdb.cli"]
        subprocess.run(txdb + ["refresh", "--root", str(projects)], env=env, check=True, capture_output=True)
        cases = {
            "python -c pass": [py, "-c", "pass"],
            "txdb --version": txdb + ["--version"],
            "txdb --help": txdb + ["--help"],
            "txdb query 'select 1'": txdb + ["query", "select 1", "--json"],
            "txdb refresh (nothing to do)": txdb + ["refresh", "--root", str(projects)],
        }
        times: dict[str, list[tuple[float, float]]] = {k: [] for k in cases}
        for argv in cases.values():
            timed(argv, env)  # warm the page cache
        for _ in range(args.runs):
            for name, argv in cases.items():
                times[name].append(timed(argv, env))
    def med(name: str, i: int) -> float:
        return statistics.median(t[i] for t in times[name])

    print(f"median of {args.runs} runs each ({os.cpu_count()} cores); wall time, then CPU time (user + "
          f"system, steadier on a loaded machine), each against the bare interpreter's")
    for name in times:
        print(f"{name:<32} {med(name, 0) * 1000:7.1f} ms {med(name, 0) / med('python -c pass', 0):5.2f}x   "
              f"CPU {med(name, 1) * 1000:6.1f} ms {med(name, 1) / med('python -c pass', 1):5.2f}x")


if __name__ == "__main__":
    main()
