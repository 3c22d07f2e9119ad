"""CPU of one status line update: `txdb statusline` beside `ccusage
statusline`, each given the same payload (the shape the real CLI 2.1.328
sends) for the largest session of the corpus, as whole processes.

    .venv/bin/python bench/bench_statusline.py               # ../shared/corpus, once
    .venv/bin/python bench/bench_statusline.py --copies 10   # the corpus under 10 roots

Prints the median CPU (user + system) of --repeat runs of each and their
ratio; the target is txdb at most 0.15 s a line. ccusage reads the session
files themselves (CLAUDE_CONFIG_DIR); txdb reads the catalog built from
them first (the build is not timed).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sqlite3
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parent / "tests"))

from bench_views import CORPUS, build  # noqa: E402


def cpu_of(argv: list[str], stdin: bytes, env: dict) -> tuple[float, bytes]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.run(argv, input=stdin, capture_output=True, env=env, timeout=120)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), p.stdout


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--copies", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--no-ccusage", action="store_true")
    args = ap.parse_args()
    if not CORPUS.is_dir():
        raise SystemExit(f"no corpus at {CORPUS}")
    with tempfile.TemporaryDirectory(prefix="txdb-bench-sl-") as tmp:
        tmp = Path(tmp)
        path = build(args.copies, tmp)
        conn = sqlite3.connect(path)
        sid, file_path, model = conn.execute(
            "SELECT f.session_id, f.path, c.model FROM files f JOIN session_costs c ON c.file_id = f.id "
            "WHERE f.kind = 'session' ORDER BY f.size DESC LIMIT 1").fetchone()
        conn.close()
        payload = json.dumps({  # the fields CLI 2.1.328 sends (tests/test_statusline_realcli.py)
            "session_id": sid, "transcript_path": file_path, "cwd": str(tmp),
            "model": {"id": model, "display_name": model},
            "workspace": {"current_dir": str(tmp), "project_dir": str(tmp), "added_dirs": []},
            "version": "2.1.328", "output_style": {"name": "default"},
            "cost": {"total_cost_usd": 0.0, "total_duration_ms": 1, "total_api_duration_ms": 1,
                     "total_lines_added": 0, "total_lines_removed": 0},
            "exceeds_200k_tokens": False,
        }).encode()
        env = dict(os.environ)
        txdb = [str(Path(sys.executable).parent / "txdb"), "statusline", "--db", str(path)]
        runs = {"txdb": [], "ccusage": []}
        cc = None
        if not args.no_ccusage:
            try:
                from test_ccusage_agreement import ccusage_command

                cc = ccusage_command() + ["statusline"]
            except BaseException as e:  # pytest.skip raises a BaseException
                print(f"ccusage unavailable: {e}", file=sys.stderr)
        # ccusage reads CLAUDE_CONFIG_DIR/projects: the corpus laid out as one
        cfg = tmp / "claude"
        (cfg / "projects").mkdir(parents=True)
        for part in ("real", "generated"):
            for d in (CORPUS / part).iterdir():
                if d.is_dir():
                    os.symlink(d, cfg / "projects" / f"{part}-{d.name}")
        cc_env = {**env, "CLAUDE_CONFIG_DIR": str(cfg)}
        for _ in range(args.repeat):  # interleaved: the machine's noise falls on both
            t, out = cpu_of(txdb, payload, env)
            runs["txdb"].append(t)
            if cc:
                t2, out2 = cpu_of(cc, payload, cc_env)
                runs["ccusage"].append(t2)
        print(f"txdb line:    {out.decode().strip()}")
        if cc:
            print(f"ccusage line: {out2.decode().strip()[:160]}")
        med = {k: statistics.median(v) for k, v in runs.items() if v}
        for k, v in med.items():
            print(f"{k:8} median CPU {v * 1000:7.1f} ms over {len(runs[k])} runs")
        if "ccusage" in med:
            print(f"ratio txdb/ccusage: {med['txdb'] / med['ccusage']:.2f}x")
        print(f"target 150 ms: {'met' if med['txdb'] <= 0.15 else 'MISSED'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
