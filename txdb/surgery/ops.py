"""Surgery operations on a ``Transcript``: library functions, no I/O.

Each takes the transcript plus an explicit target selection, so the
single-session commands and the bulk ``--where`` path call the same code:

- ``strip_tools(t, ..., tool_use_ids=None)``: None means every tool call
  the filters (tools, range) allow; a set restricts to those ids.
- ``strip_thinking(t, ..., blocks=None)``: blocks as ``BlockRef``
  (record uuid, block idx), which stay valid on the pending copy.
- ``strip_attachments(t, ..., uuids=None)``: attachment record uuids.

Every function walks the records, parses each one it looks at
(``Record.parse``), hands the ones it changes to ``t.touch`` (or
``t.remove``s them) and lets the others' dicts go; it returns a plain dict
describing what it did; nothing here prints or writes a file.
"""

from __future__ import annotations

import fnmatch
from typing import Iterable, NamedTuple

from txdb.catalog import estimate
from txdb.model import tokens
from txdb.model.policy import DEFAULT_KEEP_RECENT, SYSTEM_PROMPT, attachment_cost, attachment_decision, policy_class
from txdb.model import records
from txdb.model.records import MARK, THINKING_PLACEHOLDER, block_rows, is_wrapped_thinking, record_tokens
from txdb.errors import SurgeryError
from txdb.model.transcript import UNREAD, Record, Transcript, dumps

INPUT_STRING_LIMIT = 120
INPUT_VALUE_LIMIT = 200

Range = tuple[int | None, int | None] | None


class BlockRef(NamedTuple):
    uuid: str
    idx: int


def check_positions(t: Transcript, positions: Range) -> None:
    """A range must name positions of the active chain (0..len-1), in order."""
    if not positions:
        return
    lo, hi = positions
    if lo is not None and hi is not None and lo > hi:
        raise SurgeryError(f"--from {lo} is after --to {hi}: give the range lowest position first")
    last = len(t.chain) - 1
    names = (("--pos", lo),) if lo == hi else (("--from", lo), ("--to", hi))
    for name, v in names:
        if v is not None and (v < 0 or v > last):
            raise SurgeryError(f"{name} {v} is past the end of the active chain (positions 0..{last})")


class Op:
    """What ``engine.run_surgery`` runs: ``op(t, original)`` edits ``t`` (the copy
    being written; ``t.base`` says what its chain positions are) and returns a
    JSON-able dict of what it did. A plain function is an op with the
    defaults below (``as_op``); an op class overrides what it needs."""

    def __call__(self, t: Transcript, original: Transcript) -> dict | None:
        raise NotImplementedError

    def check_positions(self, t: Transcript, positions: Range) -> None:
        """Refuse --from/--to/--pos that name no position of ``t``'s chain, before the op runs."""
        check_positions(t, positions)

    def write_files(self, owner: tuple[int, int] | None = None) -> int:
        """Write the files beside the session the copy will refer to (after the
        gate, before the copy; never on a dry run). None by default."""
        return 0

    def remove_files(self) -> None:
        """Take back what ``write_files`` wrote: the copy referring to it was not written."""


class _FunctionOp(Op):
    def __init__(self, fn):
        self.fn = fn

    def __call__(self, t: Transcript, original: Transcript) -> dict | None:
        return self.fn(t, original)


def as_op(op) -> Op:
    """``op`` as an ``Op``: a plain ``fn(t, original)`` takes the defaults."""
    return op if isinstance(op, Op) else _FunctionOp(op)


def tool_spans(t: Transcript) -> list[tuple[int, int, str]]:
    """(tool_use position, tool_result position, id) of every tool call on the
    active chain; a result pairs with the latest call of its id before it (so
    an id a resume used again pairs with its own call). The one rule of
    "where does this call end" for compact --before and compact-range."""
    open_uses: dict[str, int] = {}
    spans = []
    for r in t.chain:
        if r.type not in ("user", "assistant"):
            continue
        for blk in content_list(r.parse()) or ():
            if not isinstance(blk, dict):
                continue
            if blk.get("type") in ("tool_use", "server_tool_use") and isinstance(blk.get("id"), str):
                open_uses[blk["id"]] = r.pos
            elif blk.get("type") == "tool_result" and isinstance(blk.get("tool_use_id"), str):
                use = open_uses.pop(blk["tool_use_id"], None)
                if use is not None:
                    spans.append((use, r.pos, blk["tool_use_id"]))
    return spans


def placeholder(chars: int, extra: str = "") -> str:
    return f"{MARK}: {chars:,} chars{extra}]"


def content_list(obj: dict):
    msg = obj.get("message")
    if isinstance(msg, dict) and isinstance(msg.get("content"), list):
        return msg["content"]
    return None


def _chars(value) -> int:
    if isinstance(value, str):
        return len(value)
    return len(dumps(value))


def tool_names(t: Transcript) -> dict[str, str]:
    names: dict[str, str] = {}
    for rec in t.live():
        for b in content_list(rec.parse()) or ():
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


def block_tokens(b: dict) -> int:
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


def loads_tools(content) -> bool:
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
    opts = _ToolOptions([s for s in (tools or []) if s], not only_results, not only_inputs, keep_last_lines,
                        tool_use_ids)
    return _strip(t, positions, opts, thinking=False)[0]


def strip_thinking(
    t: Transcript,
    *,
    positions: Range = None,
    blocks: set[BlockRef] | None = None,
) -> dict:
    """Remove thinking blocks (text + signature), wrapped ``<thinking>``/``<think>``
    text blocks included. A message left empty goes (its children are
    re-parented); the leaf keeps a one-line placeholder text instead."""
    return _strip(t, positions, None, thinking=True, blocks=blocks)[1]


def strip_all(t: Transcript, *, tools=None, keep_last_lines=None, positions: Range = None) -> dict:
    opts = _ToolOptions([s for s in (tools or []) if s], True, True, keep_last_lines, None)
    a, b = _strip(t, positions, opts, thinking=True)
    return {"tools": a, "thinking": b, "tokens_saved": a["tokens_saved"] + b["tokens_saved"]}


class _ToolOptions(NamedTuple):
    tools: list[str]
    inputs: bool
    results: bool
    keep_last_lines: int | None
    tool_use_ids: set[str] | None


def _strip(t: Transcript, positions: Range, tool_opts: _ToolOptions | None, *, thinking: bool,
           blocks: set[BlockRef] | None = None) -> tuple[dict, dict]:
    """One walk over the records for tool blocks (``tool_opts``) and/or
    thinking blocks: each record is parsed once and touched once."""
    tools_out = {"inputs": 0, "results": 0, "kept_errors": 0, "chars_before": 0, "chars_after": 0, "records": 0,
                 "tokens_saved": 0}
    think_out = {"blocks": 0, "chars": 0, "records_removed": 0, "records": 0}
    model = resume_model(t)
    unsent_chars = 0  # thinking removed that the request leaves out anyway (estimate.unsent_thinking)
    names = tool_names(t) if tool_opts is not None and tool_opts.tools else {}
    wanted = {b.uuid for b in blocks} if blocks is not None else None
    empty: list[Record] = []
    for rec in list(t.live()):
        if not t.in_range(rec, positions):
            continue
        if tool_opts is None and wanted is not None and rec.uuid not in wanted:
            continue
        obj = rec.parse()
        content = content_list(obj)
        if not content:
            continue
        changed = False
        if tool_opts is not None and _strip_tool_blocks(content, names, tool_opts, tools_out):
            tools_out["records"] += 1
            changed = True
        if thinking:
            chars = think_out["chars"]
            keep = _strip_thinking_blocks(rec, message_role(obj), content, blocks, think_out)
            if think_out["chars"] > chars and estimate.unsent_thinking([(0, rec.model, 1)], 1, model):
                unsent_chars += think_out["chars"] - chars
            if keep is not None:
                think_out["records"] += 1
                if keep:
                    obj["message"]["content"] = keep
                    changed = True
                elif t.removable(rec):
                    empty.append(rec)
                else:
                    obj["message"]["content"] = [{"type": "text", "text": THINKING_PLACEHOLDER}]
                    changed = True
        if changed:
            t.touch(rec, obj)
    if empty:
        think_out["records_removed"] = t.remove(empty)
    # Context saved: only thinking the request counts (none on a model whose API does not count it).
    think_out["tokens_saved"] = tokens.text_tokens(think_out["chars"] - unsent_chars)
    think_out["tokens_not_counted"] = tokens.text_tokens(unsent_chars)
    think_out["model"] = model
    think_out["counts_thinking"] = estimate.counts_thinking(model) if model else True
    return tools_out, think_out


def _strip_tool_blocks(content: list, names: dict[str, str], opts: _ToolOptions, out: dict) -> bool:
    """Strip the tool blocks ``opts`` selects in ``content``; True when any changed."""
    changed = False
    for b in content:
        if not isinstance(b, dict):
            continue
        btype = b.get("type")
        if opts.inputs and btype in ("tool_use", "server_tool_use"):
            tid = b.get("id")
            if opts.tool_use_ids is not None and tid not in opts.tool_use_ids:
                continue
            if not _tool_match(b.get("name"), opts.tools):
                continue
            inp = b.get("input")
            counter = [0]
            new = _shrink_input(inp, counter) if isinstance(inp, dict) else {}
            if counter[0] == 0 and isinstance(inp, dict):
                continue
            before, after = _chars(inp), _chars(new)
            out["tokens_saved"] += block_tokens(b) - block_tokens(dict(b, input=new))
            b["input"] = new
            out["inputs"] += 1
            out["chars_before"] += before
            out["chars_after"] += after
            changed = True
        elif opts.results and btype == "tool_result":
            tid = b.get("tool_use_id")
            if opts.tool_use_ids is not None and tid not in opts.tool_use_ids:
                continue
            if not _tool_match(names.get(tid), opts.tools):
                continue
            c = b.get("content")
            if b.get("is_error"):
                out["kept_errors"] += 1
                continue
            if c is None or _is_stripped_result(c) or loads_tools(c):
                continue
            size = _chars(c)
            if opts.keep_last_lines:
                text = _result_text(c)
                kept = _keep_last(text, opts.keep_last_lines, size)
                if kept is None:
                    continue
                new_c = kept
            else:
                new_c = placeholder(size)
            old_tokens = block_tokens(b)
            new_block = dict(b, content=new_c)
            new_tokens = block_tokens(new_block)
            if new_tokens > old_tokens or (new_tokens == old_tokens and len(new_c) >= size):
                continue  # stripping would not shrink it
            b["content"] = new_c
            out["results"] += 1
            out["chars_before"] += size
            out["chars_after"] += len(new_c)
            out["tokens_saved"] += old_tokens - new_tokens
            changed = True
    return changed


def _strip_thinking_blocks(rec: Record, role: str | None, content: list, blocks: set[BlockRef] | None,
                           out: dict) -> list | None:
    """The blocks of ``content`` to keep when its thinking blocks (those in
    ``blocks``, or all) go; None when there is none to remove."""
    keep = []
    removed = 0
    for idx, b in enumerate(content):
        if is_thinking_block(b, role) and (blocks is None or (rec.uuid and BlockRef(rec.uuid, idx) in blocks)):
            removed += 1
            out["chars"] += thinking_size(b)
        else:
            keep.append(b)
    if not removed:
        return None
    out["blocks"] += removed
    return keep


def is_thinking_block(b, role: str | None) -> bool:
    if not isinstance(b, dict):
        return False
    if b.get("type") in ("thinking", "redacted_thinking"):
        return True
    return role == "assistant" and b.get("type") == "text" and isinstance(b.get("text"), str) \
        and is_wrapped_thinking(b["text"])


def thinking_size(b: dict) -> int:
    n = 0
    for key in ("thinking", "data", "signature", "text"):
        v = b.get(key)
        if isinstance(v, str):
            n += len(v)
    return n


def message_role(obj: dict) -> str | None:
    msg = obj.get("message")
    return msg.get("role") if isinstance(msg, dict) else None


# -- attachments -------------------------------------------------------------

def attachment_plan(
    t: Transcript,
    *,
    types: Iterable[str] | None = None,
    keep_recent: int = DEFAULT_KEEP_RECENT,
    drop_all: bool = False,
    include_free: bool = False,
    positions: Range = None,
    uuids: set[str] | None = None,
) -> list[dict]:
    """One decision per attachment line: what the attachment policy (txdb/model/policy.py) does with it.

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
    atts = [r for r in t.live() if r.type == "attachment"]
    model = resume_model(t)
    rank: dict[int, int] = {}
    seen: dict[str | None, int] = {}
    for r in reversed(atts):
        at = r.attachment_type
        seen[at] = seen.get(at, 0) + 1
        rank[r.rid] = seen[at]
    plan = []
    for r in atts:
        at = r.attachment_type
        pclass = policy_class(at)
        cost, from_rendered, free = attachment_cost(r.parse(), model)
        selected = (not types or at in types) and (uuids is None or r.uuid in uuids) and t.in_range(r, positions)
        if not selected:
            action, reason = "keep", "not selected"
        elif drop_all:
            action, reason = "drop", "drop-all"
        else:
            action, reason = attachment_decision(pclass, rank[r.rid], free, keep_recent, include_free)
        if action == "drop" and not t.removable(r):
            action, reason = "keep", "leaf or repeated uuid"
        plan.append({
            "rec": r, "offset": r.offset, "uuid": r.uuid, "type": at, "policy": pclass,
            "tokens": 0 if at in SYSTEM_PROMPT else cost, "free": free, "from_rendered": from_rendered,
            "pos": t.position(r), "action": action, "reason": reason, "newest_rank": rank[r.rid],
        })
    return plan


def resume_model(t: Transcript) -> str | None:
    """The model the CLI resumes the session on: its last assistant turn's
    on the chain (a synthetic one aside)."""
    for r in reversed(t.chain):
        if r.type == "assistant" and r.model and r.model != "<synthetic>":
            return r.model
    return None


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

def record_estimate(rec: Record, model: str | None = None, opens: bool = False) -> int:
    """Estimated context tokens of one record: the catalog's per-record
    figure (system-prompt records count 0; they are added once per session
    by ``system_prompt_tokens``; an attachment priced on ``model``, the
    session's: :func:`priced_model`), with its message's wrapper when it
    ``opens`` one (:func:`chain_opens`). Kept on the record, without the
    wrapper, until it changes."""
    if rec.tokens is None:
        _measure(rec, model)
    return rec.tokens + records.message_wrapper(rec.type, rec.tokens) if opens else rec.tokens


def chain_opens(t: Transcript) -> list[bool]:
    """Per chain position, whether its record opens a message of the
    request (``records.message_link``, against the record its parentUuid
    names, as refresh reads it)."""
    out = []
    links: dict[str, tuple] = {}
    calls: dict[str, bool] = {}
    for rec in t.chain:
        if rec.facts is None:  # kept on the record until it changes, as its size is
            if rec.type in ("user", "assistant"):
                obj = rec.parse()
                rec.facts = records.message_facts(obj)
                if rec.tokens is None:  # from the same parse (a message's size needs no model)
                    measure(rec, obj)
            else:
                rec.facts = (rec.type, None, (), ())
        opens, link = records.message_link(rec.facts, links.get(rec.node.parent_uuid or ""), calls)
        out.append(opens)
        if rec.uuid:
            links[rec.uuid] = link
    return out


def turn_usage(obj: dict) -> dict | None:
    """The usage object of an assistant turn the API billed (a synthetic
    message has none): what the gauge and the usage reset read."""
    msg = obj.get("message")
    if obj.get("type") != "assistant" or not isinstance(msg, dict):
        return None
    if msg.get("model") == "<synthetic>":
        return None
    u = msg.get("usage")
    return u if isinstance(u, dict) else None


def recorded_context(rec: Record) -> int | None:
    """The context an assistant turn's recorded usage measured (the gauge,
    ``estimate.recorded_context``; 0 for none), None for a record without
    usage. Kept on the record with its size."""
    if rec.type != "assistant":
        return None
    if rec.recorded == UNREAD:
        _usage(rec, rec.parse())
    return rec.recorded


def _usage(rec: Record, obj: dict) -> None:
    u = turn_usage(obj) if rec.type == "assistant" else None
    rec.recorded = None if u is None else (estimate.recorded_context(u) or 0)


def _measure(rec: Record, model: str | None = None) -> None:
    _fill(rec, rec.parse(), model, True)


# Attachments whose cost depends on the model they are priced on
# (``policy.attachment_cost``): sized once that model is known.
_MODEL_PRICED = frozenset({"task_reminder"})


def measure(rec: Record, obj: dict) -> None:
    """A record's size, thinking, images and recorded context from one parse
    (its object ``obj``): a pass reads each record once for all of them,
    whichever transcripts it sizes (the copy's records carry them:
    ``Record.clone``). The session's model is not known during the load:
    an attachment whose cost depends on it is left to ``record_estimate``
    (priced on :func:`priced_model`)."""
    _fill(rec, obj, None, False)


def measure_at_load(rec: Record, obj: dict) -> None:
    """What a pass reads of every record, from the load's own parse
    (``Transcript(measure=...)``): an assistant turn's recorded context (the
    window rule reads every turn's); the whole size of any other kind of
    record (attachments, system lines: small, and nothing else parses them).
    A message's size waits for the chain: most of a long file can lie off
    it, and :func:`chain_opens` parses each of its messages anyway, sizing
    it from that parse (``measure``)."""
    if rec.type == "assistant":
        _usage(rec, obj)
    elif rec.type != "user":
        _fill(rec, obj, None, False)


def _fill(rec: Record, obj: dict, model: str | None, priced: bool) -> None:
    if priced or rec.attachment_type not in _MODEL_PRICED:
        rec.tokens = record_tokens(obj, model=model, opens=False)  # its message's wrapper: record_estimate
    if rec.thinking is None and rec.type == "assistant":
        rec.thinking = records.thinking_tokens(obj) if b"thinking" in rec.raw else 0
    if rec.images is None:
        has = rec.type in ("user", "assistant") and (rec.dirty or b'"image"' in rec.raw)
        rec.images = records.image_tokens(obj) if has else 0
    _usage(rec, obj)
    if rec.attachment_type in SYSTEM_PROMPT:
        _prompt(rec, obj)


def priced_model(t: Transcript) -> str | None:
    """The model ``t``'s attachments are priced on, as refresh prices them
    (``records.session_model``: the file's first assistant turn's)."""
    return records.session_model(r.model for r in t.live() if r.type == "assistant")


def system_prompt_tokens(t: Transcript) -> int:
    """``records.system_prompt_tokens`` of the transcript: the latest record
    of each system-prompt type (file order) counts, each one's cost read
    once and kept on it (``Record.prompt``), like its size: a pass asks for
    it every time it sizes a transcript."""
    latest: dict[str, Record] = {}
    for r in t.records:
        if r.attachment_type in SYSTEM_PROMPT and not r.removed:
            latest[r.attachment_type] = r
    return sum(_prompt(r) for r in latest.values())


def _prompt(rec: Record, obj: dict | None = None) -> int:
    if rec.prompt is None:
        rec.prompt = records.system_prompt_tokens([rec.parse() if obj is None else obj])
    return rec.prompt


def chain_prefix_estimates(t: Transcript) -> list[int]:
    """Estimated context before each chain position (system prompt included);
    one more entry at the end: the whole chain."""
    base = system_prompt_tokens(t)
    model = priced_model(t)
    out = [base]
    for rec, opens in zip(t.chain, chain_opens(t)):
        out.append(out[-1] + record_estimate(rec, model, opens))
    return out


def chain_prefix_images(t: Transcript) -> list[int]:
    """Image tokens (``records.image_tokens``) before each chain position,
    as :func:`chain_prefix_estimates` lists its estimates: the part of them
    the calibration prices apart (``estimate.fit``). Each record's figure
    is kept on it until it changes, as ``record_estimate`` keeps its size."""
    out = [0]
    for rec in t.chain:
        if rec.images is None:
            has = rec.type in ("user", "assistant") and (rec.dirty or b'"image"' in rec.raw)
            rec.images = records.image_tokens(rec.parse()) if has else 0
        out.append(out[-1] + rec.images)
    return out


def chain_thinking(t: Transcript) -> list[tuple[int, str | None, int]]:
    """``(chain position, model, thinking tokens)`` of the chain's records
    that hold thinking, for ``estimate.unsent_thinking`` (the catalog's
    twin of the same figures: ``estimate.catalog_thinking``). Each record's
    figure is kept on it until it changes, as ``record_estimate`` keeps its size."""
    return [(pos, rec.model, n) for pos, rec in enumerate(t.chain)
            if rec.type == "assistant" and (n := _thinking(rec))]


def _thinking(rec: Record) -> int:
    if rec.thinking is None:
        rec.thinking = records.thinking_tokens(rec.parse()) if b"thinking" in rec.raw else 0
    return rec.thinking


def chain_estimate(t: Transcript) -> int:
    return chain_prefix_estimates(t)[-1]
