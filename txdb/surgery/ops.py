"""Surgery operations on a ``Transcript``: library functions, no I/O.

Each takes the transcript plus an explicit target selection, so the
single-session commands and the bulk ``--where`` path call the same code:

- ``strip_tools(t, ..., tool_use_ids=None)``: None means every tool call
  the filters (tools, range) allow; a set restricts to those ids.
- ``strip_thinking(t, ..., blocks=None)``: blocks as ``BlockRef``
  (record uuid, block idx); ``refs_from_offsets`` maps catalog rows
  (offset, idx) of the same file onto them.
- ``strip_attachments(t, ..., uuids=None)``: attachment record uuids.

Every function mutates ``t`` (``touch``/``remove``) and returns a plain dict
describing what it did; nothing here prints or writes a file.
"""

from __future__ import annotations

import fnmatch
from typing import Iterable, NamedTuple

from .. import tokens
from ..policy import SYSTEM_PROMPT, attachment_cost, policy_class
from ..records import block_rows, is_wrapped_thinking
from .transcript import Record, Transcript, dumps

MARK = "[stripped by txdb"
THINKING_PLACEHOLDER = "[thinking stripped by txdb]"
INPUT_STRING_LIMIT = 120
INPUT_VALUE_LIMIT = 200

Range = tuple[int | None, int | None] | None


class BlockRef(NamedTuple):
    uuid: str
    idx: int


def placeholder(chars: int, extra: str = "") -> str:
    return f"{MARK}: {chars:,} chars{extra}]"


def _content_list(rec: Record):
    msg = rec.obj.get("message")
    if isinstance(msg, dict) and isinstance(msg.get("content"), list):
        return msg["content"]
    return None


def _chars(value) -> int:
    if isinstance(value, str):
        return len(value)
    return len(dumps(value))


def refs_from_offsets(t: Transcript, rows: Iterable[tuple[int, int]]) -> set[BlockRef]:
    """Catalog target rows (record offset, block idx) of the file ``t`` was loaded
    from -> BlockRefs, which stay valid on the pending copy of that file."""
    out = set()
    for offset, idx in rows:
        rec = t.record_at(offset)
        if rec is not None and rec.uuid:
            out.add(BlockRef(rec.uuid, idx))
    return out


def tool_names(t: Transcript) -> dict[str, str]:
    names: dict[str, str] = {}
    for rec in t.live():
        for b in _content_list(rec) or ():
            if isinstance(b, dict) and b.get("type") in ("tool_use", "server_tool_use") and isinstance(b.get("id"), str):
                names[b["id"]] = str(b.get("name") or "")
    return names


def _tool_match(name: str | None, tools: Iterable[str] | None) -> bool:
    if not tools:
        return True
    return any(fnmatch.fnmatchcase(name or "", pat) for pat in tools)


def _shrink_input(value, counter: list[int]):
    """Keep the shape of a tool input (keys, types) and drop its bulk."""
    if isinstance(value, str):
        if len(value) > INPUT_STRING_LIMIT and not value.startswith(MARK):
            counter[0] += 1
            return placeholder(len(value))
        return value
    if isinstance(value, dict):
        return {k: _shrink_input(v, counter) for k, v in value.items()}
    if isinstance(value, list):
        if len(dumps(value)) > INPUT_VALUE_LIMIT:
            counter[0] += 1
            return []
        return value
    return value


def _keep_last(text: str, n: int, size: int):
    lines = text.splitlines()
    if n <= 0 or not lines:
        return placeholder(size)
    kept = lines[-n:]
    if len(kept) == len(lines) and len(text) == size:
        return None  # nothing to cut
    return placeholder(size, f", last {len(kept)} of {len(lines)} lines kept") + "\n" + "\n".join(kept)


def _block_tokens(b: dict) -> int:
    rows = block_rows([b], None)
    return rows[0].get("tokens", 0) if rows else 0


def _result_text(content) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(b.get("text", "")) for b in content if isinstance(b, dict) and b.get("type") == "text")
    return ""


def _is_stripped_result(content) -> bool:
    text = content if isinstance(content, str) else None
    if isinstance(content, list) and len(content) == 1 and isinstance(content[0], dict):
        text = content[0].get("text") if content[0].get("type") == "text" else None
    return isinstance(text, str) and text.startswith(MARK)


def _loads_tools(content) -> bool:
    """A ToolSearch result: its ``tool_reference`` blocks load deferred tools,
    and on resume the CLI rebuilds the request's tool list from them, so
    stripping one would unload those tools (it would save nothing either)."""
    return isinstance(content, list) and any(
        isinstance(b, dict) and b.get("type") == "tool_reference" for b in content)


def strip_tools(
    t: Transcript,
    *,
    tools: Iterable[str] | None = None,
    only_inputs: bool = False,
    only_results: bool = False,
    keep_last_lines: int | None = None,
    positions: Range = None,
    tool_use_ids: set[str] | None = None,
) -> dict:
    """Clear tool_use inputs and/or tool_result contents.

    A result becomes ``[stripped by txdb: N chars]`` (a string, which the
    API accepts as tool_result content), or that header plus its last N
    lines with ``keep_last_lines``; ``is_error`` results keep their text, and
    so do ToolSearch results (their ``tool_reference`` blocks load deferred
    tools). An input keeps its keys and small values (``tool_use.input`` must stay an
    object; the CLI reads fields such as ``file_path`` on resume); long
    strings become a placeholder, long lists ``[]``. Ids never change, so
    every pair stays paired.
    """
    tools = [s for s in (tools or []) if s]
    do_inputs = not only_results
    do_results = not only_inputs
    names = tool_names(t)
    out = {"inputs": 0, "results": 0, "kept_errors": 0, "chars_before": 0, "chars_after": 0, "records": 0,
           "tokens_saved": 0}
    for rec in list(t.live()):
        content = _content_list(rec)
        if not content or not t.in_range(rec, positions):
            continue
        changed = False
        for b in content:
            if not isinstance(b, dict):
                continue
            btype = b.get("type")
            if do_inputs and btype in ("tool_use", "server_tool_use"):
                tid = b.get("id")
                if tool_use_ids is not None and tid not in tool_use_ids:
                    continue
                if not _tool_match(b.get("name"), tools):
                    continue
                inp = b.get("input")
                counter = [0]
                new = _shrink_input(inp, counter) if isinstance(inp, dict) else {}
                if counter[0] == 0 and isinstance(inp, dict):
                    continue
                before, after = _chars(inp), _chars(new)
                out["tokens_saved"] += _block_tokens(b) - _block_tokens(dict(b, input=new))
                b["input"] = new
                out["inputs"] += 1
                out["chars_before"] += before
                out["chars_after"] += after
                changed = True
            elif do_results and btype == "tool_result":
                tid = b.get("tool_use_id")
                if tool_use_ids is not None and tid not in tool_use_ids:
                    continue
                if not _tool_match(names.get(tid), tools):
                    continue
                c = b.get("content")
                if b.get("is_error"):
                    out["kept_errors"] += 1
                    continue
                if c is None or _is_stripped_result(c) or _loads_tools(c):
                    continue
                size = _chars(c)
                if keep_last_lines:
                    text = _result_text(c)
                    kept = _keep_last(text, keep_last_lines, size)
                    if kept is None:
                        continue
                    new_c = kept
                else:
                    new_c = placeholder(size)
                old_tokens = _block_tokens(b)
                new_block = dict(b, content=new_c)
                new_tokens = _block_tokens(new_block)
                if new_tokens > old_tokens or (new_tokens == old_tokens and len(new_c) >= size):
                    continue  # stripping would not shrink it
                b["content"] = new_c
                out["results"] += 1
                out["chars_before"] += size
                out["chars_after"] += len(new_c)
                out["tokens_saved"] += old_tokens - new_tokens
                changed = True
        if changed:
            t.touch(rec)
            out["records"] += 1
    return out


def is_thinking_block(b, role: str | None) -> bool:
    if not isinstance(b, dict):
        return False
    if b.get("type") in ("thinking", "redacted_thinking"):
        return True
    return role == "assistant" and b.get("type") == "text" and isinstance(b.get("text"), str) \
        and is_wrapped_thinking(b["text"])


def _thinking_size(b: dict) -> int:
    n = 0
    for key in ("thinking", "data", "signature", "text"):
        v = b.get(key)
        if isinstance(v, str):
            n += len(v)
    return n


def _role(rec: Record) -> str | None:
    msg = rec.obj.get("message")
    return msg.get("role") if isinstance(msg, dict) else None


def strip_thinking(
    t: Transcript,
    *,
    positions: Range = None,
    blocks: set[BlockRef] | None = None,
) -> dict:
    """Remove thinking blocks (text + signature), wrapped ``<thinking>``/``<think>``
    text blocks included. A message left empty goes (its children are
    re-parented); the leaf keeps a one-line placeholder text instead."""
    out = {"blocks": 0, "chars": 0, "records_removed": 0, "records": 0}
    empty: list[Record] = []
    for rec in list(t.live()):
        content = _content_list(rec)
        if not content or not t.in_range(rec, positions):
            continue
        role = _role(rec)
        keep = []
        removed = 0
        for idx, b in enumerate(content):
            if is_thinking_block(b, role) and (blocks is None or (rec.uuid and BlockRef(rec.uuid, idx) in blocks)):
                removed += 1
                out["chars"] += _thinking_size(b)
            else:
                keep.append(b)
        if not removed:
            continue
        out["blocks"] += removed
        out["records"] += 1
        if keep:
            rec.obj["message"]["content"] = keep
            t.touch(rec)
        elif t.removable(rec):
            empty.append(rec)
        else:
            rec.obj["message"]["content"] = [{"type": "text", "text": THINKING_PLACEHOLDER}]
            t.touch(rec)
    if empty:
        out["records_removed"] = t.remove(empty)
    out["tokens_saved"] = tokens.text_tokens(out["chars"])
    return out


def strip_all(t: Transcript, *, tools=None, keep_last_lines=None, positions: Range = None) -> dict:
    a = strip_tools(t, tools=tools, keep_last_lines=keep_last_lines, positions=positions)
    b = strip_thinking(t, positions=positions)
    return {"tools": a, "thinking": b, "tokens_saved": a["tokens_saved"] + b["tokens_saved"]}


# -- attachments -------------------------------------------------------------

def attachment_plan(
    t: Transcript,
    *,
    types: Iterable[str] | None = None,
    keep_recent: int = 1,
    drop_all: bool = False,
    include_free: bool = False,
    positions: Range = None,
    uuids: set[str] | None = None,
) -> list[dict]:
    """One decision per attachment line: what the attachment policy (txdb/policy.py) does with it.

    keep-all types (queued_command, the *_delta types, skill_listing, hook
    context) and system-prompt records (prompt_snapshot,
    deferred_tools_record) are kept; unknown types are kept; of each
    superseded type the newest ``keep_recent`` are kept; free types (they
    render to nothing) are skipped unless ``include_free``. ``drop_all``
    (only with ``types``) drops every line of the named types.
    """
    types = set(types or ())
    if drop_all and not types:
        raise ValueError("drop_all needs explicit types")
    atts = [r for r in t.live() if r.obj.get("type") == "attachment"]
    rank: dict[int, int] = {}
    seen: dict[str, int] = {}
    for r in reversed(atts):
        a = r.obj.get("attachment")
        at = a.get("type") if isinstance(a, dict) else None
        seen[at] = seen.get(at, 0) + 1
        rank[r.rid] = seen[at]
    plan = []
    for r in atts:
        a = r.obj.get("attachment")
        at = a.get("type") if isinstance(a, dict) else None
        pclass = policy_class(at)
        cost, from_rendered, free = attachment_cost(r.obj)
        action, reason = "keep", pclass
        selected = (not types or at in types) and (uuids is None or r.uuid in uuids) and t.in_range(r, positions)
        if not selected:
            reason = "not selected"
        elif drop_all:
            action, reason = "drop", "drop-all"
        elif pclass == "superseded":
            if rank[r.rid] <= keep_recent:
                reason = f"newest {keep_recent}"
            elif free and not include_free:
                reason = "free (renders to nothing)"
            else:
                action, reason = "drop", "superseded"
        if action == "drop" and not t.removable(r):
            action, reason = "keep", "leaf or repeated uuid"
        plan.append({
            "rec": r, "offset": r.offset, "uuid": r.uuid, "type": at, "policy": pclass,
            "tokens": 0 if at in SYSTEM_PROMPT else cost, "free": free, "from_rendered": from_rendered,
            "pos": t.position(r), "action": action, "reason": reason, "newest_rank": rank[r.rid],
        })
    return plan


def attachment_listing(plan: list[dict]) -> list[dict]:
    """--list: per type, how many, their rendered tokens, and what the policy does."""
    by: dict[str, dict] = {}
    for p in plan:
        row = by.setdefault(p["type"] or "?", {
            "type": p["type"] or "?", "policy": p["policy"], "count": 0, "tokens": 0,
            "drop": 0, "drop_tokens": 0, "free": 0})
        row["count"] += 1
        row["tokens"] += p["tokens"]
        row["free"] += 1 if p["free"] else 0
        if p["action"] == "drop":
            row["drop"] += 1
            row["drop_tokens"] += p["tokens"]
    return sorted(by.values(), key=lambda r: -r["tokens"])


def strip_attachments(t: Transcript, **kw) -> dict:
    """Drop the attachment lines ``attachment_plan`` marks, re-parenting their children."""
    plan = attachment_plan(t, **kw)
    drop = [p for p in plan if p["action"] == "drop"]
    removed = t.remove([p["rec"] for p in drop]) if drop else 0
    return {
        "attachments": len(plan), "removed": removed,
        "tokens_saved": sum(p["tokens"] for p in drop),
        "by_type": {k: v for k, v in _count(p["type"] for p in drop).items()},
    }


def _count(items) -> dict:
    out: dict = {}
    for i in items:
        out[i] = out.get(i, 0) + 1
    return out


# -- sizes -------------------------------------------------------------------

def record_estimate(rec: Record) -> int:
    """Estimated context tokens of one record (system-prompt records count 0;
    they are added once per session by ``system_prompt_tokens``)."""
    o = rec.obj
    if o.get("type") == "attachment":
        a = o.get("attachment")
        if isinstance(a, dict) and a.get("type") in SYSTEM_PROMPT:
            return 0
        return attachment_cost(o)[0]
    content = rec.content
    if content is None:
        return 0
    return sum(b.get("tokens", 0) for b in block_rows(content, _role(rec)))


def system_prompt_tokens(t: Transcript) -> int:
    latest: dict[str, Record] = {}
    for r in t.live():
        if r.obj.get("type") == "attachment":
            a = r.obj.get("attachment")
            if isinstance(a, dict) and a.get("type") in SYSTEM_PROMPT:
                latest[a["type"]] = r
    return sum(attachment_cost(r.obj)[0] for r in latest.values())


def chain_prefix_estimates(t: Transcript) -> list[int]:
    """Estimated context before each chain position (system prompt included);
    one more entry at the end: the whole chain."""
    base = system_prompt_tokens(t)
    out = [base]
    for rec in t.chain:
        out.append(out[-1] + record_estimate(rec))
    return out


def chain_estimate(t: Transcript) -> int:
    return chain_prefix_estimates(t)[-1]
