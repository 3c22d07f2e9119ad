"""Refresh the catalog from session files, incrementally.

For each file: unchanged (same size, mtime and inode) is skipped; grown
(same inode, the bytes before the cursor unchanged) is read from its cursor;
anything else is re-ingested from scratch. Each file's rows and its cursor
commit in the same transaction (files are committed in batches, each file in
its own savepoint), so an interrupted run leaves a catalog the next refresh
completes. A file that vanished keeps its rows, marked gone, until
``prune``.

Every file, whether the catalog is new or not, is written by one function
(``ingest_file``): rows from txdb.catalog.ingest.rows, then the full-text index of
its new blocks, in the file's transaction. A catalog that does not exist
yet is built by txdb.catalog.ingest.bulk, on top of this module.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import sqlite3
import threading
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from txdb.model import chain as chainmod
from txdb.catalog import chain_rows
from txdb.catalog import estimate, history
from txdb.catalog import units
from txdb.catalog.ingest import billed, census, type_sums, waste_found, window
from txdb.model.chain_health import missing_parent_findings
from txdb.catalog.cost import sync_prices
from txdb.catalog.sqlutil import transaction
from txdb.errors import PruneError
from txdb.model.regular import open_regular
from txdb.model.paths import archived_from, archived_path, is_side_file, session_stem, swaps_of
from txdb.catalog.ingest.discover import (Found, FoundSidecar, Linked, Unreadable, classify, discover, reached,
    session_folder, session_sidecars)
from txdb.model.paths import ARCHIVED_SUFFIX, SESSION_SUFFIX, is_session_path, shown_path
from txdb.catalog.ingest import sha as shamod
from txdb.model.lines import READ_BUFFER, head_tail, read_lines
from txdb.model.records import pick_title
from txdb.catalog.staleness import catalogued_path, same_file
from txdb.catalog.ingest.chunks import WHOLE_TEXT, ChunkWriter
from txdb.catalog.ingest.rows import FileIngest, FileSummary, RowBatch

# One row per API message, with its final figures. A message is written as
# several lines (one per content block), each repeating message.id and the
# usage known when it was written: the last line carries what the API billed
# (output_tokens grows line by line; some models behind Claude Code put an
# input estimate on the first line and the real count on the last). So a
# later line's figures replace an earlier one's, and the row keeps the
# offset of the first line.
# The row's own figures are the API's and are never lowered by txdb: a file
# that was rewritten (a surgery, txdb's usage reset) is re-ingested over the
# rows it had (see _begin_file), which are marked ``rewritten`` and from
# then on only rise; the gauge_* columns take the file's current figures
# (its latest line of the message) either way.
# The same message repeated in another file of the session is counted once
# by the billed_usage view (sql/views), not here: rows stay per file.
# _TOTAL is the billed total (the usage_context view's billed_tokens), over the
# upsert's two rows, where no view can be read.
_TOTAL = ("coalesce({t}.input_tokens, 0) + coalesce({t}.output_tokens, 0) + "
          "coalesce({t}.cache_read_input_tokens, 0) + coalesce({t}.cache_creation_input_tokens, 0)")
_API_FIGURES = ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens",
                "ephemeral_5m_input_tokens", "ephemeral_1h_input_tokens", "iterations", "invalid")
_TAKES = f"NOT usage.rewritten OR {_TOTAL.format(t='excluded')} > {_TOTAL.format(t='usage')}"
USAGE_UPSERT = (
    "INSERT INTO usage (file_id, message_id, offset, request_id, session_id, timestamp, model, "
    "input_tokens, output_tokens, cache_read_input_tokens, cache_creation_input_tokens, "
    "ephemeral_5m_input_tokens, ephemeral_1h_input_tokens, service_tier, iterations, "
    "gauge_input_tokens, gauge_cache_read_input_tokens, gauge_cache_creation_input_tokens, "
    "gauge_iterations, invalid, in_file) "
    "VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,?14,?15,?8,?10,?11,NULL,?16,1) "
    "ON CONFLICT (file_id, message_id) DO UPDATE SET "
    + ", ".join(f"{c} = CASE WHEN {_TAKES} THEN excluded.{c} ELSE usage.{c} END" for c in _API_FIGURES)
    + ", offset = CASE WHEN usage.in_file THEN usage.offset ELSE excluded.offset END, in_file = 1, "
    + ", ".join(f"gauge_{c} = excluded.gauge_{c}"
                for c in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"))
    # NULL: the file's iterations are the row's (NULL or not); 'null': the file holds none (migration 044)
    + f", gauge_iterations = CASE WHEN {_TAKES} OR usage.iterations IS excluded.iterations THEN NULL "
    "ELSE coalesce(excluded.iterations, 'null') END"
)

# A refresh commits its files in batches (``_Batch``): this much read, this
# many files, or this long holding the write lock (a hook waits for it).
BATCH_BYTES = 32 << 20
BATCH_FILES = 200
BATCH_SECONDS = 1.0
REFRESH_CHECKPOINT_PAGES = 10000  # ~40 MB of WAL between checkpoints
# The page cache while a refresh writes files (KiB): the pages it writes are
# rarely read again, so a larger one (a connection's 64 MB) only grows the
# process (74 MB against 59 MB adding half the corpus) for no speed.
REFRESH_CACHE_KIB = 8192
GONE_AT = "strftime('%Y-%m-%dT%H:%M:%SZ', 'now')"  # when refresh found a file gone: ISO 8601 UTC, as the records'
BLOB_LEVEL = 6  # zlib level of stored sidecar contents (given back, never queried)


def insert_sql(table: str, columns: tuple[str, ...], verb: str = "INSERT OR REPLACE",
               casts: dict[str, str] | None = None) -> str:
    """An INSERT naming its columns, in the order of the row tuples: a column
    a later migration adds (ALTER TABLE appends it) takes its default."""
    casts = casts or {}
    values = ",".join(f"CAST(? AS {casts[c]})" if c in casts else "?" for c in columns)
    return f"{verb} INTO {table} ({', '.join(columns)}) VALUES ({values})"


# The columns of the row tuples txdb.catalog.ingest.rows builds, in their order.
RECORD_COLUMNS = ("file_id", "offset", "length", "line", "session_id", "type", "subtype", "uuid",
                  "parent_uuid", "logical_parent_uuid", "leaf_uuid", "timestamp", "is_sidechain",
                  "is_meta", "role", "model", "message_id", "request_id", "tokens", "compact_summary", "forked",
                  "json")
BLOCK_COLUMNS = ("file_id", "offset", "idx", "session_id", "role", "type", "kind", "tool_name",
                 "tool_use_id", "is_error", "chars", "signature_chars", "media_type", "width",
                 "height", "image_sha256", "images", "tokens", "text", "cut")
ATTACHMENT_COLUMNS = ("file_id", "offset", "session_id", "type", "timestamp", "policy", "tokens",
                      "from_rendered", "free", "hook_event")
PARSE_ERROR_COLUMNS = ("file_id", "line", "offset", "length", "message", "recovered")
MARKER_COLUMNS = ("file_id", "offset", "idx", "recorded_size", "text")

# A cost-state line's JSON arrives as bytes and is stored as TEXT by the CAST.
RECORDS_INSERT = insert_sql("records", RECORD_COLUMNS, casts={"json": "TEXT"})
BLOCKS_INSERT = insert_sql("blocks", BLOCK_COLUMNS, "INSERT")
ATTACHMENTS_INSERT = insert_sql("attachments", ATTACHMENT_COLUMNS)
PARSE_ERRORS_INSERT = insert_sql("parse_errors", PARSE_ERROR_COLUMNS)
MARKERS_INSERT = insert_sql("markers", MARKER_COLUMNS)
DANGLING_INSERT = insert_sql("dangling_parents", ("file_id", "offset", "parent_uuid"))
CHAIN_INSERT = insert_sql("chain", ("file_id", "pos", "offset", "timestamp"))

# The full-text index (blocks_fts, contentless: it holds only the index of
# each block's whole text, a cut block's decoded by WHOLE_TEXT) is kept by
# the refresh itself, in each batch's transaction: the batch's new blocks
# are indexed in one statement at its commit (FTS5 writes its pending terms
# at the end of every statement, so one per batch, not one per row or
# file), and blocks leave the index before they leave the table. A first
# build instead indexes everything once at its end (txdb.catalog.ingest.bulk):
# one statement writes far fewer index segments than one per file.
_INDEXED = "text IS NOT NULL AND text <> ''"
FTS_ALL = f"INSERT INTO blocks_fts (rowid, text) SELECT b.rowid, {WHOLE_TEXT.format('b')} FROM blocks b"
FTS_INDEX = FTS_ALL + f" WHERE file_id = ? AND offset >= ? AND {_INDEXED}"
FTS_BUILD = FTS_ALL + f" WHERE {_INDEXED}"  # every block at once (a first build)
# Contentless: a row leaves the index given the text it was indexed with.
FTS_UNINDEX = (f"INSERT INTO blocks_fts (blocks_fts, rowid, text) SELECT 'delete', b.rowid, {WHOLE_TEXT.format('b')} "
               f"FROM blocks b WHERE file_id = ? AND offset >= ? AND {_INDEXED}")


@dataclass
class RefreshStats:
    new: int = 0
    grown: int = 0
    rewritten: int = 0
    unchanged: int = 0
    gone: int = 0
    sessions_gone: int = 0  # sessions this refresh found gone (newly)
    subagents_gone: int = 0  # subagent transcripts this refresh found gone (newly)
    sidecars: int = 0  # sidecar files read (new or changed)
    swaps_logged: int = 0  # surgeries rows caught up from swap journals (set by `txdb refresh`)
    pruned: int = 0
    lines: int = 0
    bytes: int = 0
    parse_errors: int = 0
    history_prompts: int = 0  # prompts new to the catalog from history.jsonl
    seconds: float = 0.0
    files: int = 0
    roots_missing: list[str] = field(default_factory=list)
    # Files and folders that could not be read ({"path", "error"}): their
    # rows stay as they were.
    unreadable: list[dict] = field(default_factory=list)
    # txdb's own files in the tree it could not use (a swap journal, or an
    # entry of one, that is not txdb's): named, never stopping the refresh.
    warnings: list[str] = field(default_factory=list)
    # Symbolic links to folders under a root ({"path", "root", "target", "catalogued",
    # "catalogued_at_target"}): never followed, so nothing under them is read; "catalogued": the files
    # under the link the catalog holds as live, kept as last read; "catalogued_at_target": those it holds
    # under the target (a refresh with a --root holding it read them).
    linked: list[dict] = field(default_factory=list)

    @property
    def mb_per_s(self) -> float:
        return (self.bytes / 1e6) / self.seconds if self.seconds > 0 else 0.0

    def summary(self) -> str:
        return (
            f"{self.new} new, {self.grown} grown, {self.rewritten} rewritten, "
            f"{self.unchanged} unchanged, {self.gone} gone"
            + self._newly_gone()
            + (f", {self.pruned} pruned" if self.pruned else "")
            + (f", {self.sidecars} sidecar file{'s' if self.sidecars != 1 else ''} kept" if self.sidecars else "")
            + (f", {self.swaps_logged} surgeries logged from swap journals" if self.swaps_logged else "")
            + f"; {self.lines:,} lines"
            + (f" ({self.parse_errors} unparseable)" if self.parse_errors else "")
            + (f", {self.history_prompts:,} prompt{'s' if self.history_prompts != 1 else ''} from history.jsonl"
               if self.history_prompts else "")
            + f", {self.bytes / 1e6:.1f} MB in {self.seconds:.2f}s"
            + f" ({self.mb_per_s:.1f} MB/s)"
            + self._unreadable_summary()
            + (f"; {len(self.linked)} linked folder{'s' if len(self.linked) != 1 else ''} not read (a link is "
               "never followed)" if self.linked else "")
        )

    def _newly_gone(self) -> str:
        """What of ``gone`` (every file the catalog holds as gone) this refresh found gone."""
        parts = [f"{n} {what}{'s' if n != 1 else ''}" for n, what in
                 ((self.sessions_gone, "session"), (self.subagents_gone, "subagent transcript")) if n]
        return f" ({' and '.join(parts)} newly gone: txdb sessions --gone)" if parts else ""

    def _unreadable_summary(self, named: int = 3) -> str:
        if not self.unreadable:
            return ""
        shown = ", ".join(f"{u['path']} ({u['error']})" for u in self.unreadable[:named])
        more = len(self.unreadable) - named
        return f"; {len(self.unreadable)} could not be read: {shown}" + (f" and {more} more" if more > 0 else "")

    def add_unreadable(self, path: str, error: BaseException | str) -> None:
        if isinstance(error, OSError):
            error = error.strerror or type(error).__name__
        elif isinstance(error, BaseException):
            error = f"could not be indexed: {type(error).__name__}: {error}"
        self.unreadable.append({"path": path, "error": error})


def _write_rows(c: sqlite3.Connection, batch: RowBatch, raws: ChunkWriter) -> None:
    if batch.records:
        c.executemany(RECORDS_INSERT, batch.records)
        for offset, raw in batch.raws:
            raws.add(offset, raw)
    if batch.blocks:
        # No conflict is possible: a file read from its start has no rows
        # left, an appended tail none past its cursor (see _begin_file).
        c.executemany(BLOCKS_INSERT, batch.blocks)
    if batch.attachments:
        c.executemany(ATTACHMENTS_INSERT, batch.attachments)
    if batch.usage:
        c.executemany(USAGE_UPSERT, batch.usage)
    if batch.errors:
        c.executemany(PARSE_ERRORS_INSERT, batch.errors)
    if batch.markers:
        c.executemany(MARKERS_INSERT, batch.markers)


def _name_tool_results(c: sqlite3.Connection, file_id: int) -> None:
    """Name tool_results whose tool_use was ingested in an earlier pass."""
    c.execute(
        "UPDATE blocks SET tool_name = (SELECT u.tool_name FROM blocks u WHERE u.file_id = blocks.file_id "
        "AND u.tool_use_id = blocks.tool_use_id AND u.kind = 'tool_use' LIMIT 1) "
        "WHERE file_id = ? AND kind = 'tool_result' AND tool_name IS NULL AND tool_use_id IS NOT NULL",
        (file_id,),
    )


def _add_dangling(c: sqlite3.Connection, file_id: int, nodes_parents: list[tuple[int, str]],
                  from_start: bool, start_offset: int) -> None:
    """Keep dangling_parents current: a parent may arrive in appended lines,
    a new line may name a parent that is in no line of the file. Read from
    the start, the candidates are already the file's dangling parents."""
    if from_start:
        c.executemany(DANGLING_INSERT,
                      [(file_id, o, p) for o, p in nodes_parents])
        return
    c.execute(
        "DELETE FROM dangling_parents WHERE file_id = ? AND parent_uuid IN "
        "(SELECT uuid FROM records WHERE file_id = ? AND offset >= ? AND uuid IS NOT NULL)",
        (file_id, file_id, start_offset),
    )
    for offset, parent in nodes_parents:
        if c.execute("SELECT 1 FROM records WHERE file_id = ? AND uuid = ? LIMIT 1",
                     (file_id, parent)).fetchone() is None:
            c.execute(DANGLING_INSERT, (file_id, offset, parent))


def _delete_file_rows(conn: sqlite3.Connection, file_id: int, keep_usage: bool = False,
                      index_text: bool = True) -> None:
    """``keep_usage``: a rewritten file keeps its usage rows (the API's
    figures), marked not in the file until its lines name them again, and
    rewritten (their figures only rise from then on; rows migration 013
    left to re-derive take the file's figures once more)."""
    if index_text:
        conn.execute(FTS_UNINDEX, (file_id, 0))
    for table in ("type_sums", "waste_found", "secret_findings", "secret_scans", "markers", "blocks", "attachments", "usage", "chain", "parse_errors",
                  "dangling_parents", "chain_findings", "file_formats", "raw_chunks", "records", "sessions"):
        if table == "usage" and keep_usage:
            conn.execute("UPDATE usage SET in_file = 0, rewritten = (rewritten <> 2), gauge_input_tokens = NULL, "
                         "gauge_cache_read_input_tokens = NULL, gauge_cache_creation_input_tokens = NULL, "
                         "gauge_iterations = CASE WHEN iterations IS NOT NULL THEN 'null' END WHERE file_id = ?", (file_id,))
            continue
        conn.execute(f"DELETE FROM {table} WHERE file_id = ?", (file_id,))


def _named_session(conn, file_id: int, meta: dict, start_offset: int, known: str | None,
                   fallback: str | None) -> str | None:
    """The sessionId the first of a file's lines naming one names (None: no
    line does), as a read from its start finds it, however the file grew:
    later lines naming another session, or none, change nothing. ``meta``
    is what the lines just read (from ``start_offset``) name; ``known`` what
    the stored row says the older lines named (None: nothing, or it cannot
    tell, the id standing for none being ``fallback``). Only then are their
    records asked, never the file: an append costs no read of what it had."""
    tail = meta.get("session_id")
    if start_offset == 0:
        return tail
    if known is not None:
        return known
    if tail is None or tail == fallback:
        return tail
    row = conn.execute("SELECT session_id FROM records WHERE file_id = ? AND offset < ? AND session_id <> '' "
                       "ORDER BY offset LIMIT 1", (file_id, start_offset)).fetchone()
    return row[0] if row else tail


def _update_session(conn, file_id: int, found: Found, s: FileSummary, fresh: bool, start_offset: int) -> None:
    row = None if fresh else conn.execute(
        "SELECT session_id, title, title_source, cwd, git_branch, version, model, "
        "first_timestamp, last_timestamp, lines, messages, agent_id, parent_session_id FROM sessions "
        "WHERE file_id = ?",
        (file_id,),
    ).fetchone()
    if row:
        (session_id, title, title_source, cwd, branch, version, model, first_ts, last_ts,
         lines, messages, agent_id, parent_session) = row
    else:
        session_id = title = title_source = cwd = branch = version = model = None
        first_ts = last_ts = agent_id = parent_session = None
        lines = messages = 0
    start = 0 if row is None else start_offset
    m = s.meta
    stem = session_stem(found.path)
    if found.kind == "subagent":
        # Subagent lines carry their parent's sessionId (its folder, in a
        # subagents folder, names it first); the file is its own session.
        parent_session = found.parent_session_id or _named_session(conn, file_id, m, start, parent_session, None)
        file_session = stem
    else:  # stored as its name until a line names one: that name tells nothing
        parent_session = None
        file_session = _named_session(conn, file_id, m, start, None if session_id == stem else session_id,
                                      stem) or stem
    cwd = cwd or m.get("cwd")
    branch = branch or m.get("git_branch")
    version = version or m.get("version")
    model = model or m.get("model")
    agent_id = agent_id or m.get("agent_id")
    if s.first_ts and (first_ts is None or s.first_ts < first_ts):
        first_ts = s.first_ts
    if s.last_ts and (last_ts is None or s.last_ts > last_ts):
        last_ts = s.last_ts
    title, title_source = pick_title(s.titles, (title, title_source))
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
        (file_id, file_session, parent_session, agent_id, found.project, title, title_source, cwd,
         branch, version, model, first_ts, last_ts, lines + s.lines, messages + s.messages,
         s.record_bytes, s.journal_bytes),
    )
    conn.execute("UPDATE files SET session_id = ? WHERE id = ?", (file_session, file_id))


def _store_chain(conn, file_id: int, positions: list[tuple[int, str | None]], start: int = 0) -> None:
    """Write chain positions, (offset, timestamp) each, from ``start`` on,
    and the session's chain sums."""
    if start == 0:
        conn.execute("DELETE FROM chain WHERE file_id = ?", (file_id,))
    conn.executemany(
        CHAIN_INSERT,
        [(file_id, start + i, o, ts) for i, (o, ts) in enumerate(positions)],
    )
    leaf = conn.execute("SELECT uuid FROM records WHERE file_id = ? AND offset = ?",
                        (file_id, positions[-1][0])).fetchone()[0] if positions else None
    tokens, length = conn.execute(
        "SELECT coalesce(sum(r.tokens), 0), coalesce(sum(r.length), 0) FROM chain c "
        "JOIN records r ON r.file_id = c.file_id AND r.offset = c.offset WHERE c.file_id = ? AND c.pos >= ?",
        (file_id, start),
    ).fetchone()
    if start == 0:
        conn.execute(
            "UPDATE sessions SET leaf_uuid = ?, chain_length = ?, chain_tokens = ?, chain_bytes = ? "
            "WHERE file_id = ?",
            (leaf, len(positions), tokens, length, file_id),
        )
    else:
        conn.execute(
            "UPDATE sessions SET leaf_uuid = ?, chain_length = ?, chain_tokens = chain_tokens + ?, "
            "chain_bytes = chain_bytes + ? WHERE file_id = ?",
            (leaf, start + len(positions), tokens, length, file_id),
        )


def _update_chain(conn, file_id: int, nodes: list[chainmod.Node]) -> None:
    """Recompute the active chain after appended lines; when they only
    extend the old leaf, just the new positions are written."""
    if not nodes:
        return
    old_leaf, old_len = conn.execute(
        "SELECT leaf_uuid, chain_length FROM sessions WHERE file_id = ?", (file_id,)
    ).fetchone() or (None, 0)
    extension = chainmod.extend(nodes, old_leaf) if old_len else None
    if extension is not None:
        if extension:
            _store_chain(conn, file_id, [(n.offset, n.timestamp) for n in extension], start=old_len)
        return
    _store_chain(conn, file_id, [(n.offset, n.timestamp) for n in chainmod.active_chain(chain_rows.load_nodes(conn, file_id))])


@dataclass(slots=True)
class Plan:
    """What a refresh does to one file."""

    found: Found
    status: str  # new, grown, rewritten, unchanged
    file_id: int | None
    start_offset: int = 0
    start_line: int = 1
    archive: int | None = None  # a gone file's row kept aside (its path moved): a new file came at its path

    @property
    def from_start(self) -> bool:
        return self.status in ("new", "rewritten")


def store_chain_findings(conn, file_id: int) -> int:
    """Judge a catalogued file's missing parents as ``verify`` does
    (``chain_health.missing_parent_findings``), from its records rows, and keep the findings in ``chain_findings`` (which the
    ``chain_health`` view reads). Refresh calls it for every file it
    changed; only a file with a row in ``dangling_parents`` has anything to
    judge, so the others cost one lookup. Returns the findings kept."""
    conn.execute("DELETE FROM chain_findings WHERE file_id = ?", (file_id,))
    if conn.execute("SELECT 1 FROM dangling_parents WHERE file_id = ? LIMIT 1", (file_id,)).fetchone() is None:
        return 0
    nodes = chain_rows.load_nodes(conn, file_id)
    line_of = dict(conn.execute("SELECT offset, line FROM records WHERE file_id = ? AND uuid IS NOT NULL",
                                (file_id,)))
    by_uuid = chainmod.index(nodes)
    chain = chainmod.active_chain(nodes)
    sidechain_file = bool(nodes) and all(n.is_sidechain for n in nodes if n.uuid)
    rows = [(file_id, offset, f.severity, f.code, f.message)
            for f, offset in missing_parent_findings(nodes, by_uuid, chain, line_of, sidechain_file)]
    conn.executemany("INSERT OR REPLACE INTO chain_findings (file_id, offset, severity, code, detail) "
                     "VALUES (?,?,?,?,?)", rows)
    return len(rows)


def plan_file(conn: sqlite3.Connection, found: Found, existing: tuple | None) -> Plan:
    """Unchanged (same size, mtime and inode), grown (same inode, the bytes
    before the cursor unchanged) or else read again from the start. A
    migration re-derives stored figures by clearing ``files.inode``
    (docs/architecture.md, "Schema changes")."""
    st = found.stat
    if existing is None:
        return Plan(found, "new", None)
    file_id, size, mtime_ns, inode, head_sha, tail_sha, cursor, lines, gone = existing
    if size == st.st_size and mtime_ns == st.st_mtime_ns and inode == st.st_ino and not gone:
        return Plan(found, "unchanged", file_id)
    status = "rewritten"
    # A gone file back at its path (restored: another inode) is the same file when its head is.
    if (inode == st.st_ino or gone) and st.st_size >= cursor and cursor > 0:
        with open_regular(found.path) as fh:
            if head_tail(fh, cursor) == (head_sha, tail_sha):
                status = "grown" if st.st_size > cursor else "unchanged"
    elif cursor == 0 and inode == st.st_ino and lines == 0:
        status = "grown" if st.st_size > 0 else "unchanged"
    if status == "unchanged":
        digest, state = FileHash(found.path, st.st_size).result()
        (held,) = conn.execute("SELECT sha256 FROM files WHERE id = ?", (file_id,)).fetchone()
        if held is not None and digest != held:
            # the same size and the same ends, other bytes between (an edit saved in place): read it again,
            # or its rows would stand for bytes the file no longer holds and neither version come back
            return Plan(found, "new", None, archive=file_id) if gone else Plan(found, "rewritten", file_id)
        conn.execute("UPDATE files SET size = ?, mtime_ns = ?, sha256 = ?, sha_state = ?, gone = 0, gone_at = NULL, "
                     "mode = ? WHERE id = ?", (st.st_size, st.st_mtime_ns, digest, state, st.st_mode & 0o7777, file_id))
        return Plan(found, "unchanged", file_id)
    if status == "grown":
        return Plan(found, "grown", file_id, cursor, lines + 1)
    if gone:  # another file where a gone one was: the gone one's rows are its only copy
        return Plan(found, "new", None, archive=file_id)
    return Plan(found, "rewritten", file_id)


class FileHash:
    """sha256 of a file's first ``size`` bytes, and its running state
    (``txdb.catalog.ingest.sha``): resumed from ``state`` at ``start`` (a grown file:
    only its new bytes are read) when the state can be resumed, else from
    the start. Started at once; a large range is hashed on a thread (hashlib
    and libcrypto let go of the GIL) while the rows are parsed."""

    THREAD_BYTES = 1 << 20

    def __init__(self, path: str, size: int, state: bytes | None = None, start: int = 0):
        h = shamod.new(state) if state is not None and start <= size else None
        if h is None:
            h, start = shamod.new(), 0
        self._h, self._path, self._range = h, path, (start, size)
        self._error: BaseException | None = None
        self._thread = None
        if size - start >= self.THREAD_BYTES:
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()
        else:
            self._run()

    def _run(self) -> None:
        try:
            with open_regular(self._path) as fh:
                shamod.hash_range(self._h, fh, *self._range)
        except BaseException as e:  # re-raised by result(), in the refresh's thread
            self._error = e

    def result(self) -> tuple[str, bytes | None]:
        """(hex digest, state to store)."""
        if self._thread is not None:
            self._thread.join()
        if self._error is not None:
            raise self._error
        return self._h.hexdigest(), self._h.state


def _begin_file(conn, plan: Plan, index_text: bool) -> int | None:
    """Inside the file's transaction: its files row, and no stale rows.
    None when another refresh has added this new file meanwhile (its rows
    are then already current)."""
    f = plan.found
    if plan.file_id is None:
        if plan.archive is not None:
            conn.execute("UPDATE files SET path = ? WHERE id = ? AND path = ? AND gone = 1",
                         (archived_path(f.path, plan.archive), plan.archive, f.path))
        if conn.execute("SELECT 1 FROM files WHERE path = ?", (f.path,)).fetchone():
            return None
        return conn.execute(
            "INSERT INTO files (path, root, project, kind, size) VALUES (?,?,?,?,0)",
            (f.path, f.root, f.project, f.kind),
        ).lastrowid
    if plan.status == "rewritten":
        _delete_file_rows(conn, plan.file_id, keep_usage=True, index_text=index_text)
    else:  # grown: blocks past the cursor would be stale (none, unless the catalog was edited)
        if index_text:
            conn.execute(FTS_UNINDEX, (plan.file_id, plan.start_offset))
        for table in ("secret_findings", "markers", "blocks"):
            conn.execute(f"DELETE FROM {table} WHERE file_id = ? AND offset >= ?", (plan.file_id, plan.start_offset))
    return plan.file_id


def _end_file(conn, plan: Plan, file_id: int, s: FileSummary, ing: FileIngest,
              cursor: int, next_line: int, hashes: tuple, usage_ids: list[str]) -> None:
    """Inside the file's transaction: the session, dangling parents, chain
    and the cursor (the full-text index of its new blocks is the caller's);
    which file each of its API messages counts in and whether one needed a
    1M window (``usage_ids``: the messages an appended tail wrote)."""
    f = plan.found
    if s.unnamed_results:
        _name_tool_results(conn, file_id)
    _update_session(conn, file_id, f, s, plan.from_start, plan.start_offset)
    census.store(conn, file_id, s.census)
    if plan.from_start:
        _add_dangling(conn, file_id, s.dangling, True, 0)
        _store_chain(conn, file_id, s.chain)
    else:
        _add_dangling(conn, file_id, ing.parent_candidates, False, plan.start_offset)
        _update_chain(conn, file_id, ing.nodes)
    type_sums.store(conn, file_id)  # what fills its chain, by type (analyze_by_type)
    waste_found.store(conn, file_id)  # what its chain re-sends or rebuilds (waste_items)
    store_chain_findings(conn, file_id)  # missing parents, judged as `verify` judges them
    st = f.stat
    conn.execute(
        "UPDATE files SET root = ?, project = ?, kind = ?, size = ?, mtime_ns = ?, "
        "inode = ?, head_sha = ?, tail_sha = ?, sha256 = ?, sha_state = ?, cursor = ?, lines = ?, gone = 0, "
        "gone_at = NULL, refreshed_at = datetime('now'), mode = ? WHERE id = ?",
        (f.root, f.project, f.kind, st.st_size, st.st_mtime_ns, st.st_ino,
         hashes[0], hashes[1], hashes[2], hashes[3], cursor, next_line - 1, st.st_mode & 0o7777, file_id),
    )
    # after the files row: its size and sha256 tell whether the file is what
    # its newest swap wrote (the factor that swap logged: estimate.at_factor)
    estimate.store_session_estimate(conn, file_id)  # the calibrated figure every view shows
    # after the files row: the rank reads its kind and path
    touched = None if plan.from_start else sorted(set(usage_ids))
    billed.rank_file(conn, file_id, touched)
    window.store(conn, file_id, touched)  # a turn only a 1M window holds (context_gauge)


def _count(stats: RefreshStats, plan: Plan, s: FileSummary, cursor: int) -> None:
    stats.lines += s.lines
    stats.parse_errors += s.error_count
    stats.bytes += cursor - plan.start_offset
    setattr(stats, plan.status, getattr(stats, plan.status) + 1)


def ingest_file(conn: sqlite3.Connection, plan: Plan, stats: RefreshStats, index_text: bool = True) -> None:
    """Read one file and bring its rows up to date, full-text index
    included (unless ``index_text`` is False: a first build indexes at its
    end); its rows and its cursor commit in one transaction. The one write
    path of a refresh, for a new catalog as for an existing one (a refresh
    of many files commits them in batches: ``_refresh_found``)."""
    if plan.status == "unchanged":
        stats.unchanged += 1
        return
    with transaction(conn):
        done = _ingest(conn, plan, stats, index_text)
        if done is not None and index_text:
            conn.execute(FTS_INDEX, done)


def _ingest(conn: sqlite3.Connection, plan: Plan, stats: RefreshStats,
            index_text: bool) -> tuple[int, int] | None:
    """``ingest_file`` inside a transaction the caller holds, the full-text
    index left to it: the (file id, offset) from which the file's new
    blocks are to be indexed, or None when there was nothing to write."""
    old = None
    if plan.status == "grown":
        old = conn.execute("SELECT size, sha_state FROM files WHERE id = ?", (plan.file_id,)).fetchone()
    size = plan.found.stat.st_size
    file_hash = FileHash(plan.found.path, size, old[1], old[0]) if old and old[1] else FileHash(plan.found.path, size)
    with open_regular(plan.found.path, buffering=READ_BUFFER) as fh:
        file_id = _begin_file(conn, plan, index_text)
        if file_id is None:
            stats.unchanged += 1
            return None
        raws = ChunkWriter(conn, file_id, plan.start_offset)
        usage_ids: list[str] = []  # the messages it writes, ranked at its end

        def write(b: RowBatch) -> None:
            _write_rows(conn, b, raws)
            usage_ids.extend(u[1] for u in b.usage)

        ing = FileIngest(file_id, plan.found.kind, write, plan.from_start)
        if not plan.from_start:  # a grown file's new lines are priced on the session's model too
            row = conn.execute("SELECT model FROM sessions WHERE file_id = ?", (file_id,)).fetchone()
            if row and row[0]:
                ing.summary.meta["model"] = row[0]
            # and open a message as they would read from the start (records.message_link)
            ing.seed_links(reversed(conn.execute(
                "SELECT r.uuid, r.type, r.message_id, r.parent_uuid, (SELECT group_concat(tool_use_id, ' ') FROM"
                " (SELECT b.tool_use_id FROM blocks b WHERE b.file_id = r.file_id AND b.offset = r.offset"
                " AND b.kind = 'tool_use' ORDER BY b.idx))"
                " FROM records r WHERE r.file_id = ? AND r.uuid IS NOT NULL"
                " ORDER BY r.offset DESC LIMIT 2000", (file_id,)).fetchall()))  # the lines a new one hangs below
        cursor, next_line = plan.start_offset, plan.start_line
        for line in read_lines(fh, plan.start_offset, plan.start_line):
            ing.add_line(line)
            cursor = line.offset + line.length
            next_line = line.number + 1
        s = ing.finish()
        raws.close()
        hashes = (*head_tail(fh, cursor), *file_hash.result())  # the whole file as stat saw it
        _end_file(conn, plan, file_id, s, ing, cursor, next_line, hashes, usage_ids)
    _count(stats, plan, s, cursor)
    return file_id, plan.start_offset


def _existing(conn) -> dict[str, tuple]:
    return {
        r[0]: r[1:]
        for r in conn.execute(
            "SELECT path, id, size, mtime_ns, inode, head_sha, tail_sha, cursor, lines, gone FROM files"
        )
    }


def refresh(conn: sqlite3.Connection, roots: list[Path], prune: bool = False,
            progress: Callable[[int, int], None] | None = None, index_text: bool = True,
            prices: bool = True) -> RefreshStats:
    """Refresh every session file under ``roots``. ``index_text=False``
    leaves the full-text index alone, for a first build that then rebuilds
    it whole (txdb.catalog.ingest.bulk). ``prices=False`` leaves a model new
    to the catalog to the next ``db.connect`` to price (importing the price
    library costs a one-shot refresh ~0.3 s and ~40 MB)."""
    t0 = time.perf_counter()
    stats = RefreshStats()
    stats.roots_missing = [str(r) for r in roots if not r.is_dir()]
    unreadable: list[Unreadable] = []
    sidecars: list[FoundSidecar] = []
    linked: list[Linked] = []
    found = discover(roots, unreadable, sidecars, linked=linked)
    stats.unreadable = [u.as_dict() for u in unreadable]
    existing = _existing(conn)
    _say_linked(stats, linked, existing)
    if existing:
        _follow_links(conn, found, existing)
    stats.files = len(found)
    # Checkpoint the WAL less often while refreshing: each checkpoint costs
    # two fsyncs, and a cold refresh wrote ~40 of them at the default 1000
    # pages. Durability is unchanged (same synchronous level, same commits).
    ckpt = conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0]
    if 0 < ckpt < REFRESH_CHECKPOINT_PAGES:
        conn.execute(f"PRAGMA wal_autocheckpoint = {REFRESH_CHECKPOINT_PAGES}")
    try:
        _refresh_found(conn, found, existing, stats, progress, index_text)
    finally:
        if 0 < ckpt < REFRESH_CHECKPOINT_PAGES:
            conn.execute(f"PRAGMA wal_autocheckpoint = {int(ckpt)}")
    seen = {f.path for f in found}
    root_strs = [str(r) for r in roots]
    missing = [
        (path, row[0]) for path, row in existing.items()
        if path not in seen and any(path.startswith(r.rstrip(os.sep) + os.sep) for r in root_strs)
    ]
    # Files an older txdb catalogued that are not sessions (a backup, a
    # pending copy) go with --prune, wherever they are; side files of a
    # session's folder (its resume-head.jsonl) go at once, gone or not.
    not_sessions = [(path, row[0]) for path, row in existing.items()
                    if not is_session_path(path) and (prune or is_side_file(path))]
    if missing or not_sessions:
        with transaction(conn):
            for path, file_id in not_sessions:
                _delete_file(conn, file_id)
                stats.pruned += 1
            pruned = {path for path, _ in not_sessions}
            for path, file_id in missing:
                if path in pruned or not _vanished(path):
                    continue  # still there (under a folder that cannot be listed, ...)
                if prune:
                    _delete_file(conn, file_id)
                    stats.pruned += 1
                else:
                    if not existing[path][8]:
                        conn.execute(f"UPDATE files SET gone = 1, gone_at = {GONE_AT} WHERE id = ?",
                                     (file_id,))
                        if is_session_path(path):
                            if classify(Path(path))[1] == "session":
                                stats.sessions_gone += 1
                            else:
                                stats.subagents_gone += 1
                    stats.gone += 1
    _hash_unhashed(conn, found)
    # A journal removed or edited while its session stayed as it was (a
    # restore writes the file, never its journal): priced again. (A journal
    # newly beside an unchanged file: txdb refresh's catch-up, which lists them.)
    with transaction(conn):
        estimate.recheck_logged(conn)
    refresh_sidecars(conn, sidecars, root_strs, prune, stats)
    stats.history_prompts = history.refresh_roots(conn, roots, stats.warnings).prompts
    window.fill(conn)  # the files a catalog from before migration 042 has not read since
    if prices:
        sync_prices(conn)  # a model new to the catalog is priced (or listed unpriced) at once
    stats.seconds = time.perf_counter() - t0
    return stats


LINKED_NAMED = 3  # linked folders named in a warning (a count of the rest)


def _say_linked(stats: RefreshStats, linked: list[Linked], existing: dict[str, tuple]) -> None:
    """Name the symbolic links to folders refresh did not follow, in
    ``stats.linked`` and one warning per root: nothing under them is read
    (links are never followed), so the files the catalog holds there stay
    as last read, and what to do (a projects folder holding the target,
    given as a ``--root`` of its own)."""
    by_root: dict[str, list[dict]] = {}
    for link in linked:
        prefix, there = link.path + os.sep, link.target + os.sep
        held = sum(1 for path, row in existing.items() if path.startswith(prefix) and not row[8])
        at_target = sum(1 for path, row in existing.items() if path.startswith(there) and not row[8])
        d = {**link.as_dict(), "catalogued": held, "catalogued_at_target": at_target}
        stats.linked.append(d)
        by_root.setdefault(link.root, []).append(d)
    for root, links in by_root.items():
        n = len(links)
        named = ", ".join(f"{d['path']} -> {d['target']}" for d in links[:LINKED_NAMED])
        more = f" and {n - LINKED_NAMED} more" if n > LINKED_NAMED else ""
        held = sum(d["catalogued"] for d in links)
        kept = (f"; the {held:,} file{'s' if held != 1 else ''} catalogued under {'it' if n == 1 else 'them'} "
                "stay as last read") if held else ""
        there = sum(d["catalogued_at_target"] for d in links)
        kept += (f"; {there:,} file{'s' if there != 1 else ''} under {'its target' if n == 1 else 'their targets'} "
                 "catalogued from there") if there else ""
        give = next((d["root_to_give"] for d in links if d["root_to_give"]), None)
        stats.warnings.append((  # once per root, whatever the files under the links
            f"{n} linked folder{'s' if n != 1 else ''} under {shown_path(root)} not read (refresh never follows "
            f"a link): {named}{more}{kept}. " + (
                f"To catalogue {'it' if n == 1 else 'one'}, give the folder holding its target as a --root of its "
                f"own (a projects folder: each folder in it is read as a project), as in: txdb refresh --root "
                f"{shlex.quote(give)}" if give else
                f"No --root reads {'its target' if n == 1 else 'their targets'} rightly (the root itself, a folder "
                "under or above it, or a file system's root): move the folder back, or give its own projects "
                "folder as --root")))


def _cache_kib(conn, cache_size: int) -> int:
    """``PRAGMA cache_size`` in KiB (negative: KiB already; positive: pages)."""
    if cache_size < 0:
        return -cache_size
    return cache_size * conn.execute("PRAGMA page_size").fetchone()[0] // 1024


def _hash_unhashed(conn, found: list[Found]) -> None:
    """files.sha256 for rows an older catalog made (before migration 017),
    once, while the file is still the size the catalog read."""
    rows = {p: (i, size) for i, p, size in conn.execute(
        "SELECT id, path, size FROM files WHERE sha256 IS NULL AND gone = 0")}
    for f in found:
        row = rows.get(f.path)
        if row is None or row[1] != f.stat.st_size:
            continue
        try:
            digest, state = FileHash(f.path, row[1]).result()
        except OSError:
            continue
        with transaction(conn):
            conn.execute("UPDATE files SET sha256 = ?, sha_state = ? WHERE id = ? AND size = ?",
                         (digest, state, row[0], row[1]))
            if os.path.lexists(swaps_of(f.path)):  # priced at its newest swap's factor, now it can be told
                estimate.store_session_estimate(conn, row[0])


def read_blob(path: str) -> tuple[str, int, bytes]:
    """(sha256, size, zlib-compressed bytes) of the file at ``path``, read in
    chunks: memory holds the compressed content, not the file."""
    h, z, size = hashlib.sha256(), zlib.compressobj(BLOB_LEVEL), 0
    parts = []
    with open_regular(path) as fh:
        while chunk := fh.read(READ_BUFFER):
            h.update(chunk)
            size += len(chunk)
            parts.append(z.compress(chunk))
    parts.append(z.flush())
    return h.hexdigest(), size, b"".join(parts)


def store_blob(conn, blob: tuple[str, int, bytes]) -> str:
    """Store a ``read_blob`` result once in ``blobs``; its sha256."""
    sha, size, data = blob
    conn.execute("INSERT OR IGNORE INTO blobs (sha256, size, data) VALUES (?, ?, ?)", (sha, size, data))
    return sha


def refresh_sidecars(conn, found: list[FoundSidecar], roots: list[str], prune: bool,
                     stats: RefreshStats) -> None:
    """Bring the ``sidecars`` rows of the roots up to date: an unchanged file
    (same size and mtime) is skipped, a new or changed one read and its
    content stored once; a vanished one is marked gone (``prune``: its row
    goes, and every blob no row names)."""
    existing = {p: (i, size, mtime, gone) for i, p, size, mtime, gone in conn.execute(
        "SELECT id, path, size, mtime_ns, gone FROM sidecars")}
    for f in found:
        row = existing.get(f.path)
        st = f.stat
        if row is not None and row[1] == st.st_size and row[2] == st.st_mtime_ns and not row[3]:
            continue
        try:
            blob = read_blob(f.path)
        except OSError as e:
            if not isinstance(e, FileNotFoundError):
                stats.add_unreadable(f.path, e)
            continue
        with transaction(conn):
            sha = store_blob(conn, blob)
            conn.execute(
                "INSERT INTO sidecars (path, root, project, session_id, rel, sha256, size, mtime_ns, gone, "
                "refreshed_at, mode) VALUES (?,?,?,?,?,?,?,?,0,datetime('now'),?) ON CONFLICT (path) DO UPDATE SET "
                "root = excluded.root, project = excluded.project, session_id = excluded.session_id, "
                "rel = excluded.rel, sha256 = excluded.sha256, size = excluded.size, "
                "mtime_ns = excluded.mtime_ns, gone = 0, gone_at = NULL, refreshed_at = excluded.refreshed_at, "
                "mode = excluded.mode",
                (f.path, f.root, f.project, f.session_id, f.rel, sha, blob[1], st.st_mtime_ns, st.st_mode & 0o7777),
            )
        stats.sidecars += 1
    seen = {f.path for f in found}
    missing = [(p, row) for p, row in existing.items()
               if p not in seen and any(p.startswith(r.rstrip(os.sep) + os.sep) for r in roots) and _vanished(p)]
    if not missing:
        return
    with transaction(conn):
        for _path, (sid, _size, _mtime, gone) in missing:
            if prune:
                conn.execute("DELETE FROM sidecars WHERE id = ?", (sid,))
            elif not gone:
                conn.execute(f"UPDATE sidecars SET gone = 1, gone_at = {GONE_AT} WHERE id = ?", (sid,))
        if prune:
            conn.execute("DELETE FROM blobs WHERE sha256 NOT IN (SELECT sha256 FROM sidecars)")


@dataclass
class PruneReport:
    """What ``prune_gone`` deleted (or, in a dry run, would delete)."""

    dry_run: bool
    sessions: int = 0  # sessions whose archive (or part of it) goes
    files: int = 0     # file rows (transcripts) and sidecar rows
    lines: int = 0
    bytes: int = 0
    paths: list[str] = field(default_factory=list)  # the transcripts


def prune_gone(conn: sqlite3.Connection, file_ids: list[int] | None, dry_run: bool = True) -> PruneReport:
    """Delete the archive of gone files: for each session file named
    (``files.id``), its gone rows (the session file, its subagent
    transcripts, the files of its folder, their versions kept aside); with
    ``file_ids`` None, every gone row and the rows of files that are not
    sessions (an older txdb's backups). Live rows are never deleted; each
    deleted transcript is listed in ``pruned_sessions`` (restore names it).
    PruneError: a named session has nothing gone."""
    if file_ids is None:
        rows = conn.execute("SELECT id, path, kind, session_id, lines, size, gone FROM files").fetchall()
        files = [r for r in rows if r[6] or not is_session_path(r[1])]
        sidecars = conn.execute("SELECT id, size, path, rel FROM sidecars WHERE gone = 1").fetchall()
    else:
        files, sidecars = [], []
        seen: set[int] = set()
        for fid in file_ids:
            unit = units.unit_of(conn, fid)
            if unit is None:
                continue
            base = unit.session_path
            sid = unit.session_id
            stem = base[:-len(SESSION_SUFFIX)] if base.endswith(SESSION_SUFFIX) else base
            # its gone transcripts, and every gone version of its session file kept aside (of the same
            # session: another session's file put at its path is pruned by its own name)
            mine = conn.execute(
                "SELECT id, path, kind, session_id, lines, size, gone FROM files WHERE gone = 1 AND "
                "(((path = ? OR substr(path, 1, ?) = ?) AND (kind != 'session' OR ? OR session_id IS ?)) "
                "OR id IN (SELECT value FROM json_each(?)))",
                (base, len(base) + len(ARCHIVED_SUFFIX), base + ARCHIVED_SUFFIX, unit.lone, unit.own_id,
                 json.dumps([f[0] for f in unit.files]))).fetchall()
            side = conn.execute("SELECT id, size, path, rel FROM sidecars WHERE gone = 1 AND substr(path, 1, ?) = ?",
                                (len(stem) + 1, stem + "/")).fetchall() if unit.owns_folder else []
            if not mine and not side:
                # the same session gone at another path (a `restore --to` copy deleted since) is named by it
                elsewhere = [p for (p,) in conn.execute(
                    "SELECT path FROM files WHERE session_id = ? AND kind = 'session' AND gone = 1 AND path != ? "
                    "ORDER BY path LIMIT 3", (sid, base))
                    # not a copy put at another session's path: that path names the other session
                    if not units.is_anothers_path(conn, p, sid)] if sid else []
                raise PruneError(f"{sid or base} is not gone: prune deletes only the archive of files that "
                                 "vanished from disk" + (f" (a copy of it gone from {elsewhere[0]}: `txdb prune "
                                                         f"{elsewhere[0]}`)" if elsewhere else ""))
            files += [r for r in mine if r[0] not in seen]
            seen.update(r[0] for r in mine)
            sidecars += side
        sidecars = list({sc[0]: sc for sc in sidecars}.values())
    report = PruneReport(dry_run)
    # a session is counted once, by its folder, whichever of its files go
    folders = {_session_path(conn, r)[:-len(SESSION_SUFFIX)]
               for r in files if r[6] and is_session_path(archived_path_base(r[1]))}
    report.sessions = len(folders | {sc[2][:-len(sc[3]) - 1] for sc in sidecars})
    report.files = len(files) + len(sidecars)
    report.lines = sum(r[4] or 0 for r in files)
    report.bytes = sum(r[5] or 0 for r in files) + sum(sc[1] or 0 for sc in sidecars)
    report.paths = [r[1] for r in files]
    if dry_run:
        return report
    with transaction(conn):
        for fid, path, kind, sid, lines, size, gone in files:
            _delete_file(conn, fid)
            if gone:
                conn.execute("INSERT OR REPLACE INTO pruned_sessions (path, session_id, kind, lines, bytes, pruned_at) "
                             f"VALUES (?, ?, ?, ?, ?, {GONE_AT})", (archived_path_base(path), sid, kind, lines, size))
        for sc in sidecars:
            conn.execute("DELETE FROM sidecars WHERE id = ?", (sc[0],))
        conn.execute("DELETE FROM blobs WHERE sha256 NOT IN (SELECT sha256 FROM sidecars)")
    return report


def _session_path(conn: sqlite3.Connection, row: tuple) -> str:
    """The session file a transcript row (id, path, kind, ...) is part of
    (:mod:`txdb.catalog.units`; a lone transcript naming none: itself)."""
    path = archived_path_base(row[1])
    if row[2] == "session":
        return path
    parent = conn.execute("SELECT parent_session_id FROM sessions WHERE file_id = ?", (row[0],)).fetchone()
    return units.session_path_of(row[1], parent[0] if parent else None) or path


def archived_path_base(path: str) -> str:
    """The path a version kept aside was at (else the path itself)."""
    return archived_from(path) or path


def _delete_file(conn, file_id: int) -> None:
    _delete_file_rows(conn, file_id)
    conn.execute("DELETE FROM files WHERE id = ?", (file_id,))


def _vanished(path: str) -> bool:
    """Gone from disk. A file that cannot be looked at (a folder on the way
    cannot be searched) is not known to be gone: its rows stay."""
    try:
        os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return True
    except OSError:
        return False
    return False


def _follow_links(conn, found: list[Found], existing: dict[str, tuple]) -> None:
    """One row per real file: a path discovery found that the catalog lacks,
    but whose file the catalog has under another path (the link's target
    given to a command, the link before its target was found, ...), takes
    over that row; the row keeps the path discovery found, so its project
    folder is the one the session lives in."""
    new = [f for f in found if f.path not in existing]
    if not new:
        return
    by_inode: dict[int, list[str]] = {}
    for path, row in existing.items():
        if row[3] is not None:
            by_inode.setdefault(row[3], []).append(path)
    found_paths = {f.path for f in found}
    for f in new:
        real = os.path.realpath(f.path)
        candidates = [real] if real != f.path and real in existing else []
        candidates += by_inode.get(f.stat.st_ino, ())
        for old in candidates:
            if old in found_paths or not same_file(old, f.stat):
                continue
            file_id = existing[old][0]
            with transaction(conn):
                conn.execute("UPDATE files SET path = ?, root = ?, project = ?, kind = ? WHERE id = ?",
                             (f.path, f.root, f.project, f.kind, file_id))
                conn.execute("UPDATE sessions SET project = ? WHERE file_id = ?", (f.project, file_id))
            existing[f.path] = existing.pop(old)
            break


def _refresh_found(conn, found, existing, stats, progress, index_text) -> None:
    total = sum(f.stat.st_size for f in found)
    done = 0
    plans: list[Plan] = []
    for f in found:
        try:
            plan = plan_file(conn, f, existing.get(f.path))
        except FileNotFoundError:
            continue  # vanished since discovery
        except OSError as e:
            stats.add_unreadable(f.path, e)
            continue
        if plan.status == "unchanged":
            stats.unchanged += 1
            done += f.stat.st_size
        else:
            plans.append(plan)
    if progress and done:
        progress(done, total)
    if not plans:
        return
    cache = conn.execute("PRAGMA cache_size").fetchone()[0]
    smaller = _cache_kib(conn, cache) > REFRESH_CACHE_KIB
    if smaller:
        conn.execute(f"PRAGMA cache_size = -{REFRESH_CACHE_KIB}")
    batch = _Batch(conn, index_text)
    try:
        for plan in plans:
            batch.begin()
            conn.execute("SAVEPOINT txdb_file")
            try:
                written = _ingest(conn, plan, stats, index_text)
            except sqlite3.Error:
                raise  # the catalog failed, not the file: the batch rolls back, the next refresh redoes it
            except Exception as e:
                conn.execute("ROLLBACK TO txdb_file")  # this file only: nothing in one file stops the others
                conn.execute("RELEASE txdb_file")
                if not isinstance(e, FileNotFoundError):  # else it vanished between discovery and read
                    stats.add_unreadable(plan.found.path, e)
                continue
            conn.execute("RELEASE txdb_file")
            batch.wrote(written, plan.found.stat.st_size)
            done += plan.found.stat.st_size
            if progress:
                progress(done, total)
        batch.commit()
    finally:
        batch.abandon()  # an error or an interrupt: the open batch goes whole
        if smaller:
            conn.execute(f"PRAGMA cache_size = {int(cache)}")


class _Batch:
    """Files written in one transaction, each inside its own savepoint (a
    file that fails rolls back alone), committed every ``BATCH_BYTES`` read
    or ``BATCH_SECONDS``: a commit per file cost a fifth of adding files.
    A file's rows and its cursor are in the same batch, so a refresh killed
    mid-batch leaves those files as the catalog had them, and the next one
    reads them again. The full-text index of a batch's new blocks is one
    statement at its commit (FTS5 writes a segment per statement)."""

    def __init__(self, conn: sqlite3.Connection, index_text: bool):
        self.conn, self.index_text = conn, index_text
        self.open = False
        self.fts: list[tuple[int, int]] = []
        self.bytes = self.files = 0
        self.t0 = 0.0

    def begin(self) -> None:
        if not self.open:
            self.conn.execute("BEGIN IMMEDIATE")
            self.open, self.bytes, self.files, self.t0 = True, 0, 0, time.monotonic()

    def wrote(self, written: tuple[int, int] | None, size: int) -> None:
        if written is not None and self.index_text:
            self.fts.append(written)
        self.bytes += size
        self.files += 1
        if self.bytes >= BATCH_BYTES or self.files >= BATCH_FILES or time.monotonic() - self.t0 >= BATCH_SECONDS:
            self.commit()

    def commit(self) -> None:
        if not self.open:
            return
        for i in range(0, len(self.fts), BATCH_FILES):
            part = self.fts[i:i + BATCH_FILES]
            values = ",".join("(?,?)" for _ in part)
            self.conn.execute(
                f"WITH t(file_id, start) AS (VALUES {values}) INSERT INTO blocks_fts (rowid, text) "
                f"SELECT b.rowid, {WHOLE_TEXT.format('b')} FROM t JOIN blocks b "
                "ON b.file_id = t.file_id AND b.offset >= t.start WHERE b.text IS NOT NULL AND b.text <> ''",
                [v for pair in part for v in pair])
        self.fts = []
        self.conn.execute("COMMIT")
        self.open = False

    def abandon(self) -> None:
        """After an error: what the open batch wrote goes (the next refresh redoes it)."""
        if self.open:
            self.open = False
            self.fts = []
            self.conn.execute("ROLLBACK")


def refresh_path(conn: sqlite3.Connection, path: str | Path, root: str | None = None,
                 sidecars: bool = True) -> str:
    """Refresh one file (given by path) and return its status. A file the
    catalog has under another path (a symlink) is refreshed under that path.
    With ``sidecars`` and a known root, the files of its session's folder
    too (``refresh_sidecars``)."""
    given = Path(path).expanduser().absolute()
    st = given.stat()
    p = Path(catalogued_path(conn, given, st) or _discovered_as(given, root))
    if root is None:
        row = conn.execute("SELECT root FROM files WHERE path = ?", (str(p),)).fetchone()
        root = row[0] if row else None
    project, kind, parent = classify(p, Path(root) if root else None)
    found = Found(str(p), root or str(p.parent.parent), project, kind, parent, st)
    plan = plan_file(conn, found, _existing_one(conn, str(p)))
    stats = RefreshStats()
    ingest_file(conn, plan, stats)
    if sidecars and root is not None:
        found_sidecars = session_sidecars(root, p)
        refresh_sidecars(conn, found_sidecars, [str(session_folder(p))], False, stats)
    sync_prices(conn)
    return plan.status


def _discovered_as(given: Path, root: str | None) -> Path:
    """The path discovery would catalogue a file under: a link the walk of
    ``root`` reaches under its own path (its target outside the tree), else
    the real path (a link beside its target: the target wins)."""
    real = given.resolve()
    if root is not None and real != given and reached(given, root) and not reached(real, root):
        return given
    return real


def _existing_one(conn, path: str):
    row = conn.execute(
        "SELECT id, size, mtime_ns, inode, head_sha, tail_sha, cursor, lines, gone FROM files WHERE path = ?",
        (path,),
    ).fetchone()
    return tuple(row) if row else None


def journalled_sessions(conn: sqlite3.Connection) -> list[Path]:
    """The catalogued session files with a swap journal beside them (one stat
    each): what ``surgery.log.catch_up_journals`` looks at after a refresh,
    asked here so that ``txdb refresh`` loads the surgery code only when
    there is one."""
    rows = conn.execute("SELECT path FROM files WHERE gone = 0 AND kind = 'session'").fetchall()
    # Anything at the name (a FIFO, a folder too): catch-up names what it cannot read.
    return [Path(p) for (p,) in rows if os.path.lexists(swaps_of(p))]

