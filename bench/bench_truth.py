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
  messages as ``json.dumps`` writes them (base64 included:
  ``fake_api.billed_context``), so that is its ``sent``. A real session's was recorded by the real API: ``sent`` is
  chars/4 of the request with each image block billed by its pixels
  (``txdb.model.tokens.image_info``, the rule txdb's own estimate uses) in place
  of its base64, and, on a model whose API does not count the thinking a
  request carries back (``txdb.catalog.estimate.counts_thinking``), without those
  blocks;
- ``conv`` (real sessions): ``sent`` in the session's own units. Text is
  priced by the API's tokenizer, which chars/4 does not know. The
  pre-surgery resume measures the units once: for each of the session's
  last 41 recorded turns, the request that turn sent is the prefix of
  today's request before the turn's reply (found by its tool ids, texts or
  signatures), with today's last message (the reminders a fresh CLI sends,
  and the ping) standing for those the recording CLI sent then; its
  ``sent`` against the context the API recorded for it, images left out of
  both (they are priced exactly), is fitted by ``txdb.catalog.estimate.fit``
  (per-token factor, anchored on the last turn). Every row of the session
  is then ``conv = images + predict(fit, sent - images)``: the last
  recorded context, plus the session's measured tokens per sent token
  times how far today's request is from that turn's. Measured before any
  surgery and never refitted after one; the ``(untouched)`` row is the
  anchor (about 1.00 by construction, off by what txdb predicts for the
  chain after the last recorded turn). What this checks is txdb's model of
  what the CLI sends (each block as the CLI renders it, what it leaves
  out); the tokens per sent token come from the same recorded usage txdb
  fits on, so a surgery that removes content denser or sparser than the
  session's average is not caught here. For a CLI-made session ``conv`` is
  ``sent``;
- ``pred/conv``, and ``saving``: the plan's predicted saving
  (tokens_before - tokens_after) against the shrink of the request (conv
  before - conv after).

Targets: every ``pred`` within 5% of ``conv``, and never more than 2% under.

    .venv/bin/python bench/bench_truth.py [--corpus ../shared/corpus] [--sessions N] [--commands a,b] [--only S] [--real-only] [--real N]
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
    """What the fake API bills the request (``fake_api.billed_context``): the
    units the CLI-made sessions' recorded usage is in, so of txdb's fit."""
    from realcli.fake_api import billed_context

    return billed_context(body) if body else None


def _images(blocks) -> tuple[int, int]:
    """(base64 characters, billed tokens) of the image blocks in ``blocks``
    (tool results' content included)."""
    from txdb.model.tokens import image_info

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
    base64, and the thinking blocks carried back left out on a model that
    does not count them (``txdb.catalog.estimate.counts_thinking``, the rule txdb's
    estimate uses)."""
    from txdb.catalog.estimate import counts_thinking

    if not body:
        return None
    msgs = body.get("messages") if messages is None else messages
    chars = _dump(body.get("system")) + _dump(body.get("tools")) + _dump(msgs)
    drop = img = 0
    thinking = not counts_thinking(body.get("model"))
    for m in msgs or ():
        content = m.get("content") if isinstance(m, dict) else None
        c, t = _images(content)
        drop, img = drop + c, img + t
        if thinking and m.get("role") == "assistant" and isinstance(content, list):
            drop += sum(_dump(b) + 1 for b in content
                        if isinstance(b, dict) and b.get("type") in ("thinking", "redacted_thinking"))
    return (chars - drop) // 4 + img, img


def resume_body(path: Path, binary) -> dict | None:
    from realcli import resume

    try:
        r = resume(path, ping="bench-ping", binary=binary, timeout=240)
    except Exception:  # noqa: BLE001 - a bench reports, never stops
        return None
    return r.main_request if r.loaded and not r.compacted else None


def recorded_turns(path: Path) -> list[tuple[int, set]]:
    """``(recorded context, identities of its blocks)`` per turn on the
    active chain whose usage a Claude model recorded, in chain order (the
    lines of one message merged): tool_use ids, texts and thinking
    signatures, to find the turn in a resumed request."""
    from txdb.catalog.estimate import calibrates, recorded_context
    from txdb.model.transcript import Transcript

    out: list[list] = []
    for rec in Transcript.load(path).chain:
        if rec.type != "assistant":
            continue
        msg = rec.parse().get("message") or {}
        if not calibrates(msg.get("model")):
            continue
        rc = recorded_context(msg.get("usage"))
        mid = msg.get("id")
        if out and mid and mid == out[-1][2]:
            out[-1][1].update(_identities(msg.get("content")))
        elif rc:
            out.append([rc, _identities(msg.get("content")), mid])
    return [(rc, ids) for rc, ids, _ in out]


def _identities(content) -> set:
    out = set()
    for b in content if isinstance(content, list) else ():
        if isinstance(b, dict):
            for k in ("id", "text", "signature"):
                if isinstance(b.get(k), str) and b[k]:
                    out.add((k, b[k]))
    return out


def session_fit(path: Path, body: dict):
    """The session's units, measured on a pre-surgery resume (``body``):
    ``txdb.catalog.estimate.fit`` over ``(billed sent, recorded)`` per recorded turn
    (the last 40 and one), where "billed sent" is :func:`billed` of the
    prefix of ``body`` that turn's request carried (the messages before its
    reply) plus the request's last message (the reminders a fresh CLI sends
    with the ping, standing for those the recording CLI sent then), images
    left out of both sides. None when no turn is found in the request."""
    from txdb.catalog.estimate import MAX_TURNS, fit

    msgs = body.get("messages") or []
    where: dict = {}
    for i, m in enumerate(msgs):
        if m.get("role") == "assistant":
            for ident in _identities(m.get("content")):
                where.setdefault(ident, []).append(i)
    pairs = []
    last = -1
    for recorded, ids in recorded_turns(path):
        # the first reply after the previous turn's holding one of its blocks
        # (a short text such as "Done." recurs)
        found = [i for x in ids for i in where.get(x, ()) if i > last]
        if not found:
            continue  # before a compaction, or not sent today
        last = min(found)
        tokens, img = billed(body, msgs[:last] + msgs[-1:])
        pairs.append((tokens - img, recorded - img))
    pairs = pairs[-(MAX_TURNS + 1):]
    return fit(pairs) if pairs else None


def converted(body: dict | None, f) -> int | None:
    """:func:`billed` of a request in the session's units: ``predict`` of
    the session's fit (:func:`session_fit`), images added as billed."""
    from txdb.catalog.estimate import predict

    b = billed(body)
    if b is None or f is None:
        return None
    tokens, img = b
    return img + predict(f, tokens - img)


def cut_positions(path: Path) -> list[int]:
    """Chain positions a cut keeps tool pairs whole at: the user's own
    prompts, and the assistant record right after a tool result (a CLI-made
    session is often one prompt and one long agentic turn)."""
    from txdb.model.transcript import Transcript

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


def measure(body: dict | None, real: bool, f) -> tuple[int | None, int | None]:
    """``(sent, conv)`` of a resumed request (see the module docstring)."""
    if not body:
        return None, None
    if not real:
        sent = request_tokens(body)
        return sent, sent
    return billed(body)[0], converted(body, f)


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
    ap.add_argument("--real", type=int, default=REAL_SESSIONS, help="how many real sessions (by path)")
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
                  if "subagents" not in p.parts and p.stat().st_size > 100_000)[:args.real]
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
            fit0 = session_fit(src, body0) if is_real and body0 else None
            sent0, base = measure(body0, is_real, fit0)
            label = ("real:" if is_real else "gen:") + src.stem[:20]
            est0 = untouched_estimate(src, Path(tmp))
            note = f"  (session: {fit0.factor:.3f} per sent token, {fit0.turns_used} turns)" if fit0 else ""
            r0 = f"{est0 / base:6.3f}" if est0 and base else ""
            print(f"{label:30} {'(untouched)':20} {est0 or '':>8} {sent0 or '':>8} {base or '':>8} {r0:>6}{note}")
            for name in commands:
                try:
                    r = run_one(src, name, binary, Path(tmp))
                except Exception as e:  # noqa: BLE001 - a bench reports, never stops
                    print(f"{label:30} {name:20} error: {str(e)[:60]}")
                    continue
                sent, conv = measure(r.get("body"), is_real, fit0) if "skip" not in r else (None, None)
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
