"""The records' raw lines, stored compressed in chunks (table ``raw_chunks``).

A record's raw JSON is kept only to be given back (restore, the secrets
scan, ``txdb_json()`` in ad-hoc SQL), so it is not a column of ``records``:
consecutive records of a file are packed into one chunk of about
``CHUNK_BYTES`` raw bytes, a zstd frame of a header (per record, its offset after
the chunk's first and its length, little-endian uint32 pairs) followed by
the records' bytes in offset order. Any record is reached by inflating one
chunk; a file read from its start compresses close to its whole-file ratio.
A growing file's last chunk is rewritten (under a new id) until it fills,
so appending never recompresses more than one chunk.

Every reader of raw lines goes through :func:`raw_lines` (a file's, in
order; :func:`raw_views` the same a chunk at a time) or :func:`raw_at` (some records' of one file); SQL through
``txdb_json`` (a record's) and ``txdb_text`` (a block's whole text).
"""

from __future__ import annotations

import sqlite3
import sys
from array import array
from bisect import bisect_left, bisect_right
from collections import OrderedDict
from itertools import accumulate
from typing import Iterable, Iterator

# Raw bytes per chunk. On the real corpus (30.6 MB) 1 MB chunks store 0.210x
# of the raw bytes where 128 KB ones stored 0.243x, for no more CPU; a
# record costs ~1 ms to reach, an append recompresses at most one chunk.
CHUNK_BYTES = 1 << 20
# zstd level: 3. At 1 MB chunks 6 stores 0.201x for 3x the CPU, 9 0.199x
# for 5x; zlib -6 stored 0.21x of 128 KB chunks for 25x.
LEVEL = 3
_MAX_DELTA = 0xFFFFFFFF  # a record's offset after its chunk's first must fit the header's uint32
_LITTLE = sys.byteorder == "little"

_INSERT = ("INSERT INTO raw_chunks (file_id, first_offset, last_offset, lines, bytes, data) "
           "VALUES (?, ?, ?, ?, ?, ?)")
_CHUNK_AT = ("SELECT id, first_offset, lines, data FROM raw_chunks WHERE file_id = ? AND first_offset <= ? "
             "ORDER BY first_offset DESC LIMIT 1")


def _bytes(raw) -> bytes:
    return raw if isinstance(raw, bytes) else str(raw).encode("utf-8", "surrogatepass")


def encode(records: list[tuple[int, bytes]]) -> bytes:
    """The ``data`` of a chunk holding ``(offset, raw)`` records, in offset order."""
    first = records[0][0]
    head = array("I")
    for offset, raw in records:
        head.append(offset - first)
        head.append(len(raw))
    if not _LITTLE:
        head.byteswap()
    import zstandard  # here: importing it is a tenth of a start-up that reads no raw line

    return zstandard.ZstdCompressor(level=LEVEL).compress(head.tobytes() + b"".join(raw for _, raw in records))


def decode(first_offset: int, lines: int, data: bytes) -> list[tuple[int, bytes]]:
    """The ``(offset, raw)`` records of a chunk, in offset order."""
    import zstandard

    buf = zstandard.ZstdDecompressor().decompress(data)  # the frame holds its size: a chunk we wrote
    head = array("I")
    head.frombytes(buf[:8 * lines])
    if not _LITTLE:
        head.byteswap()
    out = []
    at = 8 * lines
    for i in range(0, 2 * lines, 2):
        n = head[i + 1]
        out.append((first_offset + head[i], buf[at:at + n]))
        at += n
    return out


class ChunkWriter:
    """Packs one file's records, given in offset order, into chunks; inside
    the file's transaction. ``start_offset`` > 0 (a grown file): chunks
    from there on are dropped and the last chunk, if not full, is taken up
    again and replaced when ``close`` writes it."""

    def __init__(self, conn: sqlite3.Connection, file_id: int, start_offset: int = 0):
        self.conn = conn
        self.file_id = file_id
        self.pending: list[tuple[int, bytes]] = []
        self.size = 0
        self.replaces: int | None = None  # id of the chunk the pending records rewrite
        self.dirty = False  # whether the pending records differ from that chunk's
        if start_offset > 0:
            self._resume(start_offset)

    def _resume(self, start_offset: int) -> None:
        c = self.conn
        c.execute("DELETE FROM raw_chunks WHERE file_id = ? AND first_offset >= ?", (self.file_id, start_offset))
        row = c.execute(_CHUNK_AT, (self.file_id, start_offset)).fetchone()
        if row is None:
            return
        cid, first, lines, data = row
        records = decode(first, lines, data)
        kept = [r for r in records if r[0] < start_offset]
        size = sum(len(r[1]) for r in kept)
        if size < CHUNK_BYTES:
            self.pending, self.size, self.replaces = kept, size, cid
            self.dirty = len(kept) < len(records)
        elif len(kept) < len(records):  # full, but holding records past the cursor: rewritten without them
            c.execute("DELETE FROM raw_chunks WHERE id = ?", (cid,))
            self.pending, self.size = kept, size
            self._write()

    def add(self, offset: int, raw) -> None:
        raw = _bytes(raw)
        if self.pending and offset - self.pending[0][0] > _MAX_DELTA:
            self._write()
        self.pending.append((offset, raw))
        self.dirty = True
        self.size += len(raw)
        if self.size >= CHUNK_BYTES:
            self._write()

    def _write(self) -> None:
        if self.replaces is not None:
            self.conn.execute("DELETE FROM raw_chunks WHERE id = ?", (self.replaces,))
            self.replaces = None
        if self.pending:
            p = self.pending
            self.conn.execute(_INSERT, (self.file_id, p[0][0], p[-1][0], len(p), self.size, encode(p)))
        self.pending, self.size = [], 0

    def close(self) -> None:
        """Write the last chunk (unchanged when nothing was added to it)."""
        if self.dirty:
            self._write()


def raw_lines(conn: sqlite3.Connection, file_id: int, start_offset: int = 0) -> Iterator[tuple[int, bytes]]:
    """``(offset, raw bytes)`` of every record of a catalogued file from
    ``start_offset`` on, in offset order: the one way to read a file's raw
    lines (restore rebuilds a file from them). One chunk in memory at a time."""
    rows = conn.execute("SELECT first_offset, lines, data FROM raw_chunks WHERE file_id = ? AND last_offset >= ? "
                        "ORDER BY first_offset", (file_id, start_offset))
    for first, lines, data in rows:
        for offset, raw in decode(first, lines, data):
            if offset >= start_offset:
                yield offset, raw


def raw_views(conn: sqlite3.Connection, file_id: int, start_offset: int = 0) -> Iterator[list[tuple[int, memoryview]]]:
    """``raw_lines`` a chunk at a time: for each chunk, in offset order, the
    ``(offset, raw)`` of its records from ``start_offset`` on, each raw a
    view of the inflated chunk (no copy; valid while the list is held). For
    a reader that joins the bytes again (restore): a call per chunk, not
    per record."""
    import zstandard

    inflate = zstandard.ZstdDecompressor().decompress
    rows = conn.execute("SELECT first_offset, lines, data FROM raw_chunks WHERE file_id = ? AND last_offset >= ? "
                        "ORDER BY first_offset", (file_id, start_offset))
    for first, lines, data in rows:
        buf = inflate(data)
        head = array("I")
        head.frombytes(buf[:8 * lines])
        if not _LITTLE:
            head.byteswap()
        lengths = head[1::2]
        view = memoryview(buf)
        starts = accumulate(lengths, initial=8 * lines)
        out = [(first + d, view[s:s + n]) for d, n, s in zip(head[0::2], lengths, starts)]
        if start_offset > first:
            out = [r for r in out if r[0] >= start_offset]
        yield out


def raw_at(conn: sqlite3.Connection, file_id: int, offsets: Iterable[int]) -> dict[int, bytes]:
    """The raw bytes of the records of one file at ``offsets`` (those
    catalogued), each chunk read and inflated once, one at a time."""
    want = sorted(set(offsets))
    if not want:
        return {}
    heads = conn.execute("SELECT id, first_offset, lines FROM raw_chunks WHERE file_id = ? AND last_offset >= ? "
                         "AND first_offset <= ? ORDER BY first_offset", (file_id, want[0], want[-1])).fetchall()
    firsts = [h[1] for h in heads]
    out: dict[int, bytes] = {}
    cid, chunk = None, None
    for offset in want:
        i = bisect_right(firsts, offset) - 1
        if i < 0:
            continue
        if heads[i][0] != cid:
            cid = heads[i][0]
            data, = conn.execute("SELECT data FROM raw_chunks WHERE id = ?", (cid,)).fetchone()
            chunk = _Unpacked(heads[i][1], heads[i][2], data)
        raw = chunk.get(offset) if chunk is not None else None
        if raw is not None:
            out[offset] = raw
    return out


def raw_line(conn: sqlite3.Connection, file_id: int, offset: int) -> bytes | None:
    """The raw bytes of the record at ``(file_id, offset)``, or None."""
    return raw_at(conn, file_id, (offset,)).get(offset)


class _Unpacked:
    """A decoded chunk, its records sliced out only when asked for."""

    __slots__ = ("first", "deltas", "lengths", "buf", "starts")

    def __init__(self, first_offset: int, lines: int, data: bytes):
        import zstandard

        buf = zstandard.ZstdDecompressor().decompress(data)
        head = array("I")
        head.frombytes(buf[:8 * lines])
        if not _LITTLE:
            head.byteswap()
        self.first, self.deltas, self.lengths = first_offset, head[0::2], head[1::2]
        # where each record starts in buf: a 1 MB chunk holds thousands of small records
        self.buf, self.starts = buf, list(accumulate(self.lengths[:-1], initial=8 * lines))

    def get(self, offset: int) -> bytes | None:
        delta = offset - self.first
        i = bisect_left(self.deltas, delta)
        if i == len(self.deltas) or self.deltas[i] != delta:
            return None
        at = self.starts[i]
        return self.buf[at:at + self.lengths[i]]


def _record_reader(conn: sqlite3.Connection, cached: int):
    """``record(file_id, offset)``: a record's raw bytes (None for no such
    record), the last ``cached`` chunks kept decoded, by id (a chunk's
    contents never change under its id)."""
    cache: OrderedDict[int, _Unpacked] = OrderedDict()

    def record(file_id, offset) -> bytes | None:
        if file_id is None or offset is None:
            return None
        head = conn.execute("SELECT id, first_offset, lines FROM raw_chunks WHERE file_id = ? AND first_offset <= ? "
                            "ORDER BY first_offset DESC LIMIT 1", (file_id, offset)).fetchone()
        if head is None:
            return None
        cid = head[0]
        chunk = cache.get(cid)
        if chunk is None:
            data, = conn.execute("SELECT data FROM raw_chunks WHERE id = ?", (cid,)).fetchone()
            chunk = cache[cid] = _Unpacked(head[1], head[2], data)
            while len(cache) > cached:
                cache.popitem(last=False)
        else:
            cache.move_to_end(cid)
        return chunk.get(offset)

    return record


# Decoded chunks a SQL function keeps: readers go in offset order (the
# full-text build, a page's rows), and each 1 MB kept added 1 MB to a build's peak.
CACHED_CHUNKS = 1


def json_function(conn: sqlite3.Connection, cached: int = CACHED_CHUNKS):
    """The SQL function ``txdb_json(file_id, offset)``: a record's raw JSON
    as text (NULL for no such record), for ad-hoc queries of ``txdb query``
    and Datasette; no view calls it."""
    record = _record_reader(conn, cached)

    def txdb_json(file_id, offset):
        raw = record(file_id, offset)
        return None if raw is None else raw.decode("utf-8", "replace")

    return txdb_json


# A block's whole text in SQL over blocks aliased {0}: blocks.text, or a cut
# block's decoded (txdb_text, on a connection that has it).
WHOLE_TEXT = ("CASE WHEN {0}.cut = 1 THEN coalesce(txdb_text({0}.file_id, {0}.offset, {0}.idx), {0}.text) "
              "ELSE {0}.text END")


def text_function(conn: sqlite3.Connection, cached: int = CACHED_CHUNKS):
    """The SQL function ``txdb_text(file_id, offset, idx)``: a block's whole
    text, derived again from its record's raw JSON (NULL for no such block):
    what ``blocks.text`` holds only the start of when ``blocks.cut`` is 1
    (``WHOLE_TEXT`` reads it so); no view calls it."""
    record = _record_reader(conn, cached)

    def txdb_text(file_id, offset, idx):
        raw = record(file_id, offset)
        if raw is None or idx is None:
            return None
        from txdb.catalog.ingest.rows import block_text  # here: `txdb query` imports no ingest module

        try:
            return block_text(raw, int(idx))
        except (ValueError, TypeError, RecursionError):  # not one JSON object: no block of it
            return None

    return txdb_text


def repack(conn: sqlite3.Connection) -> int:
    """Migration 040's Python step: each file whose chunks are smaller than
    ``CHUNK_BYTES`` (128 KB ones, written before it) packed again into
    chunks of that size, under new ids; the bytes are unchanged. One file's
    compressed chunks and one decoded chunk in memory at a time. Returns
    how many files it repacked."""
    todo = [fid for fid, n, raw in conn.execute(
        "SELECT file_id, count(*), sum(bytes) FROM raw_chunks GROUP BY file_id HAVING count(*) > 1").fetchall()
        if n > raw // CHUNK_BYTES + 1]
    for fid in todo:
        old = conn.execute("SELECT first_offset, lines, data FROM raw_chunks WHERE file_id = ? ORDER BY first_offset",
                           (fid,)).fetchall()
        conn.execute("DELETE FROM raw_chunks WHERE file_id = ?", (fid,))  # first: the new first chunk has the same key
        writer = ChunkWriter(conn, fid)
        for first, lines, data in old:
            for offset, raw in decode(first, lines, data):
                writer.add(offset, raw)
        writer.close()
    return len(todo)


def upgrade(conn: sqlite3.Connection) -> None:
    """Migration 035's Python step: the raw lines of ``_records_legacy``
    (the records table as it was) packed into chunks file by file, then
    that table dropped. Runs inside the migration's transaction."""
    writer: ChunkWriter | None = None
    for file_id, offset, raw in conn.execute(
            "SELECT file_id, offset, CAST(raw AS BLOB) FROM _records_legacy ORDER BY file_id, offset"):
        if writer is None or writer.file_id != file_id:
            if writer is not None:
                writer.close()
            writer = ChunkWriter(conn, file_id)
        writer.add(offset, raw if raw is not None else b"")
    if writer is not None:
        writer.close()
    conn.execute("DROP TABLE _records_legacy")
