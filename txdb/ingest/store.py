"""Refresh the catalog from session files, incrementally.

For each file: unchanged (same size, mtime and inode) is skipped; grown
(same inode, the bytes before the cursor unchanged) is read from its cursor;
anything else is re-ingested from scratch. Each file's rows and its cursor
commit in one transaction, so an interrupted run leaves a catalog the next
refresh completes. A file that vanished keeps its rows, marked gone, until
``prune``.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import orjson

from .. import chain as chainmod
from ..db import transaction
from ..policy import attachment_cost, policy_class
from ..records import JOURNAL_TYPES, block_rows, message_content, record_kind
from .discover import Found, classify, discover
from .lines import READ_BUFFER, parse_line, read_lines

# One row per API message. Older CLIs wrote one line per content block with
# output_tokens growing line by line: the line with the largest total wins
# (as ccusage counts), and the row keeps the offset of the first line.
_TOTAL = ("coalesce({t}.input_tokens, 0) + coalesce({t}.output_tokens, 0) + "
          "coalesce({t}.cache_read_input_tokens, 0) + coalesce({t}.cache_creation_input_tokens, 0)")
USAGE_UPSERT = (
    "INSERT INTO usage VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?) "
    "ON CONFLICT (file_id, message_id) DO UPDATE SET "
    + ", ".join(f"{c} = excluded.{c}" for c in (
        "input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens",
        "ephemeral_5m_input_tokens", "ephemeral_1h_input_tokens", "iterations"))
    + " WHERE " + _TOTAL.format(t="excluded") + " > " + _TOTAL.format(t="usage")
)

HEAD_BYTES = 4096
TAIL_BYTES = 256
BATCH = 2000
REFRESH_CHECKPOINT_PAGES = 10000  # ~40 MB of WAL between checkpoints

BLOCKS_INSERT = "INSERT INTO blocks VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)"
BLOCKS_REPLACE = "INSERT OR REPLACE INTO blocks VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)"

TITLE_RANK = {"custom-title": 4, "agent-name": 3, "summary": 2, "ai-title": 1}
TITLE_KEY = {
    "custom-title": "customTitle",
    "agent-name": "agentName",
    "summary": "summary",
    "ai-title": "aiTitle",
}


@dataclass
class RefreshStats:
    new: int = 0
    grown: int = 0
    rewritten: int = 0
    unchanged: int = 0
    gone: int = 0
    pruned: int = 0
    lines: int = 0
    bytes: int = 0
    parse_errors: int = 0
    seconds: float = 0.0
    files: int = 0
    roots_missing: list[str] = field(default_factory=list)

    @property
    def mb_per_s(self) -> float:
        return (self.bytes / 1e6) / self.seconds if self.seconds > 0 else 0.0

    def summary(self) -> str:
        return (
            f"{self.new} new, {self.grown} grown, {self.rewritten} rewritten, "
            f"{self.unchanged} unchanged, {self.gone} gone"
            + (f", {self.pruned} pruned" if self.pruned else "")
            + f"; {self.lines:,} lines"
            + (f" ({self.parse_errors} unparseable)" if self.parse_errors else "")
            + f", {self.bytes / 1e6:.1f} MB in {self.seconds:.2f}s"
            + f" ({self.mb_per_s:.1f} MB/s)"
        )


def _sha_at(fh, start: int, length: int) -> str:
    fh.seek(start)
    return hashlib.sha256(fh.read(length)).hexdigest()


def _head_tail(fh, cursor: int) -> tuple[str, str]:
    head = _sha_at(fh, 0, min(cursor, HEAD_BYTES))
    tail_start = max(0, cursor - TAIL_BYTES)
    tail = _sha_at(fh, tail_start, cursor - tail_start)
    return head, tail


def _int(v):
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _str(v):
    return v if isinstance(v, str) else None


class FileIngest:
    """Turn the lines of one file into rows, written in batches."""

    def __init__(self, conn: sqlite3.Connection, file_id: int, found_kind: str,
                 layout_parent: str | None, path: str, fresh: bool = False):
        self.conn = conn
        self.fresh = fresh  # the file has no rows yet (new, or rewritten and deleted)
        self.file_id = file_id
        self.kind = found_kind
        self.layout_parent = layout_parent
        self.path = path
        self.records: list[tuple] = []
        self.blocks: list[tuple] = []
        self.attachments: list[tuple] = []
        self.usage: list[tuple] = []
        self.errors: list[tuple] = []
        self.nodes: list[chainmod.Node] = []
        self.local_tools: dict[str, str] = {}  # tool_uses of the lines read now
        self.unnamed_results = 0  # tool_results whose tool_use came earlier (named in SQL)
        self.seen_uuids: set[str] = set()
        self.parent_candidates: list[tuple[int, str]] = []  # parent not seen before the child
        self.lines = 0
        self.record_bytes = 0
        self.journal_bytes = 0
        self.error_count = 0
        self.meta: dict = {}
        self.titles: dict[str, str] = {}  # source -> value seen in these lines
        self.messages = 0
        self.first_ts = None
        self.last_ts = None

    def add_line(self, line) -> None:
        self.lines += 1
        parsed = parse_line(line.raw)
        if parsed.error:
            self.error_count += 0 if parsed.objects else 1
            self.errors.append(
                (self.file_id, line.number, line.offset, line.length, parsed.error,
                 1 if parsed.objects else 0)
            )
        for start, length, obj in parsed.objects:
            raw = line.raw[start:start + length]
            self.add_object(line.number, line.offset + start, length, obj, raw)
        if len(self.records) >= BATCH:
            self.flush()

    def add_object(self, number: int, offset: int, length: int, obj: dict, raw: bytes) -> None:
        rtype, subtype = record_kind(obj)
        fid = self.file_id
        self.record_bytes += length
        if rtype in JOURNAL_TYPES:
            self.journal_bytes += length
        uuid = _str(obj.get("uuid"))
        parent = _str(obj.get("parentUuid"))
        ts = _str(obj.get("timestamp"))
        session_id = _str(obj.get("sessionId")) or _str(obj.get("session_id"))
        msg = obj.get("message") if isinstance(obj.get("message"), dict) else None
        role = _str(msg.get("role")) if msg else None
        model = _str(msg.get("model")) if msg else None
        message_id = _str(msg.get("id")) if msg else None
        is_sidechain = 1 if obj.get("isSidechain") else 0
        tokens = 0

        content = message_content(obj)
        if content is not None:
            for b in block_rows(content, role):
                kind = b["kind"]
                tool_name = b.get("tool_name")
                tuid = b.get("tool_use_id")
                if kind == "tool_use" and tuid:
                    self.local_tools[tuid] = tool_name
                elif kind == "tool_result":
                    tool_name = self.local_tools.get(tuid)
                    if tool_name is None and tuid:
                        self.unnamed_results += 1
                tokens += b.get("tokens", 0)
                self.blocks.append((
                    fid, offset, b["idx"], session_id, role or rtype, b.get("type"), kind,
                    tool_name, tuid, b.get("is_error"), b.get("chars", 0),
                    b.get("signature_chars", 0), b.get("media_type"), b.get("width"),
                    b.get("height"), b.get("image_sha256"), b.get("images", 0),
                    b.get("tokens", 0), b.get("text"),
                ))
        elif rtype == "attachment":
            att = obj.get("attachment") if isinstance(obj.get("attachment"), dict) else {}
            cost, from_rendered, free = attachment_cost(obj)
            pclass = policy_class(subtype)
            # The system prompt is counted once per session, not per line.
            tokens = 0 if pclass == "system-prompt" else cost
            self.attachments.append((
                fid, offset, session_id, subtype, ts, pclass, cost, 1 if from_rendered else 0,
                1 if free else 0, _str(att.get("hookEvent")),
            ))

        if rtype == "assistant" and msg and isinstance(msg.get("usage"), dict):
            u = msg["usage"]
            cc = u.get("cache_creation") if isinstance(u.get("cache_creation"), dict) else {}
            iterations = u.get("iterations")
            self.usage.append((
                fid, message_id or f"uuid:{uuid or offset}", offset, _str(obj.get("requestId")),
                session_id, ts, model, _int(u.get("input_tokens")), _int(u.get("output_tokens")),
                _int(u.get("cache_read_input_tokens")), _int(u.get("cache_creation_input_tokens")),
                _int(cc.get("ephemeral_5m_input_tokens")), _int(cc.get("ephemeral_1h_input_tokens")),
                _str(u.get("service_tier")),
                orjson.dumps(iterations).decode() if isinstance(iterations, list) else None,
            ))

        leaf_uuid = _str(obj.get("leafUuid"))
        logical = _str(obj.get("logicalParentUuid"))
        is_meta = 1 if obj.get("isMeta") else None
        try:
            raw_text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raw_text = raw.decode("utf-8", "replace")
        self.records.append((
            fid, offset, length, number, session_id, rtype, subtype, uuid, parent, logical,
            leaf_uuid, ts, is_sidechain, is_meta, role, model, message_id,
            _str(obj.get("requestId")), tokens, raw_text,
        ))
        node = chainmod.node_from(offset, obj)
        if node is not None:
            self.nodes.append(node)
            if uuid:
                if parent and parent not in self.seen_uuids:
                    self.parent_candidates.append((offset, parent))
                self.seen_uuids.add(uuid)
        self._meta(obj, rtype, ts, session_id, model)

    def _meta(self, obj, rtype, ts, session_id, model) -> None:
        m = self.meta
        if session_id and "session_id" not in m:
            m["session_id"] = session_id
        if rtype in ("user", "assistant"):
            self.messages += 1
            for key, col in (("cwd", "cwd"), ("gitBranch", "git_branch"), ("version", "version")):
                v = obj.get(key)
                if isinstance(v, str) and v and col not in m:
                    m[col] = v
            if rtype == "assistant" and model and model != "<synthetic>" and "model" not in m:
                m["model"] = model
            if "agent_id" not in m and isinstance(obj.get("agentId"), str):
                m["agent_id"] = obj["agentId"]
        if ts:
            if self.first_ts is None or ts < self.first_ts:
                self.first_ts = ts
            if self.last_ts is None or ts > self.last_ts:
                self.last_ts = ts
        if rtype in TITLE_KEY:
            v = obj.get(TITLE_KEY[rtype])
            if isinstance(v, str) and v.strip():
                if rtype == "summary":
                    self.titles.setdefault(rtype, v)  # the first summary
                else:
                    self.titles[rtype] = v  # the last one wins

    def flush(self) -> None:
        """Write the rows gathered so far (inside the file's transaction)."""
        if not (self.records or self.errors):
            return
        batch = (self.records, self.blocks, self.attachments, self.usage, self.errors, self.fresh)
        self.records, self.blocks, self.attachments, self.usage, self.errors = [], [], [], [], []
        _write_rows(self.conn, *batch)


def _write_rows(c: sqlite3.Connection, records, blocks, attachments, usage, errors, fresh) -> None:
    if records:
        c.executemany(
            "INSERT OR REPLACE INTO records VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", records
        )
    if blocks:
        # A fresh file's blocks cannot conflict: plain INSERT. Under OR
        # REPLACE, the full-text index's insert trigger inherits REPLACE
        # and FTS5 first deletes the rowid, re-tokenizing the text: a
        # 4-6x slower insert. A conflict anyway falls back to REPLACE.
        try:
            c.executemany(BLOCKS_INSERT if fresh else BLOCKS_REPLACE, blocks)
        except sqlite3.IntegrityError:
            c.executemany(BLOCKS_REPLACE, blocks)
    if attachments:
        c.executemany("INSERT OR REPLACE INTO attachments VALUES (?,?,?,?,?,?,?,?,?,?)", attachments)
    if usage:
        c.executemany(USAGE_UPSERT, usage)
    if errors:
        c.executemany("INSERT OR REPLACE INTO parse_errors VALUES (?,?,?,?,?,?)", errors)


def _name_tool_results(c: sqlite3.Connection, file_id: int) -> None:
    """Name tool_results whose tool_use was ingested in an earlier pass."""
    c.execute(
        "UPDATE blocks SET tool_name = (SELECT u.tool_name FROM blocks u WHERE u.file_id = blocks.file_id "
        "AND u.tool_use_id = blocks.tool_use_id AND u.kind = 'tool_use' LIMIT 1) "
        "WHERE file_id = ? AND kind = 'tool_result' AND tool_name IS NULL AND tool_use_id IS NOT NULL",
        (file_id,),
    )


def _update_dangling(c: sqlite3.Connection, ing: "FileIngest", fresh: bool, start_offset: int) -> None:
    """Keep dangling_parents current: a parent may arrive in these lines, a
    new line may name a parent that is in no line of the file."""
    fid = ing.file_id
    if not fresh:
        c.execute(
            "DELETE FROM dangling_parents WHERE file_id = ? AND parent_uuid IN "
            "(SELECT uuid FROM records WHERE file_id = ? AND offset >= ? AND uuid IS NOT NULL)",
            (fid, fid, start_offset),
        )
    for offset, parent in ing.parent_candidates:
        if c.execute("SELECT 1 FROM records WHERE file_id = ? AND uuid = ? LIMIT 1", (fid, parent)).fetchone() is None:
            c.execute("INSERT OR REPLACE INTO dangling_parents VALUES (?,?,?)", (fid, offset, parent))


def _delete_file_rows(conn: sqlite3.Connection, file_id: int) -> None:
    for table in ("blocks", "attachments", "usage", "chain", "parse_errors", "dangling_parents",
                  "records", "sessions"):
        conn.execute(f"DELETE FROM {table} WHERE file_id = ?", (file_id,))


def _update_session(conn, ing: FileIngest, fresh: bool, path: str, project: str | None) -> None:
    row = None if fresh else conn.execute(
        "SELECT session_id, title, title_source, cwd, git_branch, version, model, "
        "first_timestamp, last_timestamp, lines, messages, agent_id FROM sessions WHERE file_id = ?",
        (ing.file_id,),
    ).fetchone()
    if row:
        (session_id, title, title_source, cwd, branch, version, model, first_ts, last_ts,
         lines, messages, agent_id) = row
    else:
        session_id = title = title_source = cwd = branch = version = model = None
        first_ts = last_ts = agent_id = None
        lines = messages = 0
    m = ing.meta
    stem = Path(path).name[: -len(".jsonl")]
    file_session = session_id or m.get("session_id") or stem
    parent_session = None
    if ing.kind == "subagent":
        # Subagent lines carry their parent's sessionId; the file is its own session.
        parent_session = ing.layout_parent or m.get("session_id")
        file_session = stem
    cwd = cwd or m.get("cwd")
    branch = branch or m.get("git_branch")
    version = version or m.get("version")
    model = model or m.get("model")
    agent_id = agent_id or m.get("agent_id")
    if ing.first_ts and (first_ts is None or ing.first_ts < first_ts):
        first_ts = ing.first_ts
    if ing.last_ts and (last_ts is None or ing.last_ts > last_ts):
        last_ts = ing.last_ts
    for source, value in ing.titles.items():
        rank = TITLE_RANK[source]
        cur = TITLE_RANK.get(title_source or "", 0)
        if rank > cur or (rank == cur and source != "summary"):
            title, title_source = value, source
    conn.execute(
        "INSERT INTO sessions (file_id, session_id, parent_session_id, agent_id, project, "
        "title, title_source, cwd, git_branch, version, model, first_timestamp, last_timestamp, "
        "lines, messages, record_bytes, journal_bytes) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?) "
        "ON CONFLICT (file_id) DO UPDATE SET session_id = excluded.session_id, "
        "parent_session_id = excluded.parent_session_id, agent_id = excluded.agent_id, "
        "project = excluded.project, title = excluded.title, title_source = excluded.title_source, "
        "cwd = excluded.cwd, git_branch = excluded.git_branch, version = excluded.version, "
        "model = excluded.model, first_timestamp = excluded.first_timestamp, "
        "last_timestamp = excluded.last_timestamp, lines = excluded.lines, messages = excluded.messages, "
        "record_bytes = record_bytes + excluded.record_bytes, "
        "journal_bytes = journal_bytes + excluded.journal_bytes",
        (ing.file_id, file_session, parent_session, agent_id, project, title, title_source, cwd,
         branch, version, model, first_ts, last_ts, lines + ing.lines, messages + ing.messages,
         ing.record_bytes, ing.journal_bytes),
    )
    conn.execute("UPDATE files SET session_id = ? WHERE id = ?", (file_session, ing.file_id))


def _load_nodes(conn, file_id: int) -> list[chainmod.Node]:
    rows = conn.execute(
        "SELECT offset, uuid, parent_uuid, type, is_sidechain, leaf_uuid, message_id, "
        "  type = 'user' AND EXISTS (SELECT 1 FROM blocks b WHERE b.file_id = r.file_id "
        "    AND b.offset = r.offset AND b.kind = 'tool_result'), "
        "  CASE WHEN subtype = 'compact_boundary' THEN raw END "
        "FROM records r WHERE file_id = ? AND (uuid IS NOT NULL OR type = 'last-prompt') ORDER BY offset",
        (file_id,),
    )
    nodes = []
    for o, u, p, t, s, lf, mid, tr, boundary in rows:
        if boundary is not None:
            node = chainmod.node_from(o, orjson.loads(boundary))
        else:
            node = chainmod.Node(o, u, p, t, bool(s), lf, mid if t == "assistant" else None, bool(tr))
        nodes.append(node)
    return nodes


def _store_chain(conn, file_id: int, chain: list[chainmod.Node], start: int = 0) -> None:
    """Write chain positions from ``start`` on, and the session's chain sums."""
    if start == 0:
        conn.execute("DELETE FROM chain WHERE file_id = ?", (file_id,))
    conn.executemany(
        "INSERT OR REPLACE INTO chain VALUES (?,?,?)",
        [(file_id, start + i, n.offset) for i, n in enumerate(chain)],
    )
    leaf = chain[-1].uuid if chain else None
    tokens, length = conn.execute(
        "SELECT coalesce(sum(r.tokens), 0), coalesce(sum(r.length), 0) FROM chain c "
        "JOIN records r ON r.file_id = c.file_id AND r.offset = c.offset WHERE c.file_id = ? AND c.pos >= ?",
        (file_id, start),
    ).fetchone()
    if start == 0:
        conn.execute(
            "UPDATE sessions SET leaf_uuid = ?, chain_length = ?, chain_tokens = ?, chain_bytes = ? "
            "WHERE file_id = ?",
            (leaf, len(chain), tokens, length, file_id),
        )
    else:
        conn.execute(
            "UPDATE sessions SET leaf_uuid = ?, chain_length = ?, chain_tokens = chain_tokens + ?, "
            "chain_bytes = chain_bytes + ? WHERE file_id = ?",
            (leaf, start + len(chain), tokens, length, file_id),
        )


def _update_chain(conn, ing: FileIngest, fresh: bool) -> None:
    """Recompute the active chain; when appended lines only extend the old
    leaf, just the new positions are written."""
    if fresh:
        _store_chain(conn, ing.file_id, chainmod.active_chain(ing.nodes))
        return
    if not ing.nodes:
        return
    old_leaf, old_len = conn.execute(
        "SELECT leaf_uuid, chain_length FROM sessions WHERE file_id = ?", (ing.file_id,)
    ).fetchone() or (None, 0)
    extension = chainmod.extend(ing.nodes, old_leaf) if old_len else None
    if extension is not None:
        if extension:
            _store_chain(conn, ing.file_id, extension, start=old_len)
        return
    _store_chain(conn, ing.file_id, chainmod.active_chain(_load_nodes(conn, ing.file_id)))


def ingest_file(conn: sqlite3.Connection, found: Found, existing: tuple | None,
                stats: RefreshStats) -> str:
    """Bring one file's rows up to date; returns new/grown/rewritten/unchanged.
    The file's rows and its cursor commit in one transaction."""
    st = found.stat
    path = found.path
    status = "new"
    start_offset, start_line = 0, 1
    file_id = None
    with open(path, "rb", buffering=READ_BUFFER) as fh:
        if existing is not None:
            file_id, size, mtime_ns, inode, head_sha, tail_sha, cursor, lines, gone = existing
            if (size == st.st_size and mtime_ns == st.st_mtime_ns and inode == st.st_ino
                    and not gone):
                return "unchanged"
            status = "rewritten"
            if inode == st.st_ino and st.st_size >= cursor and cursor > 0:
                head, tail = _head_tail(fh, cursor)
                if head == head_sha and tail == tail_sha:
                    status = "grown" if st.st_size > cursor else "unchanged"
            elif cursor == 0 and inode == st.st_ino and lines == 0:
                status = "grown" if st.st_size > 0 else "unchanged"
            if status == "unchanged":
                conn.execute("UPDATE files SET size = ?, mtime_ns = ?, gone = 0 WHERE id = ?",
                             (st.st_size, st.st_mtime_ns, file_id))
                return "unchanged"
            if status == "grown":
                start_offset, start_line = cursor, lines + 1
        fresh = status in ("new", "rewritten")
        with transaction(conn):
            if file_id is None:
                file_id = conn.execute(
                    "INSERT INTO files (path, root, project, kind, size) VALUES (?,?,?,?,0)",
                    (path, found.root, found.project, found.kind),
                ).lastrowid
            elif status == "rewritten":
                _delete_file_rows(conn, file_id)
            ing = FileIngest(conn, file_id, found.kind, found.parent_session_id, path, fresh=fresh)
            cursor = start_offset
            next_line = start_line
            for line in read_lines(fh, start_offset, start_line):
                ing.add_line(line)
                cursor = line.offset + line.length
                next_line = line.number + 1
            ing.flush()
            if ing.unnamed_results:
                _name_tool_results(conn, file_id)
            _update_session(conn, ing, fresh, path, found.project)
            _update_dangling(conn, ing, fresh, start_offset)
            _update_chain(conn, ing, fresh)
            head, tail = _head_tail(fh, cursor)
            conn.execute(
                "UPDATE files SET root = ?, project = ?, kind = ?, size = ?, mtime_ns = ?, "
                "inode = ?, head_sha = ?, tail_sha = ?, cursor = ?, lines = ?, gone = 0, "
                "refreshed_at = datetime('now') WHERE id = ?",
                (found.root, found.project, found.kind, st.st_size, st.st_mtime_ns, st.st_ino,
                 head, tail, cursor, next_line - 1, file_id),
            )
    stats.lines += ing.lines
    stats.parse_errors += ing.error_count
    stats.bytes += cursor - start_offset
    return status


def _existing(conn) -> dict[str, tuple]:
    return {
        r[0]: r[1:]
        for r in conn.execute(
            "SELECT path, id, size, mtime_ns, inode, head_sha, tail_sha, cursor, lines, gone FROM files"
        )
    }


def refresh(conn: sqlite3.Connection, roots: list[Path], prune: bool = False,
            progress: Callable[[int, int], None] | None = None) -> RefreshStats:
    """Refresh every session file under ``roots``."""
    t0 = time.perf_counter()
    stats = RefreshStats()
    stats.roots_missing = [str(r) for r in roots if not r.is_dir()]
    found = discover(roots)
    existing = _existing(conn)
    stats.files = len(found)
    seen = set()
    total = sum(f.stat.st_size for f in found)
    # Checkpoint the WAL less often while refreshing: each checkpoint costs
    # two fsyncs, and a cold refresh wrote ~40 of them at the default 1000
    # pages. Durability is unchanged (same synchronous level, same commits).
    ckpt = conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0]
    if 0 < ckpt < REFRESH_CHECKPOINT_PAGES:
        conn.execute(f"PRAGMA wal_autocheckpoint = {REFRESH_CHECKPOINT_PAGES}")
    try:
        _refresh_found(conn, found, existing, stats, seen, total, progress)
    finally:
        if 0 < ckpt < REFRESH_CHECKPOINT_PAGES:
            conn.execute(f"PRAGMA wal_autocheckpoint = {int(ckpt)}")
    root_strs = [str(r) for r in roots]
    missing = [
        (path, row[0]) for path, row in existing.items()
        if path not in seen and any(path.startswith(r.rstrip(os.sep) + os.sep) for r in root_strs)
    ]
    if missing:
        with transaction(conn):
            for path, file_id in missing:
                if os.path.exists(path):
                    continue
                if prune:
                    _delete_file_rows(conn, file_id)
                    conn.execute("DELETE FROM files WHERE id = ?", (file_id,))
                    stats.pruned += 1
                else:
                    if not existing[path][8]:
                        conn.execute("UPDATE files SET gone = 1 WHERE id = ?", (file_id,))
                    stats.gone += 1
    stats.seconds = time.perf_counter() - t0
    return stats


def _refresh_found(conn, found, existing, stats, seen, total, progress) -> None:
    done = 0
    for f in found:
        seen.add(f.path)
        try:
            status = ingest_file(conn, f, existing.get(f.path), stats)
        except (FileNotFoundError, PermissionError):
            continue  # vanished or unreadable between discovery and read
        setattr(stats, status, getattr(stats, status) + 1)
        done += f.stat.st_size
        if progress:
            progress(done, total)


def refresh_path(conn: sqlite3.Connection, path: str | Path, root: str | None = None) -> str:
    """Refresh one file (given by path) and return its status."""
    p = Path(path).resolve()
    st = p.stat()
    if root is None:
        row = conn.execute("SELECT root FROM files WHERE path = ?", (str(p),)).fetchone()
        root = row[0] if row else None
    project, kind, parent = classify(p, Path(root) if root else None)
    found = Found(str(p), root or str(p.parent.parent), project, kind, parent, st)
    existing = _existing_one(conn, str(p))
    return ingest_file(conn, found, existing, RefreshStats())


def _existing_one(conn, path: str):
    row = conn.execute(
        "SELECT id, size, mtime_ns, inode, head_sha, tail_sha, cursor, lines, gone FROM files WHERE path = ?",
        (path,),
    ).fetchone()
    return tuple(row) if row else None
