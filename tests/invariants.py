"""The surgery contract as a check: compare a session before and after.

``contract_violations(before, after)`` lists every way ``after`` breaks the
surgery contract (docs/surgery.md) relative to ``before`` (both raw bytes): untouched
lines byte-identical (in order), rewritten lines compact JSON, the chain no
less whole, tool pairs intact, no recorded usage raised, verify passing
wherever it passed before. The tests' oracle (the library checks what it
must before writing: ``txdb.surgery.gate`` and ``pending.apply``).
"""

from __future__ import annotations

import bisect

import orjson

from txdb.model.records import is_wrapped_thinking
from txdb.surgery.pending import new_errors
from txdb.model.transcript import Transcript, dumps
from txdb.surgery.usage import CONTEXT_FIELDS
from txdb.model.policy import is_state
from txdb.model.verify import verify_file


def _tool_ids(t: Transcript) -> tuple[set[str], set[str]]:
    uses, results = set(), set()
    for rec in t.chain:
        c = rec.content
        if isinstance(c, list):
            for b in c:
                if isinstance(b, dict):
                    if b.get("type") == "tool_use" and isinstance(b.get("id"), str):
                        uses.add(b["id"])
                    elif b.get("type") == "tool_result" and isinstance(b.get("tool_use_id"), str):
                        results.add(b["tool_use_id"])
    return uses, results


def _usage_fields(obj: dict) -> list[tuple[str, int]]:
    msg = obj.get("message")
    u = msg.get("usage") if isinstance(msg, dict) else None
    if not isinstance(u, dict):
        return []
    out = [(k, u[k]) for k in CONTEXT_FIELDS if isinstance(u.get(k), int)]
    cc = u.get("cache_creation")
    if isinstance(cc, dict):
        out += [(f"cache_creation.{k}", v) for k, v in cc.items() if isinstance(v, int)]
    its = u.get("iterations")
    if isinstance(its, list):
        for i, it in enumerate(its):
            if isinstance(it, dict):
                out += [(f"iterations[{i}].{k}", it[k]) for k in CONTEXT_FIELDS if isinstance(it.get(k), int)]
    return out


def contract_violations(before: bytes, after: bytes, *, fork: bool = False, compacted: bool = False) -> list[str]:
    problems: list[str] = []
    b = Transcript.from_bytes(before)
    a = Transcript.from_bytes(after)

    if not fork:
        # Untouched lines byte-identical and in order; the rest compact JSON.
        where: dict[bytes, list[int]] = {}
        for idx, ln in enumerate(b.lines):
            where.setdefault(ln.raw, []).append(idx)
        i = 0
        for ln in a.lines:
            spots = where.get(ln.raw)
            if spots:
                k = bisect.bisect_left(spots, i)
                if k < len(spots):
                    i = spots[k] + 1
                    continue
            try:
                obj = orjson.loads(ln.raw)
            except orjson.JSONDecodeError:
                problems.append(f"line {ln.number} is new and does not parse")
                continue
            if dumps(obj) != ln.raw:
                problems.append(f"line {ln.number} was rewritten but is not compact JSON")

    if compacted:
        return problems + _compact_violations(b, a)

    # The chain no less whole.
    b_uuids = {r.uuid for r in b.live() if r.uuid}
    a_uuids = {r.uuid for r in a.live() if r.uuid}
    for r in a.live():
        p = r.parent_uuid
        if p and p not in a_uuids:
            old = b.by_uuid.get(r.uuid) if r.uuid else None
            if old is not None and old.parent_uuid in b_uuids:
                problems.append(f"parentUuid {p} of {r.uuid} resolved before and dangles now")
    def roots(t: Transcript) -> int:
        return sum(1 for r in t.live() if r.uuid and r.parent_uuid is None and r.type in
                   ("user", "assistant", "attachment", "system"))
    if roots(a) > roots(b):
        problems.append(f"new root(s): {roots(b)} -> {roots(a)}")
    if b.chain:
        if a.leaf is None or a.leaf.uuid != b.leaf.uuid:
            problems.append(f"leaf changed: {b.leaf.uuid} -> {a.leaf.uuid if a.leaf else None}")
        survivors = [r.uuid for r in b.chain if r.uuid in a_uuids]
        a_chain = [r.uuid for r in a.chain]
        if survivors != [u for u in a_chain if u in set(survivors)] or len(a_chain) < len(survivors):
            problems.append("records of the active chain fell off it")
        if survivors and a_chain and a_chain[0] != survivors[0]:
            problems.append(f"the leaf reaches another root: {survivors[0]} -> {a_chain[0]}")

    # Tool pairs.
    bu, br = _tool_ids(b)
    au, ar = _tool_ids(a)
    for tid in (bu & br):
        if (tid in au) != (tid in ar):
            problems.append(f"tool pair {tid} separated")

    # Usage never raised.
    for r in a.live():
        if r.type != "assistant" or not r.uuid:
            continue
        old = b.by_uuid.get(r.uuid)
        if old is None:
            continue
        was = dict(_usage_fields(old.parse()))
        for k, v in _usage_fields(r.parse()):
            if k in was and v > was[k]:
                problems.append(f"usage {k} of {r.uuid} raised: {was[k]} -> {v}")

    # Verify passes wherever it passed before.
    added = new_errors(verify_file("before", data=before), verify_file("after", data=after))
    problems += [f"verify: {e}" for e in added]
    return problems


def _said(r) -> object:
    """A record's message as the model reads it, less what the engine may
    lower or drop on every pass (usage figures; thinking the API drops)."""
    msg = r.parse().get("message")
    if not isinstance(msg, dict):
        return msg
    msg = {k: v for k, v in msg.items() if k != "usage"}
    if isinstance(msg.get("content"), list):
        msg["content"] = [b for b in msg["content"] if not _is_thinking(b)]
    return msg


def _is_thinking(b) -> bool:
    """A thinking block, or text that is wrapped reasoning (``<thinking>...``)."""
    return isinstance(b, dict) and (b.get("type") in ("thinking", "redacted_thinking") or (
        b.get("type") == "text" and isinstance(b.get("text"), str) and is_wrapped_thinking(b["text"])))


def _thinking_only(r) -> bool:
    c = r.content
    return isinstance(c, list) and bool(c) and all(_is_thinking(b) for b in c)


def _compact_violations(b: Transcript, a: Transcript) -> list[str]:
    """``compact --before N``'s new session: a compact boundary (the root),
    the summary, then the original chain from some position on, each record
    forked from its original, with its message unchanged, up to the same
    leaf; tool pairs among the kept records intact; verify passes."""
    problems: list[str] = []
    chain = a.chain
    if len(chain) < 3:
        return [f"the compacted chain has {len(chain)} records"]
    boundary, summary, kept = chain[0], chain[1], chain[2:]
    bo, so = boundary.parse(), summary.parse()
    if bo.get("subtype") != "compact_boundary" or bo.get("parentUuid") is not None:
        problems.append("the chain does not start at a compact boundary")
    if not so.get("isCompactSummary") or so.get("parentUuid") != boundary.uuid:
        problems.append("the summary does not follow the boundary")
    origins = []
    for r in kept:
        ff = r.parse().get("forkedFrom")
        origins.append(ff.get("messageUuid") if isinstance(ff, dict) else None)
    # The state records of the summarised part (policy.is_state: the system
    # prompt, the announcements), carried over in order, then the original
    # chain from the cut on, less the thinking-only messages the engine
    # drops (unless --keep-dropped-thinking).
    b_chain = [r.uuid for r in b.chain]
    state, tail, start = [], [], -1
    for k in range(len(origins)):  # origins[:k] carried state, origins[k:] the chain from the cut on
        if origins[k] not in b_chain:
            continue
        at = b_chain.index(origins[k])
        s_k = [r for r in b.chain[:at] if is_state(r.type, r.attachment_type)]
        t_k = [r for r in b.chain[at:] if r.uuid in origins or not _thinking_only(r)]
        if origins == [r.uuid for r in s_k] + [r.uuid for r in t_k]:
            state, tail, start = s_k, t_k, at
            break
    if start < 1 or origins != [r.uuid for r in state] + [r.uuid for r in tail]:
        problems.append("the kept records are not the original chain's state records and last ones, in order")
    else:
        for r, orig in zip(kept, state + tail):
            if _said(r) != _said(orig):
                problems.append(f"the message of {orig.uuid} changed")
    kept_set = {r.uuid for r in kept}
    for r in kept:
        if r.uuid in (boundary.uuid, summary.uuid) or r.parent_uuid not in kept_set | {summary.uuid}:
            problems.append(f"{r.uuid} hangs off the compacted chain")
    au, ar = _tool_ids(a)
    if au != ar and (au - ar) - {u for u in _tool_ids(b)[0] - _tool_ids(b)[1]}:
        problems.append(f"tool calls without results: {sorted(au - ar)}")
    if ar - au:
        problems.append(f"tool results without calls: {sorted(ar - au)}")
    added = new_errors(verify_file("before", data=b.to_bytes()), verify_file("after", data=a.to_bytes()))
    return problems + [f"verify: {e}" for e in added]
