"""Claude Code's prompt history (``<config dir>/history.jsonl``) in the catalog.

Each line is one prompt a user typed: ``display`` (the text), ``pastedContents``
(pastes, by id: ``{"id", "type", "content"}``), ``timestamp`` (ms since the
epoch), ``project`` (the cwd) and, in newer releases, ``sessionId``. Claude
Code keeps it after its cleanup sweeps the transcripts (and newer releases
prune it by the same period, rewriting it), so it is the one trace of the
sessions swept before txdb saw them.

``refresh_history`` reads a history file from its cursor (a file that only
grew) or from the start (a shorter, replaced or rewritten one), streaming, in
one transaction; a prompt is keyed by its line's sha256, so lines read again
are skipped and prompts Claude Code pruned stay. A line is parsed as a
session file's is (a lone surrogate escape is kept as U+FFFD). A FIFO, a
symlink, an unreadable file, malformed or oversized lines are one warning
each file, never a stopped refresh.
"""

from __future__ import annotations

import hashlib
import math
import os
import sqlite3
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from txdb.catalog import db
from txdb.config import project_folder
from txdb.model.lines import parse_line
from txdb.model.regular import open_regular

NAME = "history.jsonl"
# Longer lines are skipped (named in the warning): a prompt with its pastes
# inline is kilobytes; Claude Code keeps large pastes out of the line.
MAX_LINE = 8 * 1024 * 1024
_EDGE = 4096  # bytes hashed at each end of what was read, to tell growth from rewrite
_MAX_MS = 253402300799999  # 9999-12-31T23:59:59.999Z


@dataclass
class HistoryStats:
    files: int = 0
    lines: int = 0       # complete lines read this time
    prompts: int = 0     # prompts new to the catalog
    skipped: int = 0     # malformed or oversized lines
    recovered: int = 0   # lines read only by the forgiving parse (a lone surrogate, invalid UTF-8, glued objects)


def history_paths(roots: list[Path]) -> list[Path]:
    """The history file beside each projects root (``<config dir>/projects``
    -> ``<config dir>/history.jsonl``); a root named otherwise has none."""
    out: list[Path] = []
    for root in roots:
        if root.name == "projects" and (root.parent / NAME) not in out:
            out.append(root.parent / NAME)
    return out


def _edges(fh, end: int) -> str:
    """sha256 of the first and last ``_EDGE`` bytes before ``end``."""
    h = hashlib.sha256()
    fh.seek(0)
    h.update(fh.read(min(end, _EDGE)))
    if end > _EDGE:
        fh.seek(max(_EDGE, end - _EDGE))
        h.update(fh.read(end - max(_EDGE, end - _EDGE)))
    return h.hexdigest()


def _iso(ms: int | None) -> str | None:
    if ms is None or not 0 <= ms <= _MAX_MS:
        return None
    dt = datetime.fromtimestamp(ms // 1000, tz=timezone.utc)
    return dt.strftime("%Y-%m-%dT%H:%M:%S") + f".{ms % 1000:03d}Z"


def _ms(value) -> int | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    ms = int(value)
    return ms if -(2 ** 63) < ms < 2 ** 63 else None


def _str(value) -> str | None:
    return value if isinstance(value, str) else None


def rows(line: bytes, source: str) -> tuple[list[tuple], bool]:
    """The ``history`` rows of one line (without its newline), parsed as
    refresh parses a session file's line (``lines.parse_line``): strictly,
    else forgivingly (a lone surrogate escape, which JavaScript's
    JSON.stringify writes, or invalid UTF-8 as U+FFFD; objects glued on one
    line, each its own prompt keyed by its own bytes); and whether it took
    the forgiving path. No rows: the line holds no JSON object."""
    parsed = parse_line(line)
    whole = len(parsed.objects) == 1
    out = []
    for start, length, obj in parsed.objects:
        piece = line[start:start + length]
        out.append(_row(obj, hashlib.sha256(line if whole else piece).hexdigest(), source,
                        piece.decode("utf-8", "replace")))
    return out, parsed.recovered and bool(out)


def _row(obj: dict, key: str, source: str, raw: str) -> tuple:
    pastes = obj.get("pastedContents")
    texts = []
    if isinstance(pastes, dict):
        for p in pastes.values():
            if isinstance(p, dict) and p.get("type", "text") == "text" and isinstance(p.get("content"), str):
                texts.append(p["content"])
    ms = _ms(obj.get("timestamp"))
    cwd = _str(obj.get("project"))
    return (key, source, ms, _iso(ms), _str(obj.get("sessionId")), cwd,
            project_folder(cwd) if cwd else None, _str(obj.get("display")),
            len(pastes) if isinstance(pastes, dict) else 0, "\n\n".join(texts) or None, raw)


_INSERT = ("INSERT OR IGNORE INTO history (line_sha256, source, timestamp_ms, timestamp, session_id, cwd, project, "
           "display, pasted, pasted_text, raw) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")


def refresh_history(conn: sqlite3.Connection, path: Path, warnings: list[str],
                    stats: HistoryStats | None = None, max_bytes: int | None = None) -> HistoryStats:
    """Catalogue what ``path`` holds that the catalog does not; a problem is
    one line in ``warnings``. A missing file is nothing to do. ``max_bytes``:
    when more than that is left to read, read nothing (a caller that must
    stay quick, the hook, leaves it to the next refresh)."""
    stats = stats or HistoryStats()
    source = str(path)
    try:
        fh = open_regular(path, follow=False)
    except FileNotFoundError:
        return stats
    except OSError as e:
        warnings.append(f"{source}: {e.strerror or type(e).__name__}; its prompts were not read")
        return stats
    bad: list[int] = []
    with fh:
        st = os.fstat(fh.fileno())
        known = conn.execute("SELECT size, inode, head_sha, cursor, lines FROM history_files WHERE path = ?",
                             (source,)).fetchone()
        start, lineno = 0, 0
        if known and known[1] == st.st_ino and known[3] <= st.st_size:
            if known[2] == _edges(fh, known[3]):
                if known[0] == st.st_size:
                    return stats  # unchanged
                start, lineno = known[3], known[4]
        if max_bytes is not None and st.st_size - start > max_bytes:
            warnings.append(f"{source}: {st.st_size - start:,} bytes to read, left to the next refresh")
            return stats
        stats.files += 1
        fh.seek(start)
        cursor = start
        with db.transaction(conn):
            while True:
                line = fh.readline(MAX_LINE + 1)
                if not line:
                    break
                if not line.endswith(b"\n"):
                    if len(line) <= MAX_LINE:
                        break  # the last line, not yet complete: read once it is
                    skipped, more = len(line), line  # oversized: skipped to its end, never held whole
                    while more and not more.endswith(b"\n"):
                        more = fh.readline(MAX_LINE + 1)
                        skipped += len(more)
                    if not more:
                        break  # cut short at the end: judged once complete
                    cursor += skipped
                    lineno += 1
                    bad.append(lineno)
                    continue
                cursor += len(line)
                lineno += 1
                stats.lines += 1
                body = line.rstrip(b"\r\n")
                if not body.strip():
                    continue
                found, recovered = rows(body, source)
                if not found:
                    bad.append(lineno)
                    continue
                stats.recovered += recovered
                for r in found:
                    c = conn.execute(_INSERT, r)
                    if c.rowcount == 1:
                        stats.prompts += 1
                        conn.execute("INSERT INTO history_fts (rowid, display, pasted_text) VALUES (?, ?, ?)",
                                     (c.lastrowid, r[7], r[9]))
            conn.execute(
                "INSERT OR REPLACE INTO history_files (path, size, inode, mtime_ns, head_sha, cursor, lines, "
                "refreshed_at) VALUES (?, ?, ?, ?, ?, ?, ?, strftime('%Y-%m-%dT%H:%M:%SZ', 'now'))",
                (source, st.st_size, st.st_ino, st.st_mtime_ns, _edges(fh, cursor), cursor, lineno))
    if bad:
        stats.skipped += len(bad)
        shown = ", ".join(map(str, bad[:5])) + (f" and {len(bad) - 5} more" if len(bad) > 5 else "")
        warnings.append(f"{source}: {len(bad)} line{'s' if len(bad) != 1 else ''} skipped "
                        f"(not a JSON object, or over {MAX_LINE:,} bytes): line {shown}")
    return stats


def refresh_roots(conn: sqlite3.Connection, roots: list[Path], warnings: list[str],
                  max_bytes: int | None = None) -> HistoryStats:
    """``refresh_history`` of the history file beside each of ``roots``."""
    stats = HistoryStats()
    for path in history_paths(roots):
        refresh_history(conn, path, warnings, stats, max_bytes)
    return stats


def sessions(conn: sqlite3.Connection, before_txdb: bool = False, project: str | None = None,
             limit: int | None = None) -> list[dict]:
    """The sessions history.jsonl names, newest prompt first (view
    history_sessions); ``before_txdb``: only those whose transcript txdb
    never saw (swept before txdb ran)."""
    where: list[str] = []
    params: list[object] = []
    if before_txdb:
        where.append("status = 'gone before txdb'")
    if project:
        where.append("project LIKE ? ESCAPE '\\'")  # contains it, taken literally
        params.append(f"%{db.like_literal(project)}%")
    sql = "SELECT * FROM history_sessions" + (" WHERE " + " AND ".join(where) if where else "")
    sql += " ORDER BY last_prompt DESC"
    if limit:
        sql += " LIMIT ?"
        params.append(limit)
    return db.rows(conn, sql, params)


def counts(conn: sqlite3.Connection) -> tuple[int, int, int]:
    """The prompts the catalog holds, the sessions they name, and how many
    of them name none (an older release wrote no sessionId)."""
    n, sessions, without = conn.execute(
        "SELECT count(*), count(DISTINCT session_id), count(*) - count(session_id) FROM history").fetchone()
    return n, sessions, without


def session_ids(conn: sqlite3.Connection, session_prefix: str) -> list[str]:
    """The session ids history.jsonl names that start with ``session_prefix``
    (taken literally): at most two, enough to tell one from several."""
    return [r[0] for r in conn.execute(
        "SELECT DISTINCT session_id FROM history WHERE session_id LIKE ? ESCAPE '\\' ORDER BY 1 LIMIT 2",
        (db.like_literal(session_prefix) + "%",))]


def prompts(conn: sqlite3.Connection, session_prefix: str) -> list[dict]:
    """Every prompt of the sessions whose id starts with ``session_prefix``, oldest first."""
    return db.rows(conn, "SELECT session_id, timestamp, cwd, display, pasted, pasted_text FROM history "
                         "WHERE session_id LIKE ? ESCAPE '\\' ORDER BY session_id, timestamp_ms, id",
                   (db.like_literal(session_prefix) + "%",))
