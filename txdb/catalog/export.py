"""Export the catalog's tables as Parquet, partitioned by project and month
(`txdb export DIR --format parquet`), for DuckDB, Spark, Trino or BigQuery
over many machines' exports.

Layout (Hive-style partitions, one file per partition)::

    DIR/_txdb_export.json                      what was exported, row counts
    DIR/<table>/project=<p>/month=<YYYY-MM>/part-0.parquet
                                               (part-1, ...: two projects
                                               whose names --redact made one)

``project`` is the project folder (percent-encoded in the folder name) and
``month`` the month of the row's record (a record without a timestamp, a
file or a session: the session's first timestamp); a NULL value is the
folder ``__HIVE_DEFAULT_PARTITION__``. Every row also carries both columns
itself, so a file read on its own says where it belongs. The rows of a
record (its blocks, attachments, usage, chain position) share its
partition, so joins stay within one.

Everything is read in one snapshot of the catalog and streamed file by file
in batches; the export is written into a temporary folder beside DIR (made
by ``tempfile.mkdtemp``: a random name, created exclusively) and
renamed into place at the end, so DIR never holds half an export. Files are
private (0600, folders 0700): they hold transcripts.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable
from urllib.parse import quote

import orjson

from txdb.catalog import db, secrets
from txdb.catalog.ingest.chunks import json_function
from txdb.errors import ExportError

MARKER = "_txdb_export.json"
NULL_PARTITION = "__HIVE_DEFAULT_PARTITION__"
# Buffered rows are written out (a row group) once they hold this many
# bytes of values, or this many rows: memory stays bounded by one batch.
BATCH_BYTES = 8 << 20
BATCH_ROWS = 50_000

MONTH_OF = "CASE WHEN substr({0}, 1, 7) GLOB '[0-9][0-9][0-9][0-9]-[0-9][0-9]' THEN substr({0}, 1, 7) END"

# Each table's rows of one file, with the month of its partition (``:month``
# is the file's own month, for rows without a timestamp of their own).
PER_FILE = {
    "files": "SELECT t.*, :month AS month FROM files t WHERE t.id = :fid",
    "sessions": "SELECT t.*, :month AS month FROM sessions t WHERE t.file_id = :fid",
    "records": f"SELECT t.*, txdb_json(t.file_id, t.offset) AS raw, "
               f"coalesce({MONTH_OF.format('t.timestamp')}, :month) AS month "
               "FROM records t WHERE t.file_id = :fid ORDER BY t.offset",
    "blocks": f"SELECT t.*, coalesce({MONTH_OF.format('r.timestamp')}, :month) AS month FROM blocks t "
              "LEFT JOIN records r ON r.file_id = t.file_id AND r.offset = t.offset "
              "WHERE t.file_id = :fid ORDER BY t.offset, t.idx",
    "attachments": f"SELECT t.*, coalesce({MONTH_OF.format('r.timestamp')}, :month) AS month FROM attachments t "
                   "LEFT JOIN records r ON r.file_id = t.file_id AND r.offset = t.offset "
                   "WHERE t.file_id = :fid ORDER BY t.offset",
    "usage": "SELECT t.*, (SELECT c.cost_usd FROM billed_cost c WHERE c.file_id = t.file_id "
             "AND c.message_id = t.message_id) AS cost_usd, "
             f"coalesce({MONTH_OF.format('r.timestamp')}, {MONTH_OF.format('t.timestamp')}, :month) "
             "AS month FROM usage t LEFT JOIN records r ON r.file_id = t.file_id AND r.offset = t.offset "
             "WHERE t.file_id = :fid ORDER BY t.offset",
    "chain": f"SELECT t.*, coalesce({MONTH_OF.format('r.timestamp')}, :month) AS month FROM chain t "
             "LEFT JOIN records r ON r.file_id = t.file_id AND r.offset = t.offset "
             "WHERE t.file_id = :fid ORDER BY t.pos",
}
# The surgeries log is small, and may name files the catalog no longer has.
SURGERIES = (f"SELECT t.*, f.project AS project, {MONTH_OF.format('t.at')} AS month FROM surgeries t "
             "LEFT JOIN files f ON f.id = t.file_id ORDER BY project, month, t.id")
TABLES = (*PER_FILE, "surgeries")
# A column that holds the start of a longer text (a session titled by its
# first prompt): --redact also masks a secret cut off at its end.
TRUNCATED = {"sessions": "title"}
# Columns an export adds to a table's own: usage.cost_usd is the message's
# cost in USD (the billed_cost view) on the row that counts it, NULL on a
# row another file's copy of the message stands for, or when unpriced.
# Columns a table's rows are exported with besides its own: a record's raw
# JSON (inflated from raw_chunks), a message's cost.
EXTRA_COLUMNS = {"records": [("raw", "TEXT")], "usage": [("cost_usd", "REAL")]}


@dataclass
class ExportReport:
    path: str
    tables: dict[str, int] = field(default_factory=dict)  # rows written per table
    files: int = 0  # Parquet files written
    bytes: int = 0
    seconds: float = 0.0
    redacted: bool = False  # secrets masked (--redact)

    def summary(self) -> str:
        rows = ", ".join(f"{n:,} {t}" for t, n in self.tables.items())
        return (f"Exported {rows} to {self.path} ({'secrets redacted; ' if self.redacted else ''}"
                f"{self.files} Parquet files, "
                f"{self.bytes / 1e6:.1f} MB in {self.seconds:.2f}s)")


def _pyarrow():
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError:
        raise ExportError("Parquet export needs pyarrow: pip install 'txdb[parquet]' "
                          "(from a clone: pip install -e '.[parquet]')") from None
    return pyarrow, pyarrow.parquet


def partition_name(value: str | None) -> str:
    """A partition value as a folder name: percent-encoded (no separator,
    no ``..``), NULL as Hive's default partition."""
    if value is None:
        return NULL_PARTITION
    encoded = quote(value, safe="-_.~")
    if encoded in ("", ".", ".."):
        encoded = "".join(f"%{b:02X}" for b in value.encode()) or "%00"
    return encoded


def _arrow_type(pa, declared: str):
    declared = (declared or "").upper()
    if "INT" in declared:
        return pa.int64()
    if any(k in declared for k in ("REAL", "FLOA", "DOUB")):
        return pa.float64()
    if "BLOB" in declared:
        return pa.binary()
    return pa.string()


class _Partitions:
    """Open writers and buffered rows of one table, by (project, month)."""

    def __init__(self, pa, pq, out: Path, table: str, schema, report: ExportReport):
        self.pa, self.pq, self.out, self.table, self.schema, self.report = pa, pq, out, table, schema, report
        self.writers: dict[tuple, object] = {}
        self.buffers: dict[tuple, list[tuple]] = {}
        self.buffered_bytes = 0
        self.buffered_rows = 0

    def add(self, key: tuple, row: tuple) -> None:
        self.buffers.setdefault(key, []).append(row)
        self.buffered_rows += 1
        self.buffered_bytes += sum(len(v) for v in row if isinstance(v, (str, bytes)))
        if self.buffered_bytes >= BATCH_BYTES or self.buffered_rows >= BATCH_ROWS:
            self.flush()

    def flush(self) -> None:
        for key, rows in self.buffers.items():
            columns = list(zip(*rows))
            batch = self.pa.record_batch(
                [self.pa.array(col, type=f.type) for col, f in zip(columns, self.schema)], schema=self.schema)
            # write_table ends a row group per call (write_batch would keep
            # adding to one open row group, held in memory until the file closes).
            self._writer(key).write_table(self.pa.Table.from_batches([batch]))
            self.report.tables[self.table] += len(rows)
        self.buffers.clear()
        self.buffered_bytes = self.buffered_rows = 0

    def _writer(self, key: tuple):
        w = self.writers.get(key)
        if w is None:
            folder = self.out / self.table
            _private_dir(folder)
            for name, value in zip(("project", "month"), key):
                folder = folder / f"{name}={partition_name(value)}"
                _private_dir(folder)
            fh, path = _new_part(folder)
            w = self.writers[key] = (self.pq.ParquetWriter(fh, self.schema, compression="zstd"), fh, path)
        return w[0]

    def close(self) -> None:
        """Write what is buffered and close every file (at the end of a project)."""
        self.flush()
        for writer, fh, path in self.writers.values():
            writer.close()
            fh.close()
            self.report.files += 1
            self.report.bytes += path.stat().st_size
        self.writers.clear()


def _new_part(folder: Path):
    """A new part file in ``folder``: part-0, or the next free number when
    an earlier project wrote there (two project names that read the same
    once redacted)."""
    n = 0
    while True:
        path = folder / f"part-{n}.parquet"
        try:
            return os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb"), path
        except FileExistsError:
            n += 1


def _private_dir(path: Path) -> None:
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        return
    os.chmod(path, 0o700)  # whatever the umask


def _check_target(out: Path, replace: bool) -> None:
    if not out.exists() and not out.is_symlink():
        return
    if out.is_symlink():
        raise ExportError(f"{out} is a symbolic link: name the folder itself")
    if not out.is_dir():
        raise ExportError(f"{out} exists and is not a folder: name another")
    if not any(out.iterdir()):
        return
    if not (out / MARKER).is_file():
        raise ExportError(f"{out} is not empty and holds no txdb export: name another folder")
    if not replace:
        raise ExportError(f"{out} holds an earlier export: add --replace to replace it")


def export_parquet(catalog: str | Path, out: str | Path, replace: bool = False,
                   progress: Callable[[int, int], None] | None = None, redact: bool = False) -> ExportReport:
    """Write the catalog's tables under ``out`` as partitioned Parquet.

    ``replace``: an earlier txdb export at ``out`` is replaced (only once
    the new one is whole). ``redact``: the catalog's text no scan has read
    yet is scanned first (txdb.catalog.secrets.scan_catalog; text a refresh added
    since is scanned by the redactor, in the export's snapshot), then every
    secret found in a file is masked as ``[REDACTED:<type>]`` in every text
    of that file's rows (raw JSON, block text, title, path, project and its
    partition folder) and of its surgeries; the rows themselves are not
    changed. ``progress(files_done, files_total)``.
    """
    pa, pq = _pyarrow()
    t0 = time.perf_counter()
    out = Path(out).expanduser().absolute()
    conn = db.connect(catalog, create=False)  # migrated, as every command reads it
    try:
        if redact:
            secrets.scan_catalog(conn)
    finally:
        conn.close()
    _check_target(out, replace)
    ro = sqlite3.connect(Path(catalog).resolve().as_uri() + "?mode=ro", uri=True)
    ro.create_function("txdb_json", 2, json_function(ro))
    out.parent.mkdir(parents=True, exist_ok=True)
    # Made unpredictably and exclusively (0700): a link planted beside DIR is
    # never written through, and never renamed into DIR's place.
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.exporting-", dir=out.parent))
    report = ExportReport(str(out), {t: 0 for t in TABLES}, redacted=redact)
    try:
        ro.execute("PRAGMA busy_timeout = 10000")
        ro.execute("BEGIN")  # one snapshot: a watcher writing meanwhile is not half seen
        parts = {t: _Partitions(pa, pq, tmp, t, _schema(pa, ro, t), report) for t in TABLES}
        files = ro.execute(
            f"SELECT f.id, f.project, {MONTH_OF.format('s.first_timestamp')} FROM files f "
            "LEFT JOIN sessions s ON s.file_id = f.id ORDER BY f.project, f.id").fetchall()
        current = object()
        for done, (fid, project, month) in enumerate(files, 1):
            if project != current:
                for t in PER_FILE:
                    parts[t].close()
                current = project
            mask = (secrets.redactor(ro, fid) or secrets.Redactor({})) if redact else None
            for t, sql in PER_FILE.items():
                _stream(ro.execute(sql, {"fid": fid, "month": month}), parts[t], project, mask, TRUNCATED.get(t))
            if progress:
                progress(done, len(files))
        for t in PER_FILE:
            parts[t].close()
        file_col = [d[0] for d in ro.execute(SURGERIES).description].index("file_id")
        masks: dict[int, secrets.Redactor | None] = {}
        for row in ro.execute(SURGERIES):
            if redact:  # with its file's secrets masked (a file the catalog lost has none)
                fid = row[file_col]
                if fid not in masks:
                    masks[fid] = secrets.redactor(ro, fid) if fid is not None else None
                if masks[fid] is not None:
                    row = tuple(masks[fid](v) if isinstance(v, str) else v for v in row)
            parts["surgeries"].add((row[-2], row[-1]), row)
        parts["surgeries"].close()
        ro.execute("COMMIT")
        _write_marker(tmp, report)
        _publish(tmp, out)
    finally:
        ro.close()
        shutil.rmtree(tmp, ignore_errors=True)
    report.seconds = time.perf_counter() - t0
    return report


def _schema(pa, conn, table: str):
    cols = conn.execute(f"SELECT name, type FROM pragma_table_info('{table}')").fetchall()
    cols += EXTRA_COLUMNS.get(table, [])
    fields = [pa.field(name, _arrow_type(pa, declared)) for name, declared in cols
              if name not in ("project", "month")]
    return pa.schema(fields + [pa.field("project", pa.string()), pa.field("month", pa.string())])


def _stream(cur: sqlite3.Cursor, parts: _Partitions, project: str | None,
            mask: secrets.Redactor | None = None, truncated: str | None = None) -> None:
    """Rows of one file's query into their partitions: the table's own
    columns (a table's own ``project`` is the file's), then project, month;
    each text through ``mask`` when given (--redact), the ``truncated``
    column through ``mask.truncated``."""
    names = [d[0] for d in cur.description]
    own = [i for i, n in enumerate(names[:-1]) if n != "project"]
    cut = [names[i] for i in own].index(truncated) if truncated in names else -1
    if mask is not None and project is not None:
        project = mask(project)  # its partition's folder name too
    while rows := cur.fetchmany(1000):
        for row in rows:
            month = row[-1]
            values = tuple(row[i] for i in own)
            if mask is None:
                pass
            elif mask.pattern is not None:
                # A blob is left out (files.sha_state: a hash's state, which
                # holds the file's last bytes as they are).
                values = tuple((mask.truncated(v) if i == cut else mask(v)) if isinstance(v, str)
                               else None if isinstance(v, bytes) else v for i, v in enumerate(values))
            elif bytes in map(type, values):  # no secret to mask: only a blob to leave out
                values = tuple(None if isinstance(v, bytes) else v for v in values)
            parts.add((project, month), values + (project, month))


def _write_marker(tmp: Path, report: ExportReport) -> None:
    from importlib.metadata import version

    data = {"format": "parquet", "partitioning": ["project", "month"], "txdb": version("txdb"),
            "exported_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "rows": report.tables,
            "redacted": report.redacted}
    fd = os.open(tmp / MARKER, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(orjson.dumps(data, option=orjson.OPT_INDENT_2))


def _publish(tmp: Path, out: Path) -> None:
    """Rename the finished export into place; an earlier one goes only then."""
    old = None
    if out.exists():
        # An empty folder of our own, which the rename replaces.
        old = Path(tempfile.mkdtemp(prefix=f".{out.name}.replaced-", dir=out.parent))
        try:
            os.rename(out, old)
        except OSError:
            os.rmdir(old)
            raise
    os.rename(tmp, out)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
