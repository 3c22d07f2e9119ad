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

import hashlib
import os
import re
import shutil
import sqlite3
import stat
import tempfile
import time
from dataclasses import dataclass, field
from operator import itemgetter
from pathlib import Path
from typing import Callable, Iterable, Iterator
from urllib.parse import quote

import orjson

from txdb.catalog import db, secrets
from txdb.catalog.ingest.chunks import WHOLE_TEXT, raw_lines, text_function
from txdb.catalog.ingest.store import BLOCK_COLUMNS
from txdb.errors import ExportError

MARKER = "_txdb_export.json"
NULL_PARTITION = "__HIVE_DEFAULT_PARTITION__"
# Buffered rows are written out (a row group) once they hold this many
# bytes of values, or this many rows: memory stays bounded by one batch.
BATCH_BYTES = 8 << 20
BATCH_ROWS = 50_000
_SIZED = (str, bytes)  # the values a batch's size counts (sqlite3 gives these types exactly)

MONTH_OF = "CASE WHEN substr({0}, 1, 7) GLOB '[0-9][0-9][0-9][0-9]-[0-9][0-9]' THEN substr({0}, 1, 7) END"

# Each table's rows of one file, with the month of its partition (``:month``
# is the file's own month, for rows without a timestamp of their own).
PER_FILE = {
    "files": "SELECT t.*, :month AS month FROM files t WHERE t.id = :fid",
    "sessions": "SELECT t.*, :month AS month FROM sessions t WHERE t.file_id = :fid",
    # (raw is filled in from the file's chunks, read in order: _with_raw)
    "records": f"SELECT t.*, NULL AS raw, "
               f"coalesce({MONTH_OF.format('t.timestamp')}, :month) AS month "
               "FROM records t WHERE t.file_id = :fid ORDER BY t.offset",
    # a cut block's whole text, decoded: an export carries every block's text whole
    "blocks": "SELECT " + ", ".join(f"t.{c}" if c != "text" else WHOLE_TEXT.format("t") + " AS text"
                                    for c in BLOCK_COLUMNS)
              + f", coalesce({MONTH_OF.format('r.timestamp')}, :month) AS month FROM blocks t "
              "LEFT JOIN records r ON r.file_id = t.file_id AND r.offset = t.offset "
              "WHERE t.file_id = :fid ORDER BY t.offset, t.idx",
    "attachments": f"SELECT t.*, coalesce({MONTH_OF.format('r.timestamp')}, :month) AS month FROM attachments t "
                   "LEFT JOIN records r ON r.file_id = t.file_id AND r.offset = t.offset "
                   "WHERE t.file_id = :fid ORDER BY t.offset",
    # (each message's cost from the billed_cost view read once: COSTS)
    "usage": "SELECT {usage}, (SELECT c.cost_usd FROM temp.export_cost c WHERE c.file_id = t.file_id "
             "AND c.message_id = t.message_id) AS cost_usd, "
             f"coalesce({MONTH_OF.format('r.timestamp')}, {MONTH_OF.format('t.timestamp')}, :month) "
             "AS month FROM usage t LEFT JOIN records r ON r.file_id = t.file_id AND r.offset = t.offset "
             "WHERE t.file_id = :fid ORDER BY t.offset",
    "chain": f"SELECT t.*, coalesce({MONTH_OF.format('r.timestamp')}, :month) AS month FROM chain t "
             "LEFT JOIN records r ON r.file_id = t.file_id AND r.offset = t.offset "
             "WHERE t.file_id = :fid ORDER BY t.pos",
}
# The view ranks every usage row of the catalog in one window, so read
# per file it costs a whole-catalog pass each time (1.1 s over 123 files):
# it is read once, in the export's snapshot, into a temporary table.
COSTS = ("CREATE TEMP TABLE export_cost (file_id INTEGER, message_id TEXT, cost_usd REAL, "
         "PRIMARY KEY (file_id, message_id)) WITHOUT ROWID",
         "INSERT OR IGNORE INTO temp.export_cost SELECT file_id, message_id, cost_usd FROM billed_cost")
# The surgeries log is small, and may name files the catalog no longer has.
SURGERIES = (f"SELECT t.*, f.project AS project, {MONTH_OF.format('t.at')} AS month FROM surgeries t "
             "LEFT JOIN files f ON f.id = t.file_id ORDER BY project, month, t.id")
TABLES = (*PER_FILE, "surgeries")
# usage.gauge_iterations is stored NULL when it is the row's iterations and
# 'null' when the file holds none (migration 044): exported whole, in the
# table's column order ({usage} above).
USAGE_GAUGE_ITERATIONS = "nullif(coalesce(t.gauge_iterations, t.iterations), 'null') AS gauge_iterations"


def per_file_sql(conn: sqlite3.Connection) -> dict[str, str]:
    """PER_FILE with usage's own columns named (gauge_iterations whole)."""
    cols = ", ".join(USAGE_GAUGE_ITERATIONS if n == "gauge_iterations" else f't."{n}"'
                     for (n,) in conn.execute("SELECT name FROM pragma_table_info('usage')"))
    return {t: sql.replace("{usage}", cols) for t, sql in PER_FILE.items()}
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
    incremental: bool = False  # an earlier export updated: only changed partitions written
    superseded: int = 0  # the earlier export's part files replaced (deleted once the manifest names the new)
    repaired: int = 0  # of those, parts the manifest named that were missing or replaced (written again)

    def summary(self) -> str:
        rows = ", ".join(f"{n:,} {t}" for t, n in self.tables.items())
        if self.incremental:
            repaired = (f"{self.repaired} part{'s' if self.repaired > 1 else ''} missing or replaced: written again, "
                        if self.repaired else "")
            return (f"Updated {self.path}: {self.files} new Parquet files ({rows}), {self.superseded} superseded, "
                    f"{repaired}"
                    f"{'secrets redacted; ' if self.redacted else ''}"
                    f"{self.bytes / 1e6:.1f} MB in {self.seconds:.2f}s")
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

    def __init__(self, pa, pq, out: Path, table: str, schema, report: ExportReport,
                 keep: set[tuple] | None = None, prefix: str = "part-"):
        self.pa, self.pq, self.out, self.table, self.schema, self.report = pa, pq, out, table, schema, report
        self.keep, self.prefix = keep, prefix  # only these partitions are written (an update)
        self.writers: dict[tuple, list] = {}
        self.buffers: dict[tuple, list[tuple]] = {}
        self.held: dict[tuple, set] = {}  # catalog file ids in each open partition file
        self.buffered_bytes = 0
        self.buffered_rows = 0
        self.written: list[dict] = []  # manifest entries of the closed part files
        self.made: set[Path] = set()  # folders made (or found) already

    def add(self, key: tuple, row: tuple, fid: int | None = None) -> None:
        if self.keep is not None and key not in self.keep:
            return
        self.held.setdefault(key, set()).add(fid)
        self.buffers.setdefault(key, []).append(row)
        self.buffered_rows += 1
        self.buffered_bytes += sum([len(v) for v in row if type(v) in _SIZED])
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
            self.writers[key][3] += len(rows)
            self.report.tables[self.table] += len(rows)
        self.buffers.clear()
        self.buffered_bytes = self.buffered_rows = 0

    def _writer(self, key: tuple):
        w = self.writers.get(key)
        if w is None:
            folder = self.out / self.table
            for name, value in ((None, None), *zip(("project", "month"), key)):
                if name is not None:
                    folder = folder / f"{name}={partition_name(value)}"
                if folder not in self.made:
                    _private_dir(folder)
                    self.made.add(folder)
            fh, path = _new_part(folder, self.prefix)
            w = self.writers[key] = [self.pq.ParquetWriter(fh, self.schema, compression="zstd"), fh, path, 0]
        return w[0]

    def close(self) -> None:
        """Write what is buffered and close every file (at the end of a project)."""
        self.flush()
        for key, (writer, fh, path, rows) in self.writers.items():
            writer.close()
            fh.close()
            self.report.files += 1
            st = path.stat()
            self.report.bytes += st.st_size
            # size and mtime: what the next update checks a part it keeps by (renames keep both)
            self.written.append({"path": path.relative_to(self.out).as_posix(), "table": self.table,
                                 "key": list(key), "files": sorted(f for f in self.held.get(key, ()) if f is not None),
                                 "rows": rows, "bytes": st.st_size, "mtime_ns": st.st_mtime_ns})
        self.writers.clear()
        self.held.clear()


def _new_part(folder: Path, prefix: str = "part-"):
    """A new part file in ``folder``: part-0, or the next free number when
    an earlier project wrote there (two project names that read the same
    once redacted)."""
    n = 0
    while True:
        path = folder / f"{prefix}{n}.parquet"
        try:
            return os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb"), path
        except FileExistsError:
            n += 1


def _private_dir(path: Path) -> bool:
    """Make ``path`` (0700); False when something is there already."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        return False
    os.chmod(path, 0o700)  # whatever the umask
    return True


def _check_target(out: Path, replace: bool) -> bool:
    """True when ``out`` holds an earlier export to update (not ``replace``)."""
    if not out.exists() and not out.is_symlink():
        return False
    if out.is_symlink():
        raise ExportError(f"{out} is a symbolic link: name the folder itself")
    if not out.is_dir():
        raise ExportError(f"{out} exists and is not a folder: name another")
    if not any(out.iterdir()):
        return False
    if not (out / MARKER).is_file():
        raise ExportError(f"{out} is not empty and holds no txdb export: name another folder")
    return not replace


def export_parquet(catalog: str | Path, out: str | Path, replace: bool = False,
                   progress: Callable[[int, int], None] | None = None, redact: bool = False) -> ExportReport:
    """Write the catalog's tables under ``out`` as partitioned Parquet.

    An earlier txdb export at ``out`` is updated: only the partitions that
    hold a file the catalog changed since (new, grown, rewritten, gone) are
    written again, as new part files; the manifest (``_txdb_export.json``)
    then names them and the part files they supersede are deleted, so the
    folder always reads as a fresh export would; a part it would keep that
    is missing or replaced (``_intact``) is written again the same way
    (``ExportReport.repaired``). ``replace``: the earlier
    export is replaced whole (only once the new one is whole).
    ``redact``: the catalog's text no scan has read
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
    earlier = _read_manifest(out, redact) if _check_target(out, replace) else None
    db.check_side_files(Path(catalog).resolve())  # (connect checked them; a FIFO since would hang this one)
    ro = sqlite3.connect(Path(catalog).resolve().as_uri() + "?mode=ro", uri=True)
    ro.create_function("txdb_text", 3, text_function(ro))
    out.parent.mkdir(parents=True, exist_ok=True)
    # Made unpredictably and exclusively (0700): a link planted beside DIR is
    # never written through, and never renamed into DIR's place.
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.exporting-", dir=out.parent))
    report = ExportReport(str(out), {t: 0 for t in TABLES}, redacted=redact)
    try:
        ro.execute("PRAGMA busy_timeout = 10000")
        ro.execute("BEGIN")  # one snapshot: a watcher writing meanwhile is not half seen
        for sql in COSTS:
            ro.execute(sql)
        schemas = {t: _schema(pa, ro, t) for t in TABLES}
        per_file = per_file_sql(ro)
        state = {"schema": {t: [f"{f.name} {f.type}" for f in sc] for t, sc in schemas.items()},
                 "files": _fingerprints(ro, redact), "surgeries": _surgeries_hash(ro)}
        groups = secrets.session_files(ro) if redact else {}  # whose findings mask each file
        files = ro.execute(
            f"SELECT f.id, f.project, {MONTH_OF.format('s.first_timestamp')} FROM files f "
            "LEFT JOIN sessions s ON s.file_id = f.id ORDER BY f.project, f.id").fetchall()
        kept: list[dict] = []  # the earlier export's parts still current
        if earlier is not None and earlier.get("schema") != state["schema"]:
            earlier = None  # another table layout (a newer txdb): everything is written again
        if earlier is None:
            generation, keep, surgeries = 0, None, True
            prefix = "part-"
        else:
            # Past every generation a part is named by too: a new name never lands on a kept part.
            generation = 1 + max([earlier["generation"], *(int(m[1]) for p in earlier["parts"]
                                                          if (m := GENERATION.search(p["path"])))])
            if generation > MAX_GENERATION:
                raise ExportError(f"{out} has been updated {MAX_GENERATION:,} times: add --replace to write it anew")
            prefix = f"part-g{generation}-"
            report.incremental = True
            keep, wanted, surgeries, report.repaired = _changed(ro, out, earlier, state, files, redact)
            files = [f for f in files if f[0] in wanted]
            kept = [p for p in earlier["parts"]
                    if not (tuple(p["key"]) in keep if p["table"] != "surgeries" else surgeries)]
            report.superseded = len(earlier["parts"]) - len(kept)
        parts = {t: _Partitions(pa, pq, tmp, t, schemas[t], report, keep, prefix) for t in TABLES}
        current = object()
        for done, (fid, project, month) in enumerate(files, 1):
            if project != current:
                for t in PER_FILE:
                    parts[t].close()
                current = project
            mask = (secrets.redactor(ro, fid, groups) or secrets.Redactor({})) if redact else None
            for t, sql in per_file.items():
                cur = ro.execute(sql, {"fid": fid, "month": month})
                _stream(_with_raw(ro, cur, fid) if t == "records" else cur, [d[0] for d in cur.description],
                        parts[t], project, mask, TRUNCATED.get(t), fid)
            if progress:
                progress(done, len(files))
        for t in PER_FILE:
            parts[t].close()
        if surgeries:
            parts["surgeries"].keep = None
            _surgeries(ro, parts["surgeries"], redact)
        parts["surgeries"].close()
        ro.execute("COMMIT")
        written = [e for t in TABLES for e in parts[t].written]
        manifest = {**state, "generation": generation, "parts": kept + written}
        if earlier is None:
            _write_marker(tmp, report, manifest)
            _publish(tmp, out)
        elif written or report.superseded or earlier["files"] != state["files"]:
            _update(tmp, out, report, manifest, earlier)
    finally:
        ro.close()
        shutil.rmtree(tmp, ignore_errors=True)
    report.seconds = time.perf_counter() - t0
    return report


def _surgeries(ro: sqlite3.Connection, parts: _Partitions, redact: bool) -> None:
    file_col = [d[0] for d in ro.execute(SURGERIES).description].index("file_id")
    masks: dict[int, secrets.Redactor | None] = {}
    groups = secrets.session_files(ro) if redact else {}
    for row in ro.execute(SURGERIES):
        fid = row[file_col]
        if redact:  # with its file's secrets masked (a file the catalog lost has none)
            if fid not in masks:
                masks[fid] = secrets.redactor(ro, fid, groups) if fid is not None else None
            mask = masks[fid]
            if mask is not None:
                row = tuple(mask(v) if isinstance(v, str) else v for v in row)
        parts.add((row[-2], row[-1]), row, fid)


def _digest(rows) -> str:
    return hashlib.sha256(orjson.dumps([list(r) for r in rows], default=_blob)).hexdigest()


def _blob(v):
    if isinstance(v, bytes):
        return v.hex()
    raise TypeError


def _fingerprints(ro: sqlite3.Connection, redact: bool) -> dict[str, str]:
    """Per catalog file, a hash of what its exported rows derive from: its
    files and sessions rows (size, hashes, lines, first timestamp), its
    billed cost (which another file's copy of a message can move) and,
    redacted, its secret findings and its session's other files'."""
    parts: dict[int, list] = {}
    for row in ro.execute("SELECT * FROM files"):
        parts[row[0]] = [row]
    queries = ["SELECT file_id, * FROM sessions",
               "SELECT file_id, count(cost_usd), total(cost_usd) FROM billed_cost GROUP BY file_id"]
    if redact:
        # how far a scan read, not when: a scan again that found the same (a
        # sidecar refreshed within the scan's second is read again) rewrites nothing
        queries += ["SELECT file_id, scanned_to FROM secret_scans"]
    for sql in queries:
        for row in ro.execute(sql):
            if row[0] in parts:
                parts[row[0]].append(row)
    if redact:  # its findings, and its session's other files' (their secrets are masked in it too)
        found = {row[0]: row for row in ro.execute(
            "SELECT file_id, count(*), total(start), total(offset), total(length) FROM secret_findings "
            "GROUP BY file_id")}
        sessions = secrets.session_files(ro)
        for fid, rows in parts.items():
            rows += [found.get(i, (i, 0)) for i in sessions.get(fid, (fid,))]
    return {str(fid): _digest(rows) for fid, rows in parts.items()}


def _surgeries_hash(ro: sqlite3.Connection) -> str:
    return _digest(ro.execute(SURGERIES))


def _changed(ro: sqlite3.Connection, out: Path, earlier: dict, state: dict, files: list, redact: bool):
    """(partitions to write again, catalog files to read for them, whether
    surgeries is written again, how many parts it would keep are missing or
    replaced) for an update of ``earlier`` at ``out``: such a part's
    partition is written again too."""
    before, now = earlier["files"], state["files"]
    dirty = {int(f) for f in before.keys() ^ now.keys()} | {int(f) for f in now if f in before and before[f] != now[f]}
    keep: set[tuple] = set()
    by_key: dict[tuple, set[int]] = {}
    groups = secrets.session_files(ro) if redact else {}
    for p in earlier["parts"]:
        key = tuple(p["key"])
        by_key.setdefault(key, set()).update(p["files"])
        if p["table"] != "surgeries" and dirty & set(p["files"]):
            keep.add(key)
    for fid, project, month in files:
        if fid not in dirty:
            continue
        if redact and project is not None:
            project = (secrets.redactor(ro, fid, groups) or secrets.Redactor({}))(project)
        for sql in per_file_sql(ro).values():
            for (m,) in ro.execute(f"SELECT DISTINCT month FROM ({sql})", {"fid": fid, "month": month}):
                keep.add((project, m))
    surgeries = (earlier["surgeries"] != state["surgeries"]
                 or any(p["table"] == "surgeries" and dirty & set(p["files"]) for p in earlier["parts"]))
    would_keep = [p for p in earlier["parts"]
                  if not (surgeries if p["table"] == "surgeries" else tuple(p["key"]) in keep)]
    repaired = 0
    for p in would_keep:
        if _intact(out, p):
            continue
        repaired += 1
        if p["table"] == "surgeries":
            surgeries = True
        else:
            keep.add(tuple(p["key"]))
    wanted = {f for key in keep for f in by_key.get(key, ())} | dirty
    return keep, wanted, surgeries, repaired


def _intact(out: Path, part: dict) -> bool:
    """Whether a part the manifest names is still the file it wrote: a
    regular file (not a link: never followed) in a real folder of the export
    (a link on the way is refused), of the size (and mtime) recorded. A part
    recorded without an mtime (an older txdb's manifest) is checked by its
    size, and its mtime recorded now; one without a size is written again."""
    try:
        st = os.lstat(_inside(out, part["path"]))
    except (FileNotFoundError, NotADirectoryError):
        return False
    if not stat.S_ISREG(st.st_mode) or type(part.get("bytes")) is not int or st.st_size != part["bytes"]:
        return False
    if "mtime_ns" not in part:
        part["mtime_ns"] = st.st_mtime_ns
    return part["mtime_ns"] == st.st_mtime_ns


PART = re.compile(r"part-(?:g[0-9]{1,12}-)?[0-9]{1,12}\.parquet")
GENERATION = re.compile(r"/part-g([0-9]+)-[0-9]+\.parquet$")
# Past any count of real updates: a manifest (or a part's name) past it is
# forged, and an update's parts are never named past it (so past PART's 12 digits).
MAX_GENERATION = 10**9


def _read_manifest(out: Path, redact: bool) -> dict:
    """The earlier export's manifest, checked as hostile input: any damage,
    or a part named outside its table's partition folders, is one error."""
    path = out / MARKER
    bad = f"{path} is damaged or not txdb's: export into a new folder or add --replace"
    try:
        if path.is_symlink() or path.stat().st_size > 256 << 20:
            raise ExportError(bad)
        data = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        raise ExportError(bad) from None
    if not isinstance(data, dict):
        raise ExportError(bad)
    if "parts" not in data and data.get("format") == "parquet":
        raise ExportError(f"{out} holds an export without a manifest (an older txdb): add --replace to replace it")
    if not isinstance(data.get("redacted"), bool):
        raise ExportError(bad)
    if data["redacted"] != redact:
        raise ExportError(f"{out} holds an export {'with' if data['redacted'] else 'without'} --redact: "
                          f"{'add' if data['redacted'] else 'drop'} --redact, or add --replace to replace it")
    files, parts, gen = data.get("files"), data.get("parts"), data.get("generation")
    if (not isinstance(files, dict) or not isinstance(parts, list) or type(gen) is not int
            or not 0 <= gen <= MAX_GENERATION
            or not isinstance(data.get("surgeries"), str) or not isinstance(data.get("schema"), dict)
            or not all(isinstance(k, str) and k.isdigit() and isinstance(v, str) for k, v in files.items())):
        raise ExportError(bad)
    seen = set()
    for p in parts:
        try:
            table, key, fids, rows = p["table"], p["key"], p["files"], p["rows"]
            if not isinstance(key, list):
                raise TypeError
            project, month = key
            ok = (table in TABLES and all(v is None or isinstance(v, str) for v in key)
                  and isinstance(fids, list) and all(type(f) is int for f in fids) and type(rows) is int
                  and isinstance(p["path"], str))
            folder = f"{table}/project={partition_name(project)}/month={partition_name(month)}/"
            ok = ok and p["path"].startswith(folder) and PART.fullmatch(p["path"][len(folder):]) is not None
            ok = ok and int(m[1] if (m := GENERATION.search(p["path"])) else 0) <= MAX_GENERATION
        except (KeyError, TypeError, ValueError):
            ok = False
        if not ok or p["path"] in seen:
            raise ExportError(f"{path} names a part file that is not its own: "
                              "export into a new folder or add --replace")
        seen.add(p["path"])
    return data


def _inside(out: Path, rel: str, made: list[Path] | None = None) -> Path:
    """``out/rel``, every folder on the way a real folder (not a link);
    with ``made``, the missing ones are made (and added to it)."""
    folder = out
    *dirs, name = rel.split("/")
    for d in dirs:
        folder = folder / d
        if made is not None and _private_dir(folder):
            made.append(folder)
        if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
            raise ExportError(f"{folder} is not a folder of the export: export into a new folder")
    return folder / name


def _free(out: Path, rel: str, made: list[Path] | None = None) -> Path:
    """``out/rel`` (as ``_inside``), refused when something is there."""
    target = _inside(out, rel, made)
    if target.exists() or target.is_symlink():
        raise ExportError(f"{target} is in the way of a new part file: export into a new folder")
    return target


def _move_in(src: Path, out: Path, rels: list[str], commit: Callable[[], None] = lambda: None) -> None:
    """Rename each ``src/rel`` to ``out/rel``, then ``commit()``; when any
    of it fails, the files moved go back and the folders made are removed
    (``out`` is left as it was), and the error is raised."""
    moved: list[str] = []
    made: list[Path] = []
    try:
        for rel in rels:
            os.rename(src / rel, _free(out, rel, made))
            moved.append(rel)
        commit()
    except BaseException:
        for rel in reversed(moved):
            try:
                os.rename(out / rel, src / rel)
            except OSError:
                try:
                    os.unlink(out / rel)
                except OSError:
                    pass
        for folder in reversed(made):
            try:
                folder.rmdir()
            except OSError:
                pass
        raise


def _update(tmp: Path, out: Path, report: ExportReport, manifest: dict, earlier: dict) -> None:
    """Check every target, move the new part files into ``out``, then the
    manifest (the update is then done: a refusal or failure before leaves
    ``out`` as the earlier manifest names it, and after a crash the next
    export deletes parts it does not name), then delete superseded parts."""
    named = {p["path"] for p in manifest["parts"]}
    listed = named | {p["path"] for p in earlier["parts"]}
    for table in TABLES:  # leftovers of an update cut off before its manifest
        root = out / table
        if root.is_dir() and not root.is_symlink():
            for dirpath, _, names in os.walk(root):
                for n in names:
                    rel = (Path(dirpath) / n).relative_to(out).as_posix()
                    if PART.fullmatch(n) and rel not in listed:
                        os.unlink(Path(dirpath) / n)
    # Every target checked before any part is moved: a part moved in beside
    # the parts the manifest names would be read twice.
    new = [p["path"] for p in manifest["parts"] if (tmp / p["path"]).exists()]
    for rel in new:
        _free(out, rel)
    for p in earlier["parts"]:
        if p["path"] not in named:
            target = _inside(out, p["path"])
            if target.is_dir() and not target.is_symlink() and any(target.iterdir()):
                raise ExportError(f"{target} is a folder where a part file belongs: move it away, or add --replace")
    rows = {t: 0 for t in TABLES}
    for p in manifest["parts"]:
        rows[p["table"]] += p["rows"]
    _write_marker(tmp, report, manifest, rows)
    _move_in(tmp, out, new, lambda: os.replace(tmp / MARKER, out / MARKER))
    for p in earlier["parts"]:
        if p["path"] not in named:
            target = _inside(out, p["path"])
            try:
                if stat.S_ISDIR(os.lstat(target).st_mode):
                    target.rmdir()  # an empty folder in its place (checked above)
                else:
                    os.unlink(target)  # a link in its place: the link itself
            except FileNotFoundError:
                pass
            for folder in (target.parent, target.parent.parent):
                try:
                    folder.rmdir()  # a partition no longer held
                except OSError:
                    break


def _schema(pa, conn, table: str):
    cols = conn.execute(f"SELECT name, type FROM pragma_table_info('{table}')").fetchall()
    cols += EXTRA_COLUMNS.get(table, [])
    fields = [pa.field(name, _arrow_type(pa, declared)) for name, declared in cols
              if name not in ("project", "month")]
    return pa.schema(fields + [pa.field("project", pa.string()), pa.field("month", pa.string())])


def _with_raw(ro: sqlite3.Connection, cur: sqlite3.Cursor, fid: int) -> Iterator[tuple]:
    """A file's records rows (in offset order) with their raw JSON as text
    in ``raw`` (None for a record without one), from its chunks read in
    order alongside: each inflated once, no look-up per row."""
    names = [d[0] for d in cur.description]
    at, put = names.index("offset"), names.index("raw")
    lines = raw_lines(ro, fid)
    line = next(lines, None)
    for row in cur:
        while line is not None and line[0] < row[at]:
            line = next(lines, None)
        raw = line[1].decode("utf-8", "replace") if line is not None and line[0] == row[at] else None
        yield row[:put] + (raw,) + row[put + 1:]


def _stream(rows: Iterable[tuple], names: list[str], parts: _Partitions, project: str | None,
            mask: secrets.Redactor | None = None, truncated: str | None = None, fid: int | None = None) -> None:
    """Rows of one file's query (columns ``names``) into their partitions:
    the table's own columns (a table's own ``project`` is the file's), then
    project, month; each text through ``mask`` when given (--redact), the
    ``truncated`` column through ``mask.truncated``."""
    own = [i for i, n in enumerate(names[:-1]) if n != "project"]
    cut = [names[i] for i in own].index(truncated) if truncated in names else -1
    pick = itemgetter(*own) if len(own) > 1 else lambda row: (row[own[0]],)
    if mask is not None and project is not None:
        project = mask(project)  # its partition's folder name too
    for row in rows:
        month = row[-1]
        values = pick(row)
        if mask is None:
            pass
        elif mask.secrets:
            # A blob is left out (files.sha_state: a hash's state, which
            # holds the file's last bytes as they are).
            values = tuple((mask.truncated(v) if i == cut else mask(v)) if isinstance(v, str)
                           else None if isinstance(v, bytes) else v for i, v in enumerate(values))
        elif bytes in map(type, values):  # no secret to mask: only a blob to leave out
            values = tuple(None if isinstance(v, bytes) else v for v in values)
        parts.add((project, month), values + (project, month), fid)


def _write_marker(tmp: Path, report: ExportReport, manifest: dict, rows: dict | None = None) -> None:
    """The marker, which is also the manifest: each part file's table,
    partition, catalog file ids and rows; each catalog file's fingerprint."""
    from importlib.metadata import version

    data = {"format": "parquet", "partitioning": ["project", "month"], "txdb": version("txdb"),
            "exported_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "rows": rows or report.tables,
            "redacted": report.redacted, **manifest}
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
