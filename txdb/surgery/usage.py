"""reset-usage: lower stale usage counts so the context gauge matches a strip.

Claude Code's gauge reads input + cache_read + cache_creation recorded on
the last assistant turn (newer builds: on its ``usage.iterations[]``), and
so does its decision to compact on resume. After a strip those numbers
describe the pre-strip size. This caps the last turn's to a calibrated
estimate of the post-strip context; earlier turns keep what the API billed.

It only ever LOWERS a recorded count: a tool that raised the last turn
above what it had recorded made the real CLI auto-compact on resume
(docs/surgery.md, reset-usage). The estimate is chars/4 (images by pixels, attachments by their
rendered cost) calibrated by ``txdb.catalog.estimate`` (the same fit ``analyze``
reports) over the turns whose recorded usage is still ground truth. A turn
whose own recorded count is known is lowered by the calibrated size of
what was removed before it; otherwise it is capped to the calibrated
estimate of what remains.
"""

from __future__ import annotations

from txdb.catalog import estimate
from txdb.model.records import MARK, THINKING_PLACEHOLDER
from txdb.surgery.ops import (chain_estimate, chain_prefix_estimates, chain_prefix_images, chain_thinking,
    recorded_context, resume_model, system_prompt_tokens, turn_usage)
from txdb.model.transcript import Record, Transcript

CONTEXT_FIELDS = estimate.CONTEXT_FIELDS
_int = estimate.field_count
def gauge_context(u: dict) -> int:
    """What the gauge reads (``estimate.recorded_context``), 0 for none."""
    return estimate.recorded_context(u) or 0


def _cap_fields(u: dict, target: int) -> bool:
    """Scale the three context fields down so they sum to ``target``; each
    only ever decreases. cache_creation.ephemeral_* follow their total."""
    total = estimate.context_sum(u)  # the fields this caps (the totals), not the gauge
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


def _message_key(rec: Record) -> str:
    mid = rec.node.message_id
    return mid if mid is not None else f"rid:{rec.rid}"


def _touched(rec: Record) -> bool:
    """A record an earlier strip rewrote (its recorded usage downstream is stale)."""
    raw = rec.raw if not rec.dirty else b""
    return rec.dirty or MARK.encode() in raw or THINKING_PLACEHOLDER.encode() in raw


def _turns(t: Transcript) -> list[tuple[int, Record, int]]:
    """(chain position of the message's first line, record, recorded
    context) for the chain's assistant turns; the context is read with each
    record's size (``ops.recorded_context``), not parsed again per use."""
    first: dict[str, int] = {}
    out = []
    for pos, rec in enumerate(t.chain):
        if rec.type != "assistant" or rec.model == "<synthetic>":
            continue
        rc = recorded_context(rec)
        if rc is None:
            continue
        key = _message_key(rec)
        first.setdefault(key, pos)
        out.append((first[key], rec, rc))
    return out


def as_sent(t: Transcript, est: list[int]):
    """``(pos, turn) -> est[pos]`` less the thinking the turn's request left
    out of its context (other models', and all of it on a model whose API
    does not count it: ``estimate.unsent_thinking``): the estimate a turn's
    recorded usage measured."""
    thinking = chain_thinking(t)
    if not thinking:
        return lambda pos, rec: est[pos]
    unsent = estimate.unsent_thinking_at(thinking)
    return lambda pos, rec: est[pos] - unsent(pos, rec.model)


def _calibration_turns(ref: Transcript, est: list[int]) -> list[tuple[int, int, int, int]]:
    """(chain position, estimate before the turn, recorded context, image
    tokens within the estimate: ``estimate.fit``'s third term) for the
    recorded turns of ``ref`` after its latest compaction, one per message:
    what the catalog reads of the same file (``estimate.catalog_turns``:
    the latest ``SELECT_TURNS`` messages).
    Which of them still describe the content is ``estimate.calibrate``'s
    to say, from the figures alone, so the file's history does not matter."""
    # Turns recorded before the latest compaction on the chain (a preserved
    # segment relinked below the summary) measured the old context.
    boundary = max((r.node.timestamp or "" for r in ref.chain
                    if r.type == "system" and b"compact_boundary" in r.raw
                    and r.parse().get("subtype") == "compact_boundary"), default="")
    out: list[tuple[int, int, int, int]] = []
    last_pos = None
    sent = as_sent(ref, est)
    images = chain_prefix_images(ref)
    turns = [(pos, rec, rc) for pos, rec, rc in _turns(ref)
             if not estimate.before_compaction(rec.node.timestamp, boundary) and estimate.calibrates(rec.model)]
    # The latest SELECT_TURNS messages, as the catalog reads them (a longer
    # session's earlier turns change which ones the selection keeps).
    firsts = sorted({pos for pos, _rec, _rc in turns})
    since = firsts[-estimate.SELECT_TURNS] if len(firsts) > estimate.SELECT_TURNS else 0
    for pos, rec, rc in turns:
        if pos >= since and rc > 0 and pos != last_pos:
            out.append((pos, sent(pos, rec), rc, images[pos]))
            last_pos = pos
    return out


def _calibration_pairs(ref: Transcript, est: list[int]) -> list[tuple[int, int, int]]:
    """:func:`_calibration_turns` without positions."""
    return [t[1:] for t in _calibration_turns(ref, est)]


def calibration(ref: Transcript) -> estimate.Fit:
    """The session's fit (``estimate.calibrate``) over ``ref``'s recorded
    turns, estimates with the system prompt counted apart (as the catalog
    stores them; at ``ref.logged_factor`` when the engine found one): what
    ``context_estimator`` predicts with."""
    sp = system_prompt_tokens(ref)
    pairs = [(e - sp, r, i) for e, r, i in _calibration_pairs(ref, chain_prefix_estimates(ref))]
    # (at the factor a logged surgery priced the file at, while it is what that surgery wrote)
    return estimate.at_factor(estimate.calibrate(pairs, sp)[0], ref.logged_factor)


def unsent_tokens(t: Transcript, skip: frozenset[int] = frozenset()) -> int:
    """Thinking tokens on ``t``'s chain that a resume's request leaves out of
    its context (``estimate.unsent_thinking`` on the model it resumes on),
    the records at chain positions ``skip`` aside (already counted out by
    the caller): what the calibrated figure takes off the raw chain."""
    thinking = [x for x in chain_thinking(t) if x[0] not in skip]
    return estimate.unsent_thinking(thinking, len(t.chain), resume_model(t)) if thinking else 0


def context_estimator(ref: Transcript, factor: float | None = None):
    """The calibrated context estimate of a transcript, fitted on ``ref``'s
    recorded turns exactly as the catalog fits a session
    (``estimate.calibrate``: the turns that still describe the content,
    system prompt counted apart; with none, ``estimate.prior``): the figure
    ``sessions`` and ``analyze`` show, for the surgery reports. With
    ``factor`` (a surgery's result: :func:`result_estimator`), or else
    ``ref.logged_factor`` (the file is what a logged surgery wrote), the
    content priced at it (``estimate.at_factor``)."""
    fit = estimate.at_factor(calibration(ref), factor)

    def raw(t: Transcript) -> int:
        return chain_estimate(t) - system_prompt_tokens(t) - unsent_tokens(t)

    def calibrated(t: Transcript) -> int:
        messages = any(r.type in ("user", "assistant") for r in t.chain)
        return estimate.context(fit, raw(t), messages, chain_images(t))

    # the same figure from a raw chain estimate and its image tokens (chain_images)
    calibrated.of_raw = lambda raw, images: estimate.predict(fit, raw, images)
    calibrated.factor = fit.factor  # calibrated tokens per raw token (rescue's budgets)
    calibrated.fit = fit
    # (overhead, factor) through the figure of ``t``: what the log keeps (surgeries.fit_*)
    calibrated.line_at = lambda t: estimate.as_line(fit, raw(t), chain_images(t))
    return calibrated


def result_estimator(of_original):
    """The estimator of what a surgery makes of a transcript, given
    ``of_original`` (its :func:`context_estimator`): the result's own
    calibration (its reset last turn the anchor) at the factor the original
    is priced at, ``x -> context_estimator(x, factor)``; what the pass logs
    (``fit``) and the catalog reads back while the file is what the pass
    wrote (``estimate.session_estimate``)."""
    return lambda t: context_estimator(t, of_original.factor)


def chain_images(t: Transcript) -> int:
    """Image tokens on ``t``'s chain, the third term of its calibration."""
    return chain_prefix_images(t)[-1]


def stale_turns(t: Transcript, original: Transcript | None = None,
                est: list[int] | None = None) -> list[tuple[int, Record, int, tuple[int, int] | None]]:
    """(position, record, recorded context, (estimate, recorded) in the original or
    None) for every assistant turn of ``t`` whose recorded usage no longer
    describes the context before it. With ``original`` (the session before
    this surgery), a turn whose estimated context before it shrank (or that
    is new); without it, a turn after a txdb-stripped record, and the last
    turn always."""
    est = chain_prefix_estimates(t) if est is None else est
    before: dict[str, tuple[int, int]] = {}  # uuid -> (estimate, recorded) in the original
    if original is not None:
        o_sent = as_sent(original, chain_prefix_estimates(original))
        for pos, rec, rc in _turns(original):
            if rec.uuid and rec.uuid not in before:
                before[rec.uuid] = (o_sent(pos, rec), rc)
    sent = as_sent(t, est)
    turns = _turns(t)
    touched_from = next((i for i, r in enumerate(t.chain) if _touched(r)), None)
    last_key = _message_key(turns[-1][1]) if turns else None
    out = []
    for pos, rec, rc in turns:
        if original is not None:
            was = before.get(rec.uuid or "")
            stale = was is None or sent(pos, rec) < was[0]
        else:
            was = None
            stale = (touched_from is not None and touched_from < pos) or _message_key(rec) == last_key
        if stale:
            out.append((pos, rec, rc, was))
    return out


def first_stale_uuid(stale: list) -> str | None:
    """The uuid of the first stale turn: the catalog's calibration skips
    the turns from it on that were recorded before the surgery (their
    figures, kept, measured the history before the strip)."""
    return next((rec.uuid for _pos, rec, _u, _was in stale if rec.uuid), None)


def reset_usage(t: Transcript, original: Transcript | None = None) -> dict:
    """Lower the last assistant turn's usage when it is stale; never raise a count.

    The CLI reads the recorded usage of the last assistant turn only (its
    gauge, and its decision to compact on resume), so that message (every
    line of it) is the one rewritten; earlier turns keep the figures the API
    billed (the calibration tells them from the content: ``estimate.select_turns``),
    and ``stale_from`` names the first stale turn (logged). The stale last
    turn (:func:`stale_turns`) is capped to the calibrated estimate of what
    is left before it: the figure the file then carries is the plan's, so a
    fresh catalog of the result anchors where the plan did.
    """
    ref = original if original is not None else t
    fit = calibration(ref)
    sp = system_prompt_tokens(t)
    est = chain_prefix_estimates(t)
    turns = _turns(t)
    stale = stale_turns(t, original, est)
    sent = as_sent(t, est)
    images = chain_prefix_images(t)
    last_key = _message_key(turns[-1][1]) if turns else None
    out = {"factor": fit.factor if fit.method != "raw" else None, "overhead": int(fit.overhead),
           "method": fit.method, "turns": len(turns), "capped": 0, "stale": len(stale),
           "stale_from": first_stale_uuid(stale),
           "estimate": estimate.predict(fit, est[-1] - sp, images[-1]), "last_before": None, "last_after": None}
    last_after = turns[-1][2] if turns else None
    if turns:
        out["last_before"] = last_after
    for pos, rec, _rc, was in stale:
        if _message_key(rec) != last_key:
            continue  # billed figures stay: the CLI does not read them
        # The calibrated estimate of what is left before it (the fit anchors on
        # the original's last turn when that still described its content: its
        # own count less the calibrated size of what went).
        target = estimate.predict(fit, sent(pos, rec) - sp, images[pos])
        obj = rec.parse()
        u = turn_usage(obj)
        if cap_usage(u, target):
            t.touch(rec, obj)
            out["capped"] += 1
            if rec is turns[-1][1]:
                last_after = gauge_context(u)
    if turns:
        out["last_after"] = last_after
    return out
