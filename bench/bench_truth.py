"""txdb's predicted context after a surgery against what the real CLI sends.

Per session x command (a copy of each session of ../shared/corpus; the
command run with the ``txdb`` CLI, then ``txdb apply``), resumes the result
with the pinned real CLI against the loopback fake API (tests/realcli) and
prints:

- ``pred``: the surgery's ``tokens_after`` (for ``compact --before``: the
  new session's), txdb's calibrated context estimate of the result; on the
  ``(untouched)`` row, the session's own estimate (``analyze``);
- ``sent``: what the CLI sends on ``--resume``, priced as the API that
  recorded the session bills it. A CLI-made session's usage was recorded by
  the fake API, which bills chars/4 of the request's system + tools +
  messages (base64 included: ``fake_api.usage_for``), so that is its
  ``sent``. A real session's was recorded by the real API: ``sent`` is
  chars/4 of the request with each image block billed by its pixels
  (``txdb.tokens.image_info``, the rule txdb's own estimate uses) in place
  of its base64;
- ``conv`` (real sessions): ``sent`` in the session's own units. Text is
  priced by the API's tokenizer, which chars/4 does not know, so the
  pre-surgery resume measures the session's ratio once: the request the
  last recorded turn sent is the prefix of today's request before that
  turn's assistant message (found by its tool ids, texts or signatures),
  with today's last message (the reminders the CLI sends a fresh process
  with, and the ping) for the ones the recording CLI sent then;
  ``ratio = (recorded - images) / (sent(prefix) - images)``, images left
  out because they are priced exactly. Every row of that session is then
  ``conv = images + ratio * (sent - images)``. The ratio is measured before
  any surgery and never refitted after one, so the ``(untouched)`` row
  (also printed) is the anchor: it reads about 1.00 by construction, off
  by what txdb predicts for the chain after the last recorded turn. It
  assumes what a surgery removes tokenizes like the rest; where the API
  bills a kind of content differently (thinking a model no longer sees,
  say), ``conv`` is off by that and ``sent`` is the figure to read. For a
  CLI-made session ``conv`` is ``sent``;
- ``pred/conv``, and ``saving``: the plan's predicted saving
  (tokens_before - tokens_after) against the shrink of the request (conv
  before - conv after).

Targets: every ``pred`` within 5% of ``conv``, and never more than 2% under.

    .venv/bin/python bench/bench_truth.py [--corpus ../shared/corpus] [--sessions N] [--commands a,b] [--only S]
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


def _dump(x) -> int:
    return len(json.dumps(x, ensure_ascii=False, separators=(",", ":"))) if x is not None else 0


def request_tokens(body: dict | None) -> int | None:
    """chars/4 of a request's system + tools + messages: what the fake API
    bills (and records in the sessions it helped make)."""
    if not body:
        return None
    return (_dump(body.get("system")) + _dump(body.get("tools")) + _dump(body.get("messages"))) // 4


def _images(blocks) -> tuple[int, int]:
    """(base64 characters, billed tokens) of the image blocks in ``blocks``
    (tool results' content included)."""
    from txdb.tokens import image_info

    chars = tokens = 0
    for b in blocks if isinstance(blocks, list) else ():
        if not isinstance(b, dict):
            continue
        src = b.get("source")
        if b.get("type") == "image" and isinstance(src, dict) and isinstance(src.get("data"), str):
            chars += len(json.dumps(src["data"], ensure_ascii=False)) - 2
            tokens += image_info(src)["tokens"]
        elif b.get("type") == "tool_result":
            c, t = _images(b.get("content"))
            chars, tokens = chars + c, tokens + t
    return chars, tokens


def billed(body: dict | None, messages: list | None = None) -> tuple[int, int] | None:
    """``(tokens, image tokens)`` of a request as the real API bills it:
    chars/4 of system + tools + messages (``messages`` in place of the
    body's: a prefix), each image billed by its pixels instead of its
    base64."""
    if not body:
        return None
    msgs = body.get("messages") if messages is None else messages
    chars = _dump(body.get("system")) + _dump(body.get("tools")) + _dump(msgs)
    b64 = img = 0
    for m in msgs or ():
        c, t = _images(m.get("content") if isinstance(m, dict) else None)
        b64, img = b64 + c, img + t
    return (chars - b64) // 4 + img, img


def resume_body(path: Path, binary) -> dict | None:
    from realcli import resume

    try:
        r = resume(path, ping="bench-ping", binary=binary, timeout=240)
    except Exception:  # noqa: BLE001 - a bench reports, never stops
        return None
    return r.main_request if r.loaded and not r.compacted else None


def last_recorded_turn(path: Path) -> tuple[int, set] | None:
    """``(recorded context, identities of its blocks)`` of the last turn on
    the active chain whose usage a Claude model recorded (the calibration's
    anchor): tool_use ids, texts and thinking signatures."""
    from txdb.estimate import calibrates, recorded_context
    from txdb.transcript import Transcript

    t = Transcript.load(path)
    last = None
    for rec in t.chain:
        if rec.type != "assistant":
            continue
        msg = rec.parse().get("message") or {}
        if not calibrates(msg.get("model")):
            continue
        rc = recorded_context(msg.get("usage"))
        mid = msg.get("id")
        if last is not None and mid and mid == last[2]:
            last[1].update(_identities(msg.get("content")))
        elif rc:
            last = [rc, _identities(msg.get("content")), mid]
    return (last[0], last[1]) if last else None


def _identities(content) -> set:
    out = set()
    for b in content if isinstance(content, list) else ():
        if isinstance(b, dict):
            for k in ("id", "text", "signature"):
                if isinstance(b.get(k), str) and b[k]:
                    out.add((k, b[k]))
    return out


def session_ratio(path: Path, body: dict) -> float | None:
    """API tokens per billed sent token, images left out: the last recorded
    turn's context over :func:`billed` of the prefix of ``body`` (a
    pre-surgery resume) that turn's request carried, with the request's
    last message (the reminders a fresh CLI sends, and the ping)."""
    turn = last_recorded_turn(path)
    if turn is None:
        return None
    recorded, ids = turn
    msgs = body.get("messages") or []
    for i in range(len(msgs) - 1, -1, -1):
        if msgs[i].get("role") == "assistant" and _identities(msgs[i].get("content")) & ids:
            # the last message (today's reminders and the ping) stands for what
            # the recording CLI sent with that request in their place
            tokens, img = billed(body, msgs[:i] + msgs[-1:])
            return (recorded - img) / (tokens - img) if tokens > img else None
    return None


def converted(body: dict | None, ratio: float | None) -> int | None:
    """:func:`billed` of a request in the session's units (see the module
    docstring)."""
    b = billed(body)
    if b is None or ratio is None:
        return None
    tokens, img = b
    return round(img + ratio * (tokens - img))


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
    return {"pred": rep["tokens_after"], "before": rep["tokens_before"], "body": resume_body(new, binary)}


def measure(body: dict | None, real: bool, ratio: float | None) -> tuple[int | None, int | None]:
    """``(sent, conv)`` of a resumed request (see the module docstring)."""
    if not body:
        return None, None
    if not real:
        sent = request_tokens(body)
        return sent, sent
    return billed(body)[0], converted(body, ratio)


def untouched_estimate(src: Path, root: Path) -> int | None:
    work = root / f"untouched-{src.stem[:8]}"
    path = copy_session(src, work / "projects" / src.parent.name)
    try:
        return txdb(["analyze", str(path), "--db", str(work / "c.db")], work)["estimate"]["calibrated"]
    except Exception:  # noqa: BLE001 - a bench reports, never stops
        return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", type=Path, default=REPO.parent / "shared" / "corpus")
    ap.add_argument("--sessions", type=int, default=0, help="only the first N sessions")
    ap.add_argument("--commands", default="", help="comma-separated subset of: " + ",".join(COMMANDS))
    ap.add_argument("--only", default="", help="comma-separated session id prefixes")
    ap.add_argument("--real-only", action="store_true", help="only the real sessions")
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
    sessions = ([] if args.real_only else [args.corpus / s for s in SESSIONS]) + real
    if args.only:
        sessions = [s for s in sessions if any(s.stem.startswith(o) for o in args.only.split(","))]
    if args.sessions:
        sessions = sessions[: args.sessions]
    commands = [c for c in (args.commands.split(",") if args.commands else COMMANDS) if c]
    hdr = (f"{'session':30} {'command':20} {'pred':>8} {'sent':>8} {'conv':>8} {'ratio':>6} "
           f"{'saving':>8} {'shrink':>8}")
    print(hdr)
    print("-" * len(hdr))
    ratios = []
    savings = []
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-truth-") as tmp:
        for src in sessions:
            is_real = "/generated/" not in str(src)
            body0 = resume_body(src, binary)
            ratio0 = session_ratio(src, body0) if is_real and body0 else None
            sent0, base = measure(body0, is_real, ratio0)
            label = ("real:" if is_real else "gen:") + src.stem[:20]
            est0 = untouched_estimate(src, Path(tmp))
            note = f"  (session ratio {ratio0:.3f})" if ratio0 else ""
            r0 = f"{est0 / base:6.3f}" if est0 and base else ""
            print(f"{label:30} {'(untouched)':20} {est0 or '':>8} {sent0 or '':>8} {base or '':>8} {r0:>6}{note}")
            for name in commands:
                try:
                    r = run_one(src, name, binary, Path(tmp))
                except Exception as e:  # noqa: BLE001 - a bench reports, never stops
                    print(f"{label:30} {name:20} error: {str(e)[:60]}")
                    continue
                sent, conv = measure(r.get("body"), is_real, ratio0) if "skip" not in r else (None, None)
                if "skip" in r or not conv:
                    print(f"{label:30} {name:20} {r.get('skip', 'no resume')}")
                    continue
                ratio = r["pred"] / conv
                ratios.append((ratio, label, name))
                saving = r["before"] - r["pred"]
                shrink = base - conv if base else None
                if shrink is not None:
                    savings.append((saving, shrink, label, name))
                print(f"{label:30} {name:20} {r['pred']:8} {sent:8} {conv:8} {ratio:6.3f} "
                      f"{saving:8} {shrink if shrink is not None else '':>8}")
    if ratios:
        worst = max(ratios, key=lambda x: abs(x[0] - 1))
        under = min(ratios)
        ok = sum(0.98 <= r <= 1.05 for r, _, _ in ratios)
        print(f"\n{len(ratios)} results in {time.perf_counter() - t0:.0f}s; within [-2%, +5%]: {ok}; "
              f"worst {worst[0]:.3f} ({worst[1]} {worst[2]}); lowest {under[0]:.3f} ({under[1]} {under[2]}); "
              f"mean |err| {sum(abs(r - 1) for r, _, _ in ratios) / len(ratios):.1%}")
    if savings:
        good = sum(abs(sv - sh) <= max(200, 0.10 * abs(sh)) for sv, sh, _, _ in savings)
        print(f"savings within 10% (or 200 tokens) of the shrink: {good} of {len(savings)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
