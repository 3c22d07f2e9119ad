"""txdb's predicted context after a surgery against what the real CLI sends.

Per session x command (a copy of each session of ../shared/corpus; the
command run with the ``txdb`` CLI, then ``txdb apply``), resumes the result
with the pinned real CLI against the loopback fake API (tests/realcli) and
prints:

- ``pred``: the surgery's ``tokens_after`` (for ``compact --before``: the
  new session's), txdb's calibrated context estimate of the result;
- ``sent``: what the CLI sends on ``--resume``, as the fake API bills it:
  chars/4 of the request's system + tools + messages as ``json.dumps``
  writes them (``fake_api.billed_context``, the units of the usage the
  CLI-made sessions recorded), and ``pred/sent``;
- ``saving``: the plan's predicted saving (tokens_before - tokens_after)
  against the shrink of the request (sent before - sent after).

Targets: every ``pred`` within 5% of ``sent``, and never more than 2% under.

    .venv/bin/python bench/bench_truth.py [--corpus ../shared/corpus] [--sessions N] [--commands a,b]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

TXDB = [str(Path(sys.executable).parent / "txdb")]

# A handful of CLI-made sessions and real ones (corpus-relative paths).
SESSIONS = [
    "generated/-home-user-src-demo-14/5a73f7d9-de47-4921-a60f-d1c8c68135c5.jsonl",
    "generated/-home-user-src-demo-1/91f27d20-32b7-42f9-8096-f776eb39baf6.jsonl",
    "generated/-home-user-src-demo-12/2ecab158-3408-4b97-9c60-af04fe425efe.jsonl",
    "generated/-home-user-src-demo-5/668e6b90-88a0-456a-8416-3a4549b8ee6c.jsonl",
]
REAL_SESSIONS = 4  # the real sessions added: the first few of the corpus, by path

COMMANDS = {
    "strip-all": ["strip-all"],
    "strip-tools-results": ["strip-tools", "--only-results"],
    "persist-tools-3": ["persist-tools", "--keep-recent", "3"],
    "strip-thinking": ["strip-thinking"],
    "strip-attachments": ["strip-attachments"],
    "compact-range": None,  # an old span, chosen per session
    "compact-before": None,  # the second half kept, chosen per session
}


def request_tokens(body: dict | None) -> int | None:
    """What the fake API bills the request (``fake_api.billed_context``): the
    units the CLI-made sessions' recorded usage is in, so of txdb's fit."""
    from realcli.fake_api import billed_context

    return billed_context(body) if body else None


def sent_tokens(path: Path, binary) -> int | None:
    from realcli import resume

    try:
        r = resume(path, ping="bench-ping", binary=binary, timeout=240)
    except Exception:  # noqa: BLE001 - a bench reports, never stops
        return None
    return request_tokens(r.main_request) if r.loaded and not r.compacted else None


def cut_positions(path: Path) -> list[int]:
    """Chain positions a cut keeps tool pairs whole at: the user's own
    prompts, and the assistant record right after a tool result (a CLI-made
    session is often one prompt and one long agentic turn)."""
    from txdb.transcript import Transcript

    t = Transcript.load(path)
    out = []
    prev_result = False
    for pos, rec in enumerate(t.chain):
        obj = rec.parse()
        c = (obj.get("message") or {}).get("content")
        if rec.type == "assistant" and prev_result:
            out.append(pos)
        prev_result = False
        if rec.type != "user" or obj.get("isMeta") or obj.get("isCompactSummary"):
            continue
        if isinstance(c, list) and c and all(isinstance(b, dict) and b.get("type") == "tool_result" for b in c):
            prev_result = True
        elif isinstance(c, str) and not c.lstrip().startswith("<") or (
                isinstance(c, list) and c and all(isinstance(b, dict) and b.get("type") == "text" for b in c)):
            out.append(pos)
    return out


def command_args(name: str, path: Path) -> list[str] | None:
    if COMMANDS[name] is not None:
        return COMMANDS[name]
    cuts = [p for p in cut_positions(path) if p > 0]
    if len(cuts) < 3:
        return None
    mid = cuts[len(cuts) // 2]
    if name == "compact-before":
        return ["compact", "--before", str(mid)]
    # compact-range: an old span, from the first cut to just before the middle one
    return ["compact-range", "--from", str(cuts[0]), "--to", str(mid - 1), "--summary", "An old span."]


def txdb(args: list[str], cwd: Path) -> dict:
    p = subprocess.run(TXDB + args + ["--json"], cwd=cwd, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        raise RuntimeError((p.stderr or p.stdout).strip().splitlines()[-1] if (p.stderr or p.stdout).strip() else "failed")
    return json.loads(p.stdout)


def copy_session(src: Path, dest_dir: Path) -> Path:
    dest_dir.mkdir(parents=True, exist_ok=True)
    dest = dest_dir / src.name
    shutil.copyfile(src, dest)
    side = src.with_suffix("")
    if side.is_dir():
        shutil.copytree(side, dest_dir / side.name)
    return dest


def run_one(src: Path, name: str, binary, root: Path) -> dict:
    work = root / f"{name}-{src.stem[:8]}"
    path = copy_session(src, work / "projects" / src.parent.name)
    db = ["--db", str(work / "c.db")]
    args = command_args(name, path)
    if args is None:
        return {"skip": "too few prompts"}
    rep = txdb([args[0], str(path), *db, *args[1:]], work)
    if name == "compact-before":
        new = path.parent / f"{rep['fork_session_id']}.jsonl"
    else:
        if not rep.get("changed_lines"):
            return {"skip": "nothing to change"}
        txdb(["apply", str(path), *db], work)
        new = path
    return {"pred": rep["tokens_after"], "before": rep["tokens_before"], "sent": sent_tokens(new, binary)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", type=Path, default=REPO.parent / "shared" / "corpus")
    ap.add_argument("--sessions", type=int, default=0, help="only the first N sessions")
    ap.add_argument("--commands", default="", help="comma-separated subset of: " + ",".join(COMMANDS))
    args = ap.parse_args()
    if not args.corpus.is_dir():
        print(f"no corpus at {args.corpus}")
        return 1
    from realcli import CLAUDE_CODE_VERSION
    from realcli.install import cached_install

    binary, reason = cached_install(CLAUDE_CODE_VERSION)
    if binary is None:
        print(f"real CLI unavailable: {reason}")
        return 1
    real = sorted(p for p in (args.corpus / "real").rglob("*.jsonl")
                  if "subagents" not in p.parts and p.stat().st_size > 100_000)[:REAL_SESSIONS]
    sessions = [args.corpus / s for s in SESSIONS] + real
    if args.sessions:
        sessions = sessions[: args.sessions]
    commands = [c for c in (args.commands.split(",") if args.commands else COMMANDS) if c]
    hdr = f"{'session':30} {'command':20} {'pred':>8} {'sent':>8} {'ratio':>6} {'saving':>8} {'shrink':>8}"
    print(hdr)
    print("-" * len(hdr))
    ratios = []
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-truth-") as tmp:
        for src in sessions:
            base = sent_tokens(src, binary)
            label = ("gen:" if "/generated/" in str(src) else "real:") + src.stem[:20]
            print(f"{label:30} {'(untouched)':20} {'':>8} {base or '':>8}")
            for name in commands:
                try:
                    r = run_one(src, name, binary, Path(tmp))
                except Exception as e:  # noqa: BLE001 - a bench reports, never stops
                    print(f"{label:30} {name:20} error: {str(e)[:60]}")
                    continue
                if "skip" in r or not r["sent"]:
                    print(f"{label:30} {name:20} {r.get('skip', 'no resume')}")
                    continue
                ratio = r["pred"] / r["sent"]
                ratios.append((ratio, label, name))
                shrink = base - r["sent"] if base else None
                print(f"{label:30} {name:20} {r['pred']:8} {r['sent']:8} {ratio:6.3f} "
                      f"{r['before'] - r['pred']:8} {shrink if shrink is not None else '':>8}")
    if ratios:
        worst = max(ratios, key=lambda x: abs(x[0] - 1))
        under = min(ratios)
        ok = sum(0.98 <= r <= 1.05 for r, _, _ in ratios)
        print(f"\n{len(ratios)} results in {time.perf_counter() - t0:.0f}s; within [-2%, +5%]: {ok}; "
              f"worst {worst[0]:.3f} ({worst[1]} {worst[2]}); lowest {under[0]:.3f} ({under[1]} {under[2]}); "
              f"mean |err| {sum(abs(r - 1) for r, _, _ in ratios) / len(ratios):.1%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
