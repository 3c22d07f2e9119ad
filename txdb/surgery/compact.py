"""compact --before N: a new session whose history before chain position N
is one dialogue-only summary behind a compact boundary.

The result has the shapes Claude Code (2.1.328) writes for its own
``/compact``:

- a ``system`` record, subtype ``compact_boundary``, ``parentUuid`` null
  (the root of the new chain), ``compactMetadata.trigger = "manual"``;
- a ``user`` record with ``isCompactSummary`` (and
  ``isVisibleInTranscriptOnly``), child of the boundary, holding the
  summary: the user and assistant text of positions 0..N-1 (no tool calls,
  tool results, images or thinking), each message cut at
  ``MESSAGE_CHARS``;
- the records of positions 0..N-1 that are state, not conversation
  (``policy.is_state``: the system prompt, what the CLI announced, its
  state snapshots; the same rule that makes compact-range leave them in
  place), then the records of
  positions N.. of the active chain, intact, each with a fresh uuid and its
  ``parentUuid`` remapped (the first one's parent is the summary), so the
  chain runs unbroken to the null root. Without the first, the CLI would
  re-announce every tool and the gauge would leave the system prompt out;
- the same ``slug`` on every one of them (the session's latest), and the
  boundary and summary timestamped just before the earliest kept record, so
  every timestamp comes after the boundary.

The engine runs it on a fork (``PassOptions(fork=True)``): a new
session id in the same project folder, ``forkedFrom`` naming each kept
record's original (the gate checks those), the original untouched. Records
off the active chain and records bound to removed ones (a ``last-prompt``
pointing before N) are not carried over.
"""

from __future__ import annotations

import uuid as uuidlib
from datetime import datetime, timedelta, timezone

from txdb.errors import SurgeryError
from txdb.model.policy import is_state
from txdb.model.records import markup_kind
from txdb.surgery.ops import tool_spans
from txdb.model.transcript import Transcript

MESSAGE_CHARS = 2000
# String fields that hold another record's uuid.
UUID_FIELDS = ("parentUuid", "logicalParentUuid", "leafUuid", "sourceToolAssistantUUID", "messageId")
ENVELOPE = ("userType", "entrypoint", "cwd", "version", "gitBranch")


def _text_of(obj: dict) -> str:
    msg = obj.get("message")
    if not isinstance(msg, dict):
        return ""
    c = msg.get("content")
    parts = [c] if isinstance(c, str) else [
        b.get("text") for b in (c or []) if isinstance(b, dict) and b.get("type") == "text"]
    out = []
    for p in parts:
        if not isinstance(p, str) or not p.strip() or markup_kind(p) or p.lstrip().startswith(
                ("<system-reminder>", "<thinking>", "<think>")):
            continue
        out.append(p.strip())
    return "\n".join(out)


def dialogue(records) -> tuple[str, int]:
    """(the dialogue of these records as text, how many messages it holds)."""
    lines, n = [], 0
    for rec in records:
        if rec.type not in ("user", "assistant"):
            continue
        o = rec.parse()
        if o.get("isMeta"):
            continue
        text = _text_of(o)
        if not text:
            continue
        if len(text) > MESSAGE_CHARS:
            text = text[:MESSAGE_CHARS] + f" [... {len(text) - MESSAGE_CHARS:,} more chars]"
        who = "Earlier summary" if o.get("isCompactSummary") else rec.type.capitalize()
        lines.append(f"{who}: {text}")
        n += 1
    return "\n\n".join(lines), n


def _ts(value) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        d = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return d if d.tzinfo else d.replace(tzinfo=timezone.utc)


def _iso(d: datetime) -> str:
    return d.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.") + f"{d.microsecond // 1000:03d}Z"


def compact_before(t: Transcript, before: int, *, source: str | None = None, pre_tokens: int = 0) -> dict:
    """Rewrite ``t`` (a fork) as the compacted session. ``source``: the original's
    path, named in the summary."""
    chain = t.chain
    last = len(chain) - 1
    if before < 1:
        raise SurgeryError("--before 0 leaves nothing to summarise: give a position after the first message")
    if before > last:
        raise SurgeryError(f"--before {before} is past the end of the active chain (positions 0..{last}); "
                           f"the last message must stay after the cut")
    pre, post = chain[:before], chain[before:]
    for use, result, _tid in tool_spans(t):
        if use < before <= result:
            raise SurgeryError(f"--before {before} splits a tool call: the tool_result at position {result} "
                               f"answers the tool_use at position {use}; cut at a user prompt "
                               f"(`txdb analyze` lists the cut points)")
    # State, not conversation (the system prompt, what the CLI announced), is
    # carried over from the summarised part, as compact-range leaves it in place.
    state = [r for r in pre if is_state(r.type, r.attachment_type)]
    summarised = [r for r in pre if not is_state(r.type, r.attachment_type)]
    text, messages = dialogue(summarised)
    carried = state + post  # after the summary, in this order
    post_ids = {id(r) for r in carried}
    mapping = {r.uuid: str(uuidlib.uuid4()) for r in carried if r.uuid}
    slug = None
    for r in reversed(chain):  # the session's latest slug
        s = r.parse().get("slug")
        if isinstance(s, str) and s:
            slug = s
            break
    first = post[0].parse()
    sid = first.get("sessionId") or t.session_id
    stamps = [d for r in carried if (d := _ts(r.parse().get("timestamp"))) is not None]
    start = min(stamps) if stamps else datetime.now(timezone.utc)
    boundary_uuid, summary_uuid = str(uuidlib.uuid4()), str(uuidlib.uuid4())
    env = {k: first[k] for k in ENVELOPE if k in first}
    boundary = {"parentUuid": None, "logicalParentUuid": None, "isSidechain": False, "type": "system",
                "subtype": "compact_boundary", "content": "Conversation compacted", "isMeta": False,
                "timestamp": _iso(start - timedelta(milliseconds=2)), "uuid": boundary_uuid, "level": "info",
                "compactMetadata": {"trigger": "manual", "preTokens": pre_tokens}, **env, "sessionId": sid}
    where = f" The full earlier transcript is {source}." if source else ""
    body = (f"This session continues an earlier conversation. Its first {before} records were compacted by "
            f"txdb into the dialogue below (the user's and the assistant's text only; tool calls, tool results, "
            f"images and thinking are left out).{where}\n\n<dialogue>\n{text}\n</dialogue>\n\n"
            f"The messages after this summary are the most recent ones, kept verbatim. Continue the "
            f"conversation from where it left off.")
    summary = {"parentUuid": boundary_uuid, "isSidechain": False, "type": "user",
               "message": {"role": "user", "content": body}, "isVisibleInTranscriptOnly": True,
               "isCompactSummary": True, "uuid": summary_uuid,
               "timestamp": _iso(start - timedelta(milliseconds=1)), **env, "sessionId": sid}
    if slug:
        boundary["slug"] = summary["slug"] = slug
    objs = [boundary, summary]
    parent_of = {id(carried[0]): summary_uuid}
    for prev, r in zip(carried, carried[1:]):
        parent_of[id(r)] = mapping[prev.uuid]
    gone = {r.uuid for r in t.live() if r.uuid and r.uuid not in mapping}
    for r in t.live():
        if r.uuid and id(r) not in post_ids:
            continue  # before the cut, or off the active chain
        o = r.parse()
        if any(isinstance(o.get(k), str) and o[k] in gone for k in UUID_FIELDS if k != "parentUuid"):
            continue  # a pointer (last-prompt, ...) into what was cut
        if id(r) in post_ids:
            o["uuid"] = mapping[r.uuid] if r.uuid else o.get("uuid")
            # The chain order itself (a bridged missing parent included): unbroken to the root.
            o["parentUuid"] = parent_of[id(r)]
            if slug:
                o["slug"] = slug
        for k in UUID_FIELDS:
            if k != "parentUuid" and isinstance(o.get(k), str) and o[k] in mapping:
                o[k] = mapping[o[k]]
        objs.append(o)
    t.rebuild(objs)
    return {"before": before, "summarized": len(summarised), "dialogue_messages": messages, "kept": len(post),
            "kept_state": len(state), "summary_chars": len(body)}
