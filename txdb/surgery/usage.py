"""reset-usage: lower stale usage counts so the context gauge matches a strip.

Claude Code's gauge reads input + cache_read + cache_creation recorded on
the last assistant turn (newer builds: on its ``usage.iterations[]``). After
a strip those numbers describe the pre-strip size. This caps them to a
calibrated estimate of the post-strip context.

It only ever LOWERS a recorded count: a tool that raised the last turn
above what it had recorded made the real CLI auto-compact on resume
(DESIGN.md). The estimate is chars/4 (images by pixels, attachments by their
rendered cost) scaled by ``tokens.calibrate`` over the turns whose recorded
usage is still ground truth.
"""

from __future__ import annotations

from .. import tokens
from .ops import MARK, THINKING_PLACEHOLDER, chain_prefix_estimates
from .transcript import Record, Transcript

CONTEXT_FIELDS = ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")


def _int(v) -> int:
    return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else 0


def recorded_context(u: dict) -> int:
    return sum(_int(u.get(k)) for k in CONTEXT_FIELDS)


def gauge_context(u: dict) -> int:
    """What the gauge reads: the last iteration when there are any, else the totals."""
    its = u.get("iterations")
    if isinstance(its, list) and its and isinstance(its[-1], dict):
        return recorded_context(its[-1])
    return recorded_context(u)


def _cap_fields(u: dict, target: int) -> bool:
    """Scale the three context fields down so they sum to ``target``; each
    only ever decreases. cache_creation.ephemeral_* follow their total."""
    total = recorded_context(u)
    if total <= target:
        return False
    target = max(target, 0)
    old = {k: _int(u.get(k)) for k in CONTEXT_FIELDS}
    new = {k: (v * target) // total for k, v in old.items()}
    rest = target - sum(new.values())
    for k in sorted(old, key=lambda k: -old[k]):
        if rest <= 0:
            break
        add = min(rest, old[k] - new[k])
        new[k] += add
        rest -= add
    for k in CONTEXT_FIELDS:
        if k in u and isinstance(u.get(k), int):
            u[k] = new[k]
    cc = u.get("cache_creation")
    c_old, c_new = old["cache_creation_input_tokens"], new["cache_creation_input_tokens"]
    if isinstance(cc, dict):
        for k, v in list(cc.items()):
            if k.startswith("ephemeral_") and isinstance(v, int) and v > 0:
                cc[k] = min(v, (v * c_new) // c_old) if c_old > 0 else 0
    return True


def cap_usage(u: dict, target: int) -> bool:
    """Cap a usage dict (totals and every iteration) to ``target`` context tokens."""
    changed = _cap_fields(u, target)
    its = u.get("iterations")
    if isinstance(its, list):
        for it in its:
            if isinstance(it, dict):
                changed |= _cap_fields(it, target)
    return changed


def _usage(rec: Record) -> dict | None:
    msg = rec.obj.get("message")
    if rec.obj.get("type") != "assistant" or not isinstance(msg, dict):
        return None
    if msg.get("model") == "<synthetic>":
        return None
    u = msg.get("usage")
    return u if isinstance(u, dict) else None


def _message_key(rec: Record) -> str:
    msg = rec.obj.get("message") or {}
    mid = msg.get("id") if isinstance(msg, dict) else None
    return mid if isinstance(mid, str) else f"rid:{rec.rid}"


def _touched(rec: Record) -> bool:
    """A record an earlier strip rewrote (its recorded usage downstream is stale)."""
    raw = rec.raw if not rec.dirty else b""
    return rec.dirty or MARK.encode() in raw or THINKING_PLACEHOLDER.encode() in raw


def _turns(t: Transcript) -> list[tuple[int, Record, dict]]:
    """(chain position of the message's first line, record, usage) for the chain's assistant turns."""
    first: dict[str, int] = {}
    out = []
    for pos, rec in enumerate(t.chain):
        u = _usage(rec)
        if u is None:
            continue
        key = _message_key(rec)
        first.setdefault(key, pos)
        out.append((first[key], rec, u))
    return out


def calibration(ref: Transcript) -> tuple[float | None, int]:
    """(factor, overhead): recorded context ~= overhead + factor * estimate.

    The factor is ``tokens.calibrate`` over the growth between consecutive
    turns of ``ref`` when no strip touched the records in between (recorded
    growth vs estimated growth: the system prompt and tool schemas cancel
    out); the overhead is what the first untouched turns recorded beyond
    that. With fewer than two usable turns, the plain ratio of recorded to
    estimated context over the untouched turns, and no overhead.
    """
    est = chain_prefix_estimates(ref)
    touched = [0]
    for r in ref.chain:
        touched.append(touched[-1] + (1 if _touched(r) else 0))
    points: list[tuple[int, int, int]] = []  # (pos, estimate, recorded)
    for pos, _rec, u in _turns(ref):
        rc = gauge_context(u)
        if rc > 0 and (not points or points[-1][0] != pos):
            points.append((pos, est[pos], rc))
    deltas = []
    for (p1, e1, r1), (p2, e2, r2) in zip(points, points[1:]):
        if touched[p2] == touched[p1] and e2 > e1 and r2 > r1:
            deltas.append((e2 - e1, r2 - r1))
    clean = [(e, r) for p, e, r in points if touched[p] == 0]
    factor = tokens.calibrate(deltas)
    if factor is None:
        return tokens.calibrate(clean), 0
    if not clean:
        return factor, 0
    over = sorted(r - factor * e for e, r in clean)
    return factor, max(0, int(over[len(over) // 2]))


def reset_usage(t: Transcript, original: Transcript | None = None) -> dict:
    """Cap stale usage on ``t``'s active chain; never raise a count.

    With ``original`` (the session before this surgery), a turn is stale when
    the estimated context before it shrank; without it (standalone
    reset-usage), when a txdb-stripped record lies before it, and the last
    turn always. Stale turns are capped to the calibrated estimate.
    """
    ref = original if original is not None else t
    factor, overhead = calibration(ref)
    est = chain_prefix_estimates(t)
    orig_est: dict[str, int] = {}
    if original is not None:
        o_est = chain_prefix_estimates(original)
        for pos, rec, _u in _turns(original):
            if rec.uuid:
                orig_est.setdefault(rec.uuid, o_est[pos])
    turns = _turns(t)
    touched_from = next((i for i, r in enumerate(t.chain) if _touched(r)), None)
    last_key = _message_key(turns[-1][1]) if turns else None
    out = {"factor": factor, "overhead": overhead, "turns": len(turns), "capped": 0,
           "estimate": overhead + tokens.calibrated(est[-1], factor),
           "last_before": None, "last_after": None}
    if turns:
        out["last_before"] = gauge_context(turns[-1][2])
    for pos, rec, u in turns:
        new_raw = est[pos]
        if original is not None:
            before = orig_est.get(rec.uuid or "")
            stale = before is None or new_raw < before
        else:
            stale = (touched_from is not None and touched_from < pos) or _message_key(rec) == last_key
        if not stale:
            continue
        target = overhead + tokens.calibrated(new_raw, factor)
        if cap_usage(u, target):
            t.touch(rec)
            out["capped"] += 1
    if turns:
        out["last_after"] = gauge_context(turns[-1][2])
    return out
