"""A session file held losslessly in memory, and written back minimally.

Every line keeps its raw bytes (unparseable lines, a missing final newline
and CRLF endings included). Lines that parse carry their objects as
``Record``s, keyed like the catalog's ``records`` table by the byte offset
of the object in the loaded file. The chain (uuid -> record, children, the
leaf, positions 0..N root -> leaf) comes from ``txdb.chain``, so chain
positions here mean what the catalog's ``active_chain`` view means.

Operations change records through ``touch`` (the object was edited in
place) and ``remove`` (the record goes; its children are re-parented to the
nearest surviving ancestor, ``last-prompt``/``summary`` leaf pointers
follow). ``to_bytes`` re-serialises only the lines holding a changed record,
as compact JSON like Claude Code's own; every other line is copied byte for
byte.
"""

from __future__ import annotations

import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from .. import chain as chainmod
from ..durability import fsync_dir
from ..errors import SurgeryError
from ..ingest import deep
from ..ingest.lines import parse_line
from ..records import message_content

FILE_MODE = 0o600

# Line types bound to the original session, never copied to a fork (as
# Claude Code's own --fork-session).
SESSION_BOUND_TYPES = frozenset(
    {"bridge-session", "continued-in", "cost-state", "api-request", "api-request-blob", "api-request-shape"}
)


def dumps(obj) -> bytes:
    """Compact JSON the way Claude Code writes it: no spaces, UTF-8, key order
    kept; at any depth a session line can hold (integers beyond 64 bits too)."""
    return deep.dumps(obj)


# Any "</" before a letter may start a closing tag (a payload could end with
# "</local-command-stdout" and the next write supply ">"): escape them all.
_CLOSE_TAG_RE = re.compile(r"<(\\*)/(?=[A-Za-z])")
_UNESCAPE_RE = re.compile(r"<(\\+)/(?=[A-Za-z])")
_ANSI_RE = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])")


def escape_markup(text: str) -> str:
    """Bijective escape of closing tags in a payload txdb wraps in markup:
    ``</tag>`` -> ``<\\/tag>``, ``<\\/tag>`` -> ``<\\\\/tag>``, ..."""
    return _CLOSE_TAG_RE.sub(lambda m: "<" + m.group(1) + "\\/", text)


def unescape_markup(text: str) -> str:
    return _UNESCAPE_RE.sub(lambda m: "<" + m.group(1)[1:] + "/", text)


def strip_ansi(text: str) -> str:
    return _ANSI_RE.sub("", text)


@dataclass
class Record:
    rid: int  # index in Transcript.records
    line: int  # index in Transcript.lines
    offset: int  # byte offset of the object in the loaded file (the catalog's key)
    obj: dict
    raw: bytes  # the object's own bytes
    dirty: bool = False
    removed: bool = False

    @property
    def type(self):
        return self.obj.get("type")

    @property
    def uuid(self) -> str | None:
        u = self.obj.get("uuid")
        return u if isinstance(u, str) else None

    @property
    def parent_uuid(self) -> str | None:
        p = self.obj.get("parentUuid")
        return p if isinstance(p, str) else None

    @property
    def content(self):
        return message_content(self.obj)

    @property
    def model(self) -> str | None:
        msg = self.obj.get("message")
        if isinstance(msg, dict) and isinstance(msg.get("model"), str):
            return msg["model"]
        return None


@dataclass
class Line:
    number: int  # 1-based
    offset: int
    raw: bytes  # without the line ending
    ending: bytes  # b"\n", b"\r\n" or b"" (a final line without newline)
    records: list[int] = field(default_factory=list)
    error: str | None = None
    recovered: bool = False


class Transcript:
    """One session file in memory. Build with ``load`` or ``from_bytes``."""

    def __init__(self, data: bytes, path: str | Path | None = None):
        self.path = Path(path) if path is not None else None
        self.size = len(data)
        self.lines: list[Line] = []
        self.records: list[Record] = []
        self.inserted: dict[int, list[dict]] = {}  # line index -> objects written after it
        self.appended: list[dict] = []
        pos = 0
        number = 1
        n = len(data)
        while pos < n:
            nl = data.find(b"\n", pos)
            if nl < 0:
                body, ending, nxt = data[pos:], b"", n
            else:
                body, ending, nxt = data[pos:nl], b"\n", nl + 1
            if body.endswith(b"\r"):
                body, ending = body[:-1], b"\r" + ending
            line = Line(number, pos, body, ending)
            li = len(self.lines)
            self.lines.append(line)
            if body.strip():
                parsed = parse_line(body)
                line.error = parsed.error
                line.recovered = parsed.recovered
                for start, length, obj in parsed.objects:
                    rec = Record(len(self.records), li, pos + start, obj, body[start:start + length])
                    line.records.append(rec.rid)
                    self.records.append(rec)
            elif body:
                line.error = "blank line"
            pos = nxt
            number += 1
        self._reindex()

    # -- loading -----------------------------------------------------------
    @classmethod
    def load(cls, path: str | Path) -> "Transcript":
        with open(path, "rb") as fh:
            return cls(fh.read(), path)

    @classmethod
    def from_bytes(cls, data: bytes, path: str | Path | None = None) -> "Transcript":
        return cls(data, path)

    # -- the chain ---------------------------------------------------------
    def _reindex(self) -> None:
        """(Re)compute uuid index, children, leaf and chain positions."""
        nodes: list[chainmod.Node] = []
        self._rec_at: dict[int, Record] = {}
        for r in self.records:
            if r.removed:
                continue
            self._rec_at[r.offset] = r
            o = r.obj
            node = chainmod.node_from(r.offset, o)
            if node is not None:
                nodes.append(node)
        self.nodes = nodes
        by = chainmod.index(nodes)
        self.by_uuid: dict[str, Record] = {u: self._rec_at[nd.offset] for u, nd in by.items()}
        leaf = chainmod.find_leaf(nodes, by, chainmod.relinks(nodes, by))
        self.leaf: Record | None = self._rec_at[leaf.offset] if leaf is not None else None
        self.chain: list[Record] = [self._rec_at[nd.offset] for nd in chainmod.active_chain(nodes)]
        self.pos_of: dict[int, int] = {r.rid: i for i, r in enumerate(self.chain)}
        self.children: dict[str, list[Record]] = {}
        self.uuid_count: dict[str, int] = {}
        for r in self.records:
            if r.removed:
                continue
            if r.parent_uuid:
                self.children.setdefault(r.parent_uuid, []).append(r)
            if r.uuid:
                self.uuid_count[r.uuid] = self.uuid_count.get(r.uuid, 0) + 1

    def refresh(self) -> None:
        """Recompute the chain after operations changed parents or removed records."""
        self._reindex()

    def live(self):
        return (r for r in self.records if not r.removed)

    def record_at(self, offset: int) -> Record | None:
        """The record the catalog keys by (file, offset), in the loaded file."""
        return self._rec_at.get(offset)

    def position(self, rec: Record) -> int | None:
        return self.pos_of.get(rec.rid)

    def in_range(self, rec: Record, positions: tuple[int | None, int | None] | None) -> bool:
        """True when no range is given, or ``rec`` sits on the active chain inside it."""
        if positions is None or positions == (None, None):
            return True
        pos = self.pos_of.get(rec.rid)
        if pos is None:
            return False
        lo, hi = positions
        return (lo is None or pos >= lo) and (hi is None or pos <= hi)

    @property
    def session_id(self) -> str | None:
        for r in self.records:
            sid = r.obj.get("sessionId")
            if isinstance(sid, str) and sid:
                return sid
        if self.path is not None and self.path.name.endswith(".jsonl"):
            return self.path.name[: -len(".jsonl")]
        return None

    # -- mutation ----------------------------------------------------------
    def touch(self, rec: Record) -> None:
        """Mark ``rec`` as edited: its line is re-serialised on write."""
        rec.dirty = True

    def removable(self, rec: Record) -> bool:
        """A record may go when it is not the leaf and its uuid is unique in the file
        (removing one copy of a repeated uuid would silently re-point its children)."""
        if rec.removed:
            return False
        if self.leaf is not None and rec is self.leaf:
            return False
        if rec.uuid and self.uuid_count.get(rec.uuid, 0) > 1:
            return False
        return True

    def remove(self, recs) -> int:
        """Remove records, re-parenting children and leaf pointers to the nearest
        surviving ancestor. Refuses the leaf and records carrying tool blocks
        whose partner would stay behind. Returns how many were removed."""
        recs = [r for r in recs if not r.removed]
        removing = {x.rid for x in recs}
        for r in recs:
            if not self.removable(r):
                raise SurgeryError(f"refusing to remove the record at offset {r.offset} (leaf or repeated uuid)")
            _check_tool_partner(self, r, removing)
        gone: dict[str, str | None] = {}
        for r in recs:
            if r.uuid:
                gone[r.uuid] = r.parent_uuid
            r.removed = True

        def survivor(u: str | None) -> str | None:
            seen = set()
            while u in gone and u not in seen:
                seen.add(u)
                u = gone[u]
            return u

        for r in self.records:
            if r.removed:
                continue
            o = r.obj
            p = o.get("parentUuid")
            if isinstance(p, str) and p in gone:
                o["parentUuid"] = survivor(p)
                r.dirty = True
            if o.get("type") in ("last-prompt", "summary"):
                lf = o.get("leafUuid")
                if isinstance(lf, str) and lf in gone:
                    new = survivor(lf)
                    if new is None:
                        # Nothing left above it: point at the leaf.
                        new = self.leaf.uuid if self.leaf is not None else None
                    o["leafUuid"] = new
                    r.dirty = True
        self._reindex()
        return len(recs)

    def append(self, obj: dict) -> None:
        """Add a new line at the end of the file."""
        self.appended.append(obj)

    # -- writing -----------------------------------------------------------
    def changed_lines(self) -> int:
        return sum(1 for ln in self.lines if any(self.records[i].dirty or self.records[i].removed for i in ln.records))

    def to_bytes(self) -> bytes:
        out: list[bytes] = []
        last = len(self.lines) - 1
        for li, ln in enumerate(self.lines):
            recs = [self.records[i] for i in ln.records]
            if not any(r.dirty or r.removed for r in recs):
                out.append(ln.raw + ln.ending)
                continue
            parts = [r.raw if not r.dirty and not ln.recovered else dumps(r.obj) for r in recs if not r.removed]
            if not parts:
                continue  # every object of the line removed: the line goes
            ending = ln.ending or (b"\n" if li != last or self.appended else b"")
            # Objects glued on one line come apart as separate lines.
            out.append(b"\n".join(parts) + ending)
        if self.appended:
            if out and not out[-1].endswith(b"\n"):
                out[-1] += b"\n"
            for obj in self.appended:
                out.append(dumps(obj) + b"\n")
        return b"".join(out)

    def write(self, path: str | Path) -> None:
        write_atomic(path, self.to_bytes())


def _check_tool_partner(t: Transcript, rec: Record, removing: set[int]) -> None:
    content = rec.content
    if not isinstance(content, list):
        return
    ids = {b.get("id") or b.get("tool_use_id") for b in content
           if isinstance(b, dict) and b.get("type") in ("tool_use", "tool_result")}
    ids.discard(None)
    if not ids:
        return
    for r in t.records:
        if r.removed or r.rid == rec.rid or r.rid in removing:
            continue
        c = r.content
        if isinstance(c, list):
            for b in c:
                if isinstance(b, dict) and (b.get("id") in ids or b.get("tool_use_id") in ids):
                    raise SurgeryError(
                        f"refusing to remove the record at offset {rec.offset}: it would separate tool pair "
                        f"{b.get('id') or b.get('tool_use_id')}"
                    )


TEMP_SUFFIX = ".txdb-tmp"
# ".<target name>.<writer pid>.<random>.txdb-tmp": the pid says whether the writer still runs.
_TEMP_RE = re.compile(r"^\..+\.(\d+)\.[A-Za-z0-9_]+" + re.escape(TEMP_SUFFIX) + "$")


def owner_of(st: os.stat_result) -> tuple[int, int] | None:
    """(uid, gid) to give files written for this one: only root can (and must)
    hand them back to the session's owner; anyone else writes as themselves."""
    return (st.st_uid, st.st_gid) if os.geteuid() == 0 else None


def write_atomic(path: str | Path, data: bytes, mode: int = FILE_MODE,
                 before_replace=None, owner: tuple[int, int] | None = None) -> None:
    """Write ``data`` to ``path`` whole or not at all: temp file in the same
    folder, fsync, one rename, fsync of the folder. Mode 0600 unless given;
    ``owner`` (uid, gid) is set on the temp file before the rename.
    ``before_replace`` runs between the fsync and the rename; an exception
    it raises leaves ``path`` as it was and no temp file behind."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.{os.getpid()}.", suffix=TEMP_SUFFIX, dir=str(path.parent))
    try:
        if owner is not None:
            os.fchown(fd, *owner)
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        if before_replace is not None:
            before_replace()
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    fsync_dir(path.parent)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # exists, owned by someone else
    return True


def clean_stale_temps(folder: str | Path) -> list[str]:
    """Remove temp files an earlier txdb run left in ``folder`` when it was
    killed mid-write: only names of ``write_atomic``'s own pattern whose
    writer process is gone. Returns the names removed."""
    removed = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return removed
    for e in entries:
        m = _TEMP_RE.match(e.name)
        if m is None or not e.is_file(follow_symlinks=False):
            continue
        pid = int(m.group(1))
        if pid == os.getpid() or _pid_alive(pid):
            continue
        try:
            os.unlink(e.path)
            removed.append(e.name)
        except OSError:
            pass
    return removed
