"""Turn the lines of one session file into catalog rows.

Nothing here touches the database: rows are handed to a sink (the catalog
writer) in batches, so memory stays bounded. For a file read from its
start, everything the catalog derives from it (dangling parents, the
active chain) is computed here too; an appended tail needs the rows already
in the catalog, and the writer works that out.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable

import orjson

from txdb.model import chain as chainmod
from txdb.model.policy import attachment_cost, policy_class
from txdb.model.records import (DROPPED_FIELD, JOURNAL_TYPES, TITLE_KEY, block_rows, block_text_at, message_content,
    message_facts, message_link, note_title, record_kind, record_tokens, usage_count, usage_problems)
from txdb.model import deep
from txdb.catalog.ingest.census import Census
from txdb.model.lines import Line, parse_line

# A batch of rows is handed on at this many lines or bytes, whichever comes
# first: small enough to bound memory, large enough that per-batch costs
# stay small.
BATCH = 2000
BATCH_BYTES = 256 << 10



FORKED, FORKED_TEXT = b'"forkedFrom":{', '"forkedFrom":{'  # records.forked: a fork's copy of a line
MARKER_KINDS = ("text", "tool_result")  # the blocks a persisted marker stands in
# blocks.text keeps only the first TEXT_KEPT characters of a long tool input or
# output (blocks.cut = 1; the whole is txdb_text(file_id, offset, idx), decoded
# from raw_chunks): as many as a table page's cell shows (migration 040).
TEXT_KEPT = 400
CUT_KINDS = ("tool_result", "tool_use", "command_output")


def kept_text(kind: str, tool_name, text):
    """(the text blocks.text stores, cut): a long tool input (but Read's,
    which repeated_reads reads as JSON) or output keeps its first TEXT_KEPT
    characters; any other text, and a persisted marker, stays whole."""
    if (type(text) is str and len(text) > TEXT_KEPT and kind in CUT_KINDS
            and not (kind == "tool_use" and tool_name == "Read") and not is_marker(text)):
        return text[:TEXT_KEPT], 1
    return text, None


def block_text(raw, idx: int):
    """The whole text of block ``idx`` of the record whose raw JSON is
    ``raw``, as refresh derived it (None when there is no such block)."""
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:  # deeper than orjson reads, or recovered: as add_line parses it
        objects = parse_line(raw).objects
        obj = objects[0][2] if objects else None
    if type(obj) is not dict:
        return None
    content = message_content(obj)
    if content is None:
        return None
    try:
        return block_text_at(content, idx)
    except RecursionError:
        with deep.nesting():
            return block_text_at(content, idx)


def is_marker(text: str) -> bool:
    """A block's text is a persisted marker (``<persisted-...``, after
    leading whitespace; ASCII case ignored, as SQL's LIKE), stored in
    ``markers`` for the persisted view."""
    return text.lstrip(" \t\n\r")[:11].lower() == "<persisted-"


def recorded_size(obj: dict) -> int | None:
    """The record's ``toolUseResult.persistedOutputSize`` when it is a
    plausible integer (below 10^15, so sums never overflow), else None."""
    tur = obj.get("toolUseResult")
    v = tur.get("persistedOutputSize") if type(tur) is dict else None
    return v if type(v) is int and 0 <= v <= 999_999_999_999_999 else None


def _int(v):
    return usage_count(v)  # an invalid count is stored as NULL and named in usage.invalid


def _str(v):
    return v if type(v) is str else None


@dataclass(slots=True)
class RowBatch:
    """Rows for the catalog tables, in their column order, and each
    record's ``(offset, raw)`` for raw_chunks: raw is the line's bytes, or
    the text with U+FFFD of an object recovered from a malformed line."""

    records: list[tuple]
    raws: list[tuple]
    blocks: list[tuple]
    attachments: list[tuple]
    usage: list[tuple]
    errors: list[tuple]
    markers: list[tuple] = field(default_factory=list)


@dataclass
class FileSummary:
    """What one pass over a file adds to its session row and chain."""

    lines: int = 0
    error_count: int = 0
    record_bytes: int = 0
    journal_bytes: int = 0
    messages: int = 0
    first_ts: str | None = None
    last_ts: str | None = None
    meta: dict = field(default_factory=dict)
    titles: dict = field(default_factory=dict)  # source -> value seen in these lines
    unnamed_results: int = 0  # tool_results whose tool_use came earlier (named in SQL)
    # Read from the start only: computed without the catalog.
    dangling: list[tuple[int, str]] | None = None  # (offset, parent uuid in no line of the file)
    chain: list[tuple[int, str | None]] | None = None  # (offset, timestamp) of the active chain, root first
    census: Census = field(default_factory=Census)  # the file_formats counts of these lines


class FileIngest:
    """Rows of one file's lines, handed to ``sink`` in batches."""

    def __init__(self, file_id: int, kind: str, sink: Callable[[RowBatch], None], from_start: bool):
        self.file_id = file_id
        self.batch_bytes = 0
        self.kind = kind
        self.sink = sink
        self.from_start = from_start
        self.summary = FileSummary()
        self.records: list[tuple] = []
        self.raws: list[tuple] = []  # (offset, raw) of each record: raw_chunks
        self.blocks: list[tuple] = []
        self.attachments: list[tuple] = []
        self.usage: list[tuple] = []
        self.errors: list[tuple] = []
        self.markers: list[tuple] = []
        self.nodes: list[chainmod.Node] = []
        self.local_tools: dict[str, str] = {}  # tool_uses of the lines read now
        self.uuids: set[str] = set()  # every uuid of the lines read now
        self.opens = True  # whether the record being derived opens a message
        self.links: dict[str, tuple] = {}  # uuid -> what its children read of it (records.message_link)
        self.calls: dict[str, bool] = {}  # tool call id -> its message's first (records.message_link)
        self.parent_candidates: list[tuple[int, str]] = []  # parent not seen before the child
        self.last_line = 0  # line number of the last object added

    def add_line(self, line: Line) -> None:
        self.summary.lines += 1
        raw = line.raw
        if raw[:1] == b"{":  # the usual line: one object, strict JSON
            try:
                obj = orjson.loads(raw)
            except orjson.JSONDecodeError:
                obj = None
            if type(obj) is dict:
                self.add_object(line.number, line.offset, len(raw), obj, raw)
                self._maybe_flush(line.length)
                return
        self._add_parsed(line, parse_line(raw))

    def _add_parsed(self, line: Line, parsed) -> None:
        """A line the strict parser refused, or that is not one object."""
        if parsed.error:
            self.summary.error_count += 0 if parsed.objects else 1
            self.errors.append(
                (self.file_id, line.number, line.offset, line.length, parsed.error,
                 1 if parsed.objects else 0)
            )
        raw = line.raw
        for start, length, obj in parsed.objects:
            piece = raw[start:start + length] if (start or length != len(raw)) else raw
            if parsed.recovered:
                piece = piece.decode("utf-8", "replace")
            self.add_object(line.number, line.offset + start, length, obj, piece)
        self._maybe_flush(line.length)

    def _maybe_flush(self, length: int) -> None:
        self.batch_bytes += length
        if self.batch_bytes >= BATCH_BYTES or len(self.records) >= BATCH:
            self.flush()

    def add_object(self, number: int, offset: int, length: int, obj: dict, raw) -> None:
        rtype, subtype = record_kind(obj)
        fid = self.file_id
        summary = self.summary
        summary.census.line(obj, rtype)
        summary.record_bytes += length
        if rtype in JOURNAL_TYPES:
            summary.journal_bytes += length
        get = obj.get
        uuid = get("uuid")
        if type(uuid) is not str:
            uuid = None
        parent = get("parentUuid")
        if type(parent) is not str:
            parent = None
        ts = get("timestamp")
        if type(ts) is not str:
            ts = None
        request_id = get("requestId")
        if type(request_id) is not str:
            request_id = None
        session_id = get("sessionId")
        if type(session_id) is not str:
            session_id = _str(get("session_id"))
        msg = get("message")
        if type(msg) is dict:
            role = _str(msg.get("role"))
            model = _str(msg.get("model"))
            message_id = _str(msg.get("id"))
        else:
            msg = role = model = message_id = None
        args = (obj, rtype, subtype, offset, session_id, role, ts, msg, message_id, uuid, request_id, model)
        self.opens, link = message_link(message_facts(obj), self.links.get(parent) if parent else None, self.calls)
        if uuid:
            self.links[uuid] = link
        try:
            tokens = self._derive(*args)
        except Exception as e:
            # Derived columns are best effort: the record itself is always stored.
            tokens = self._derive_again(number, offset, length, args, e)

        compact = get("isCompactSummary")
        self.records.append((
            fid, offset, length, number, session_id, rtype, subtype, uuid, parent,
            _str(get("logicalParentUuid")), _str(get("leafUuid")), ts,
            1 if get("isSidechain") else 0, 1 if get("isMeta") else None, role, model, message_id,
            request_id, tokens,
            1 if compact == 1 and type(compact) in (bool, int, float) else None,  # as SQL's `IS 1` reads it
            1 if (FORKED if type(raw) is bytes else FORKED_TEXT) in raw else None,
            raw if rtype == "cost-state" else None,
        ))
        self.raws.append((offset, raw))
        if uuid:
            self.uuids.add(uuid)
        # An object after the first on its line is never read by Claude Code (txdb/model/chain.py).
        later, self.last_line = number == self.last_line, number
        node = None if later else chainmod.node_from(offset, obj)
        if node is not None:
            self.nodes.append(node)
            if uuid and parent and parent not in self.uuids:
                self.parent_candidates.append((offset, parent))
        self._meta(obj, rtype, ts, session_id, model)

    def _derive(self, obj, rtype, subtype, offset, session_id, role, ts, msg, message_id, uuid,
                request_id, model) -> int:
        """The record's blocks, attachment and usage rows; returns its tokens.
        Rows are added only once all of them are made, so a failure adds none."""
        fid = self.file_id
        tokens = 0
        blocks: list[tuple] | None = None
        attachment = usage = None
        markers = []
        unnamed = 0
        content = message_content(obj)
        if content is not None:
            blocks = []
            append = blocks.append
            local_tools = self.local_tools
            brows = block_rows(content, role)
            tokens = record_tokens(obj, brows, opens=self.opens)  # the one per-record rule
            for b in brows:
                kind = b["kind"]
                tool_name = b.get("tool_name")
                tuid = b.get("tool_use_id")
                if kind == "tool_use" and tuid:
                    local_tools[tuid] = tool_name
                elif kind == "tool_result":
                    tool_name = local_tools.get(tuid)
                    if tool_name is None and tuid:
                        unnamed += 1
                btokens = b.get("tokens", 0)
                text = b.get("text")
                if kind in MARKER_KINDS and type(text) is str and is_marker(text):
                    markers.append((fid, offset, b["idx"], recorded_size(obj), None))
                append((
                    fid, offset, b["idx"], session_id, role or rtype, b.get("type"), kind,
                    tool_name, tuid, b.get("is_error"), b.get("chars", 0),
                    b.get("signature_chars", 0), b.get("media_type"), b.get("width"),
                    b.get("height"), b.get("image_sha256"), b.get("images", 0),
                    btokens, *kept_text(kind, tool_name, text),
                ))
        elif rtype == "attachment":
            att = obj.get("attachment")
            if type(att) is not dict:
                att = {}
            # the model the session runs on so far decides a task_reminder
            cost, from_rendered, free = attachment_cost(obj, self.summary.meta.get("model"))
            pclass = policy_class(subtype)
            # The system prompt is counted once per session, not per line.
            tokens = 0 if pclass == "system-prompt" else cost
            attachment = (
                fid, offset, session_id, subtype, ts, pclass, cost, 1 if from_rendered else 0,
                1 if free else 0, _str(att.get("hookEvent")),
            )

        if rtype == "assistant" and msg is not None and type(msg.get("usage")) is dict:
            u = msg["usage"]
            cc = u.get("cache_creation")
            if type(cc) is not dict:
                cc = {}
            iterations = u.get("iterations")
            usage = (
                fid, message_id or f"uuid:{uuid or offset}", offset, request_id,
                session_id, ts, model, _int(u.get("input_tokens")), _int(u.get("output_tokens")),
                _int(u.get("cache_read_input_tokens")), _int(u.get("cache_creation_input_tokens")),
                _int(cc.get("ephemeral_5m_input_tokens")), _int(cc.get("ephemeral_1h_input_tokens")),
                _str(u.get("service_tier")),
                deep.dumps_text(iterations) if type(iterations) is list else None,
                usage_problems(u),
            )
        dropped = obj.get(DROPPED_FIELD)
        if type(dropped) is list:  # markers of the thinking the API dropped (never sent): a negative idx each
            markers.extend((fid, offset, -1 - k, None, m) for k, m in enumerate(dropped)
                           if type(m) is str and is_marker(m))
        census = self.summary.census
        if markers:
            self.markers.extend(markers)
        if blocks:
            self.blocks.extend(blocks)
            for b in blocks:
                census.add("block", b[5])
        if attachment is not None:
            self.attachments.append(attachment)
            census.add("attachment", subtype)
        if usage is not None:
            self.usage.append(usage)
        self.summary.unnamed_results += unnamed
        return tokens

    def _derive_again(self, number: int, offset: int, length: int, args: tuple, error: Exception) -> int:
        """After ``_derive`` failed: once more with room for deep nesting (a
        valid line may nest deeper than the interpreter's default recursion
        limit allows); failing that, the record is stored without its
        blocks, attachment and usage rows, and the line noted in
        parse_errors (recovered)."""
        if isinstance(error, RecursionError):
            try:
                with deep.nesting():
                    return self._derive(*args)
            except Exception as e:
                error = e
        self.errors.append((self.file_id, number, offset, length,
                            f"stored without its blocks: {type(error).__name__}: {error}", 1))
        return 0

    def _meta(self, obj, rtype, ts, session_id, model) -> None:
        s = self.summary
        m = s.meta
        if session_id and "session_id" not in m:
            m["session_id"] = session_id
        if rtype == "user" or rtype == "assistant":
            s.messages += 1
            for key, col in (("cwd", "cwd"), ("gitBranch", "git_branch"), ("version", "version")):
                if col not in m:
                    v = obj.get(key)
                    if type(v) is str and v:
                        m[col] = v
            if rtype == "assistant" and model and model != "<synthetic>" and "model" not in m:
                m["model"] = model
            if "agent_id" not in m and type(obj.get("agentId")) is str:
                m["agent_id"] = obj["agentId"]
        if ts:
            if s.first_ts is None or ts < s.first_ts:
                s.first_ts = ts
            if s.last_ts is None or ts > s.last_ts:
                s.last_ts = ts
        if rtype in TITLE_KEY or (rtype == "user" and "prompt" not in s.titles):
            note_title(s.titles, obj)

    def flush(self) -> None:
        """Hand the rows gathered so far to the sink."""
        if not (self.records or self.errors):
            return
        batch = RowBatch(self.records, self.raws, self.blocks, self.attachments, self.usage, self.errors,
                         self.markers)
        self.raws = []
        self.records, self.blocks, self.attachments, self.usage, self.errors = [], [], [], [], []
        self.markers = []
        self.batch_bytes = 0
        self.sink(batch)

    def seed_links(self, rows: Iterable[tuple]) -> None:
        """A grown file: what its new lines' parents and calls, stored
        before, tell :func:`records.message_link` (``(uuid, type, message
        id, parent uuid, tool call ids joined by spaces)`` rows of the
        stored records, in file order)."""
        for uuid, rtype, mid, parent, ids in rows:
            facts = (rtype, mid, tuple((ids or "").split()), ())
            self.links[uuid] = message_link(facts, self.links.get(parent) if parent else None, self.calls)[1]

    def finish(self) -> FileSummary:
        """Flush, and for a file read from its start, derive its dangling
        parents and active chain."""
        self.flush()
        s = self.summary
        if self.from_start:
            s.dangling = [(o, p) for o, p in self.parent_candidates if p not in self.uuids]
            s.chain = [(n.offset, n.timestamp) for n in chainmod.active_chain(self.nodes)]
        return s
