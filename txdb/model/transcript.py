"""A session file held as its bytes, parsed only where an operation looks.

The file's bytes stay in one buffer. Lines come from
``ingest.lines.read_lines`` and their objects from ``parse_line``, as the
catalog reads them; each object becomes a ``Record``: where its bytes lie
(offset and length in the buffer, the catalog's key), its chain fields (a
``txdb.model.chain.Node``), its model and attachment type, and a cached token
estimate (with its thinking and, for an assistant turn, its recorded
context, read from the same parse). No parsed object is kept: ``Record.parse()`` parses the bytes
when an operation asks, and an operation that changes a record hands the
object to ``touch``, which stores it at once as compact JSON (like Claude
Code's own) and reads the chain fields again from it. The chain (uuid ->
record, the leaf, positions 0..N root -> leaf) comes from ``txdb.model.chain``,
so chain positions here mean what the catalog's ``active_chain`` view means.

``remove`` drops records (their children are re-parented to the nearest
surviving ancestor, ``last-prompt``/``summary`` leaf pointers follow).
``chunks`` streams the result: runs of untouched lines are slices of the
buffer, byte for byte (unparseable lines, a missing final newline and CRLF
endings included); only lines holding a changed record are re-serialised.
"""

from __future__ import annotations

import hashlib
import io
import sys
from pathlib import Path
from typing import Iterator

from txdb.model import chain as chainmod
from txdb.errors import SurgeryError
from txdb.model import deep
from txdb.model.lines import parse_line, read_lines
from txdb.model.paths import is_session_name, session_stem
from txdb.model.records import message_content
from txdb.model.regular import open_regular



def dumps(obj) -> bytes:
    """Compact JSON the way Claude Code writes it: no spaces, UTF-8, key order
    kept; at any depth a session line can hold (integers beyond 64 bits too)."""
    return deep.dumps(obj)


def _stored(obj) -> bytes:
    """``dumps`` for bytes kept in memory: orjson leaves its output buffer
    over-allocated (4 KB for a short line), so keep an exact-size copy."""
    out = dumps(obj)
    return bytes(memoryview(out))


def load_object(raw: bytes) -> dict:
    """The object of one record's bytes, parsed as the file was (``parse_line``)."""
    parsed = parse_line(raw)
    if not parsed.objects:
        raise SurgeryError(f"a record no longer parses: {parsed.error}")
    return parsed.objects[0][2]


def _s(v):
    return v if isinstance(v, str) else None


# ``Record.recorded`` not read yet (read: a count, or None for a record without usage).
UNREAD = -1


class Record:
    """One JSON object of the file: its place, its chain fields, its bytes."""

    __slots__ = ("rid", "line", "later", "offset", "length", "node", "chained", "model", "attachment_type",
                 "tokens", "thinking", "images", "recorded", "prompt", "facts", "pos", "new", "dirty", "removed",
                 "_buf", "_obj")

    def __init__(self, rid: int, line: int, offset: int, length: int, buf: bytes, later: bool = False):
        self.rid = rid  # index in Transcript.records
        self.line = line  # index in Transcript.lines
        self.later = later  # after the first object of its line: Claude Code never reads it (txdb/model/chain.py)
        self.offset = offset  # byte offset of the object in the loaded file (the catalog's key)
        self.length = length
        self._buf = buf
        self.new: bytes | None = None  # the object's bytes when they are not the buffer's (changed, recovered)
        self.dirty = False
        self.removed = False
        self._obj: dict | None = None
        self.node: chainmod.Node
        self.chained = False  # takes part in the chain (txdb.model.chain.node_from)
        self.model: str | None = None
        self.attachment_type: str | None = None
        self.tokens: int | None = None  # estimated context tokens, filled by ops.record_estimate
        self.thinking: int | None = None  # the part of them that is thinking, filled by ops.chain_thinking
        self.images: int | None = None  # the part that is images, filled by ops.chain_prefix_images
        self.recorded: int | None = UNREAD  # an assistant turn's recorded context (None: no usage), ops.recorded_context
        self.prompt: int | None = None  # a system-prompt attachment's cost, filled by ops.system_prompt_tokens
        self.facts: tuple | None = None  # what opens a message (records.message_facts), filled by ops.chain_opens
        self.pos: int | None = None  # position on the active chain

    def describe(self, obj: dict, names: dict[str, str] | None = None) -> None:
        """(Re)read the fields kept per record from its object. ``names``
        (uuid -> itself) lets a parent pointer share its parent's string."""
        node = chainmod.node_from(self.offset, obj)
        self.chained = node is not None and not self.later
        if node is None:
            rtype = obj.get("type")
            node = chainmod.Node(self.offset, None, _s(obj.get("parentUuid")),
                                 rtype if isinstance(rtype, str) else None, bool(obj.get("isSidechain")),
                                 _s(obj.get("leafUuid")))
        if node.type is not None:
            node.type = sys.intern(node.type)
        if names is not None:
            if node.uuid is not None:
                node.uuid = names.setdefault(node.uuid, node.uuid)
            if node.parent_uuid is not None:
                node.parent_uuid = names.get(node.parent_uuid, node.parent_uuid)
        self.node = node
        msg = obj.get("message")
        self.model = _s(msg.get("model")) if isinstance(msg, dict) else None
        att = obj.get("attachment")
        self.attachment_type = _s(att.get("type")) if node.type == "attachment" and isinstance(att, dict) else None
        self.tokens = self.thinking = self.images = self.prompt = self.facts = None
        self.recorded = UNREAD

    def clone(self) -> "Record":
        r = Record.__new__(Record)
        r.rid, r.line, r.later, r.offset, r.length, r._buf = (self.rid, self.line, self.later, self.offset,
                                                              self.length, self._buf)
        r.node, r.chained, r.model, r.attachment_type = self.node, self.chained, self.model, self.attachment_type
        r.tokens, r.thinking, r.images, r.recorded, r.prompt, r.facts, r.pos = (
            self.tokens, self.thinking, self.images, self.recorded, self.prompt, self.facts, self.pos)
        r.new, r.dirty, r.removed = self.new, self.dirty, self.removed
        r._obj = None
        return r

    @property
    def raw(self) -> bytes:
        """The object's bytes as they will be written."""
        if self.new is not None:
            return self.new
        return self._buf[self.offset:self.offset + self.length]

    @property
    def source(self) -> bytes:
        """The object's bytes as the loaded file holds them (a line the forgiving
        parse repaired included), whatever this pass made of it."""
        return self._buf[self.offset:self.offset + self.length]

    def same_bytes(self, other: "Record") -> bool:
        """Whether both records hold the same bytes (cheap when they share the buffer)."""
        if self.new is None and other.new is None and self._buf is other._buf and self.offset == other.offset:
            return self.length == other.length
        return self.raw == other.raw

    def parse(self) -> dict:
        """A fresh dict of the record (nothing is kept; pass it to ``touch`` after changing it)."""
        if self._obj is not None:
            return self._obj
        return load_object(self.raw)

    @property
    def obj(self) -> dict:
        """The parsed object, kept on the record until ``touch`` stores it: for
        one-off edits (``rec.obj[...] = ...; t.touch(rec)``). Walks over many
        records use ``parse``, which keeps nothing."""
        if self._obj is None:
            self._obj = load_object(self.raw)
        return self._obj

    @property
    def type(self) -> str | None:
        return self.node.type

    @property
    def uuid(self) -> str | None:
        return self.node.uuid

    @property
    def parent_uuid(self) -> str | None:
        return self.node.parent_uuid

    @property
    def leaf_uuid(self) -> str | None:
        return self.node.leaf_uuid

    @property
    def content(self):
        return message_content(self.parse())


class Line:
    """One line of the file: where it lies and which records it holds."""

    __slots__ = ("number", "offset", "size", "end", "first", "count", "error", "recovered", "_buf")

    def __init__(self, number: int, offset: int, size: int, length: int, first: int, buf: bytes):
        self.number = number  # 1-based
        self.offset = offset
        self.size = size  # bytes without the line ending
        self.end = length - size  # bytes of the line ending
        self.first = first  # index of its first record in Transcript.records
        self.count = 0  # how many records it holds
        self.error: str | None = None
        self.recovered = False  # parsed only by the forgiving path: written re-serialised when changed
        self._buf = buf

    @property
    def records(self) -> range:
        return range(self.first, self.first + self.count)

    @property
    def raw(self) -> bytes:
        return self._buf[self.offset:self.offset + self.size]

    @property
    def ending(self) -> bytes:
        """The line ending: newline, CR LF, or nothing (a final line without one)."""
        start = self.offset + self.size
        return self._buf[start:start + self.end]


class Transcript:
    """One session file. Build with ``load`` or ``from_bytes``; ``copy`` shares the bytes."""

    base: str = "original"      # what its chain positions are: "original", "pending copy" or "fork" (the engine says)
    keeps_dropped_thinking: bool = False  # the engine leaves the thinking an edit makes the API drop (it says)
    # The factor the newest surgery priced this file at, while it is what that
    # surgery wrote (the engine reads it from the swap journal): how it is priced.
    logged_factor: float | None = None
    fork_of: str | None = None  # a fork: the session id it was copied from
    fork_stamp: dict | None = None  # a fork: the strippedBy stamp its records carry

    def __init__(self, data: bytes, path: str | Path | None = None, measure=None):
        """``measure(rec, obj)``, when given, is called with each chained
        record's object as the load parses it (a surgery pass sizes the
        chain from it instead of parsing each record again)."""
        self.path = Path(path) if path is not None else None
        self.data = data
        self.size = len(data)
        self.lines: list[Line] = []
        self.records: list[Record] = []
        self._rid_at: dict[int, int] = {}  # offset -> index in records (shared by copies)
        names: dict[str, str] = {}
        for ln in read_lines(io.BytesIO(data), every_byte=True):
            body = ln.raw
            line = Line(ln.number, ln.offset, len(body), ln.length, len(self.records), data)
            li = len(self.lines)
            self.lines.append(line)
            if body.strip():
                parsed = parse_line(body)
                line.error = parsed.error
                line.recovered = parsed.recovered
                for start, length, obj in parsed.objects:
                    rec = Record(len(self.records), li, ln.offset + start, length, data, later=line.count > 0)
                    if parsed.recovered:
                        rec.new = _stored(obj)  # what the forgiving parse made of it
                    rec.describe(obj, names)
                    if measure is not None and rec.chained:
                        measure(rec, obj)
                    line.count += 1
                    self._rid_at[rec.offset] = rec.rid
                    self.records.append(rec)
            elif body:
                line.error = "blank line"
        self._reindex()

    # -- loading -----------------------------------------------------------
    @classmethod
    def load(cls, path: str | Path, measure=None) -> "Transcript":
        with open_regular(path) as fh:
            return cls(fh.read(), path, measure)

    @classmethod
    def from_bytes(cls, data: bytes, path: str | Path | None = None, measure=None) -> "Transcript":
        return cls(data, path, measure)

    def copy(self, path: str | Path | None = None) -> "Transcript":
        """Another transcript of the same bytes (nothing parsed again)."""
        t = Transcript.__new__(Transcript)
        t.path = Path(path) if path is not None else self.path
        t.data = self.data
        t.size = self.size
        t.lines = self.lines  # never changed after loading
        t.records = [r.clone() for r in self.records]
        t._rid_at = self._rid_at
        t._reindex()
        return t

    # -- the chain ---------------------------------------------------------
    def _reindex(self) -> None:
        """(Re)compute uuid index, leaf and chain positions."""
        self._stale = False
        live = [r for r in self.records if not r.removed]
        nodes = [r.node for r in live if r.chained]
        self.nodes = nodes
        at = self.record_at
        by = chainmod.index(nodes)
        self.by_uuid: dict[str, Record] = {u: at(nd.offset) for u, nd in by.items()}
        leaf = chainmod.find_leaf(nodes, by, chainmod.relinks(nodes, by))
        self.leaf: Record | None = at(leaf.offset) if leaf is not None else None
        self.chain: list[Record] = [at(nd.offset) for nd in chainmod.active_chain(nodes)]
        for r in self.records:
            r.pos = None
        for i, r in enumerate(self.chain):
            r.pos = i
        seen: set[str] = set()
        self.repeated: set[str] = set()  # uuids on more than one live record
        for r in live:
            u = r.node.uuid
            if u:
                (self.repeated if u in seen else seen).add(u)

    def refresh(self) -> None:
        """Recompute the chain after operations changed parents or removed records."""
        if self._stale:
            self._reindex()

    def live(self):
        return (r for r in self.records if not r.removed)

    def record_at(self, offset: int) -> Record | None:
        """The record the catalog keys by (file, offset), in the loaded file."""
        rid = self._rid_at.get(offset)
        if rid is None or self.records[rid].removed:
            return None
        return self.records[rid]

    def position(self, rec: Record) -> int | None:
        return rec.pos

    def in_range(self, rec: Record, positions: tuple[int | None, int | None] | None) -> bool:
        """True when no range is given, or ``rec`` sits on the active chain inside it."""
        if positions is None or positions == (None, None):
            return True
        pos = rec.pos
        if pos is None:
            return False
        lo, hi = positions
        return (lo is None or pos >= lo) and (hi is None or pos <= hi)

    @property
    def session_id(self) -> str | None:
        for r in self.live():
            sid = r.parse().get("sessionId")
            if isinstance(sid, str) and sid:
                return sid
        if self.path is not None and is_session_name(self.path.name):
            return session_stem(self.path)
        return None

    # -- mutation ----------------------------------------------------------
    def touch(self, rec: Record, obj: dict | None = None) -> None:
        """``rec`` now holds ``obj`` (default: the one ``rec.obj`` handed out):
        stored as compact JSON, its line re-serialised on write."""
        if obj is None:
            obj = rec._obj
        if obj is None:
            raise ValueError("touch() needs the changed object")
        rec.new = _stored(obj)
        rec._obj = None
        rec.dirty = True
        node = rec.node
        rec.describe(obj)
        if rec.node != node:
            self._stale = True  # its chain fields changed: refresh() recomputes the chain

    def removable(self, rec: Record) -> bool:
        """A record may go when it is not the leaf and its uuid is unique in the file
        (removing one copy of a repeated uuid would silently re-point its children)."""
        if rec.removed:
            return False
        if self.leaf is not None and rec is self.leaf:
            return False
        if rec.uuid and rec.uuid in self.repeated:
            return False
        return True

    def remove(self, recs, *, pairs_checked: bool = False) -> int:
        """Remove records, re-parenting children and leaf pointers to the nearest
        surviving ancestor. Refuses the leaf and records carrying tool blocks
        whose partner (any block of the same id) would stay behind, unless the
        caller checked the pairs itself (``pairs_checked``: compact-range pairs
        calls and results by chain position, so a tool id repeated by a resume
        is not a partner). Returns how many were removed."""
        recs = [r for r in recs if not r.removed]
        for r in recs:
            if not self.removable(r):
                raise SurgeryError(f"refusing to remove the record at offset {r.offset} (leaf or repeated uuid)")
        if not pairs_checked:
            _check_tool_partners(self, recs)
        gone: dict[str, str | None] = {}
        for r in recs:
            if r.uuid:
                gone[r.uuid] = r.parent_uuid
            r.removed = True

        found: dict[str | None, str | None] = {}  # removed uuid -> its survivor, once each

        def survivor(u: str | None) -> str | None:
            path = []
            seen = set()
            while u in gone and u not in seen and u not in found:
                seen.add(u)
                path.append(u)
                u = gone[u]
            if u in seen:
                return u  # a loop of removed records: nothing survives it (not cached)
            if u in found:
                u = found[u]
            for v in path:
                found[v] = u
            return u

        for r in self.records:
            if r.removed:
                continue
            p = r.parent_uuid
            lf = r.leaf_uuid if r.type in ("last-prompt", "summary") else None
            if p not in gone and lf not in gone:
                continue
            o = r.parse()
            if p in gone:
                o["parentUuid"] = survivor(p)
            if lf in gone:
                new = survivor(lf)
                if new is None:
                    # Nothing left above it: point at the leaf.
                    new = self.leaf.uuid if self.leaf is not None else None
                o["leafUuid"] = new
            self.touch(r, o)
        self._reindex()
        return len(recs)

    def rebuild(self, objs: list[dict]) -> None:
        """Make this transcript these records, written anew (a new file such as
        compact's): attributes set on it (``fork_of``) stay."""
        fresh = Transcript(b"".join(dumps(o) + b"\n" for o in objs), self.path)
        extra = {k: v for k, v in self.__dict__.items() if k not in fresh.__dict__}
        self.__dict__.clear()
        self.__dict__.update(fresh.__dict__, **extra)

    # -- writing -----------------------------------------------------------
    def changed_lines(self) -> int:
        recs = self.records
        return sum(1 for ln in self.lines if any(recs[i].dirty or recs[i].removed for i in ln.records))

    def chunks(self) -> Iterator[bytes | memoryview]:
        """The file as it is now, in pieces: runs of untouched lines are views
        of the loaded bytes; a changed line is its records' compact JSON, then
        its line ending."""
        view = memoryview(self.data)
        recs = self.records
        last = len(self.lines) - 1
        run = None  # start of the current run of untouched lines
        for li, ln in enumerate(self.lines):
            if not any(recs[i].dirty or recs[i].removed for i in ln.records):
                if run is None:
                    run = ln.offset
                continue
            if run is not None:
                yield view[run:ln.offset]
                run = None
            parts = [r.raw for r in (recs[i] for i in ln.records) if not r.removed]
            if not parts:
                continue  # every object of the line removed: the line goes
            # Objects glued on one line come apart as separate lines.
            for part in parts[:-1]:
                yield part
                yield b"\n"
            yield parts[-1]
            yield ln.ending or (b"\n" if li != last else b"")
        if run is not None:
            yield view[run:]

    def to_bytes(self) -> bytes:
        return b"".join(self.chunks())

    def byte_size(self) -> int:
        return sum(len(c) for c in self.chunks())

    def digest(self) -> str:
        """sha256 of the bytes ``chunks`` would write, without joining them."""
        h = hashlib.sha256()
        for c in self.chunks():
            h.update(c)
        return h.hexdigest()


def _hashable(v) -> bool:
    return isinstance(v, (str, int, float, bool))


def _check_tool_partners(t: Transcript, recs: list[Record]) -> None:
    """Refuse to remove records whose tool_use/tool_result partner stays behind."""
    owner: dict[str, Record] = {}
    for rec in recs:
        content = rec.content
        if not isinstance(content, list):
            continue
        for b in content:
            if isinstance(b, dict) and b.get("type") in ("tool_use", "tool_result"):
                tid = b.get("id") or b.get("tool_use_id")
                if tid is not None and _hashable(tid):
                    owner.setdefault(tid, rec)
    if not owner:
        return
    removing = {r.rid for r in recs}
    for r in t.records:
        if r.removed or r.rid in removing:
            continue
        c = r.content
        if isinstance(c, list):
            for b in c:
                if not isinstance(b, dict):
                    continue
                tid = next((v for v in (b.get("id"), b.get("tool_use_id")) if _hashable(v) and v in owner), None)
                if tid is not None:
                    raise SurgeryError(
                        f"refusing to remove the record at offset {owner[tid].offset}: it would separate tool pair "
                        f"{b.get('id') or b.get('tool_use_id')}"
                    )
