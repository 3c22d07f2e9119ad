"""Read the catalog: find a session, list sessions, the analyze report."""

from __future__ import annotations

import contextlib
import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from txdb import config
from txdb.catalog import db
from txdb.model import tokens, vision
from txdb.errors import AmbiguousSession, NotASession, SessionNotFound
from txdb.model.paths import is_session_path
from txdb.model.paths import (SESSION_SUFFIX, archived_from, is_backup_name, is_pending_name, is_session_name,
    is_side_file, is_subagent, original_path, pending_of, session_of_copy, session_stem, working_file)
from txdb.catalog.staleness import catalogued_path, stale  # noqa: F401 - stale: its home is a module the hook can import cheaply


@dataclass
class SessionRef:
    file_id: int | None  # None: a file that is not a session, read directly, never catalogued
    path: str
    session_id: str | None
    kind: str  # 'session', 'subagent', or for a file that is not a session: what it is
    copy_of: str | None = None  # the session file a pending copy or backup belongs to

    @property
    def catalogued(self) -> bool:
        return self.file_id is not None


_rows = db.rows


def looks_like_path(ref: str) -> bool:
    """A SESSION argument that names a file (else an id or a prefix)."""
    return os.sep in ref or "/" in ref or ref.endswith(SESSION_SUFFIX) or ref.startswith("~")


def _ref(conn, path: str) -> SessionRef:
    row = conn.execute(
        "SELECT id, path, session_id, kind FROM files WHERE path = ?", (path,)
    ).fetchone()
    if row is None:
        raise SessionNotFound(f"{path} is not in the catalog")
    return SessionRef(*row)




MIN_PREFIX = 4  # shorter prefixes would match too much by accident


def copy_kind(path: str | Path) -> str:
    """What a file that is not a session is, in words ("a backup", ...)."""
    p = Path(path)
    name = p.name
    if is_pending_name(name):
        return "the pending copy"
    if is_backup_name(name):
        return "a backup"
    if is_session_name(name) and os.path.islink(p):
        return f"a link to {os.path.realpath(p)}, which is {copy_kind(os.path.realpath(p))}"
    if is_side_file(p):
        return "a side file of a session's folder"
    if is_session_name(name):
        return "a file inside a tool-results folder"
    if p.is_dir():
        return "a folder"
    return "a file not named <id>.jsonl"


def _copy_of(p: Path) -> str | None:
    s = session_of_copy(p)
    return str(s) if s is not None else None


def session_matches(conn: sqlite3.Connection, ref: str, live_first: bool = True) -> list[tuple]:
    """The catalogued session files an id, a file name's stem or an id
    prefix (``MIN_PREFIX`` characters or more) names, read only: rows of
    (id, path, session_id, kind, gone): the live top-level sessions when
    any match, else every match (``live_first=False``: every match).
    Matched literally (no LIKE wildcards)."""
    suffix = os.sep + ref + SESSION_SUFFIX
    rows = conn.execute(
        "SELECT f.id, f.path, f.session_id, f.kind, f.gone FROM files f "
        "WHERE f.session_id = ? OR substr(f.path, -?) = ? ORDER BY f.kind = 'session' DESC, f.gone, f.id DESC",
        (ref, len(suffix), suffix),
    ).fetchall()
    if not rows and len(ref) >= MIN_PREFIX:
        rows = conn.execute(
            "SELECT f.id, f.path, f.session_id, f.kind, f.gone FROM files f "
            "WHERE substr(f.session_id, 1, ?) = ? ORDER BY f.kind = 'session' DESC, f.gone, f.id DESC",
            (len(ref), ref),
        ).fetchall()
    return _preferred(rows, live_first)


def _preferred(rows: list[tuple], live_first: bool = True) -> list[tuple]:
    # an older catalog's backup rows go; a gone version kept aside (paths.archived_path) stays,
    # and a gone file's path is judged by its name (a link may stand there now)
    rows = [r for r in rows if is_session_path(archived_from(r[1]) or r[1], links=not r[4])]
    if not live_first:
        return rows
    return [r for r in rows if r[3] == "session" and not r[4]] or rows


def file_stem_matcher(conn: sqlite3.Connection):
    """:func:`session_matches` for many file stems at once (``txdb sessions
    --urls`` names each row's page): the files read once, each stem then
    looked up by id and by file name as that function does (a catalogued
    file's own stem always matches it, so its prefix branch is never taken)."""
    from collections import defaultdict

    by_sid: dict[str, list[tuple]] = defaultdict(list)
    by_stem: dict[str, list[tuple]] = defaultdict(list)
    for r in conn.execute("SELECT f.id, f.path, f.session_id, f.kind, f.gone FROM files f"):
        by_sid[r[2]].append(r)
        name = os.path.basename(r[1])
        if name.endswith(SESSION_SUFFIX):
            by_stem[name[:-len(SESSION_SUFFIX)]].append(r)

    def matches(stem: str) -> list[tuple]:
        rows = {r[0]: r for r in by_sid.get(stem, []) + by_stem.get(stem, [])}.values()
        return _preferred(sorted(rows, key=lambda r: (r[3] != "session", r[4], -r[0])))
    return matches


def _history_hint(conn: sqlite3.Connection, ref: str) -> str:
    """What to say of an id the catalog lacks: history.jsonl may name it (a
    session swept before txdb saw its transcript: only its prompts are
    left), else a refresh may find it."""
    from txdb.catalog.history import session_ids  # only on this error
    try:
        named = session_ids(conn, ref)
    except sqlite3.Error:  # a catalog too old to hold history: the plain hint
        named = []
    if len(named) == 1:
        return (f": txdb never saw its transcript; history.jsonl keeps its prompts "
                f"(`txdb history {named[0][:8]}`)")
    return " (run `txdb refresh`?)"


def resolve_session(conn: sqlite3.Connection, ref: str, roots: list[Path] | None = None,
                    mutating: bool = False, index: bool = True) -> SessionRef:
    """A session given by path or id; a file the catalog lacks, or that
    changed since it was indexed, is refreshed first. Ids and prefixes match
    literally. A path to a file the catalog has under another path (a
    symlink and its target) resolves to that row.

    A path discovery would not call a session (a backup, a pending copy, a
    file in a tool-results folder) is never catalogued. For a ``mutating``
    command, ``X.jsonl.pending`` names the session X.jsonl (the next pass
    goes on that pending copy) and any other such path is an error; for
    readers (verify, analyze) it comes back uncatalogued (``file_id`` None),
    to be read directly.

    ``index=False`` (a surgery pass that writes only a pending copy or a
    fork: it reads the file, never the catalog): the file is found but not
    indexed or refreshed first; a file the catalog lacks comes back with
    ``file_id`` None. Indexing a 100 MB session first took twice the pass."""
    if "\x00" in ref or not ref.strip():
        raise SessionNotFound(f"no session {ref!r}")
    if is_bare_name(ref):  # a file name: the working folder's file, else the session's folder's
        if not os.path.lexists(ref):
            return _resolve_name(conn, ref, roots, mutating, index)
        return _resolve_path(conn, ref, mutating, index)
    if looks_like_path(ref):
        return _resolve_path(conn, ref, mutating, index)

    rows = session_matches(conn, ref)
    if not rows:
        for root in roots or config.projects_roots():
            p = _find_in_root(root, ref + SESSION_SUFFIX)
            if p is not None:
                if not index:
                    return _unindexed(p)
                from txdb.catalog.ingest.store import refresh_path  # only to index: a pass that only reads the file loads no ingest
                refresh_path(conn, p, str(root))
                return _ref(conn, catalogued_path(conn, p))
        if len(ref) < MIN_PREFIX:
            raise SessionNotFound(f"no session {ref!r} in the catalog (an id prefix needs at least "
                                  f"{MIN_PREFIX} characters)")
        raise SessionNotFound(f"no session {ref!r} in the catalog" + _history_hint(conn, ref))
    paths = {archived_from(r[1]) or r[1] for r in rows}
    if len(paths) > 1:
        listing = ", ".join(sorted(paths)[:5])
        raise AmbiguousSession(f"{ref!r} matches {len(paths)} files ({listing}); pass a path")
    path = rows[0][1]
    if archived_from(path) is not None:
        return SessionRef(*rows[0][:4])  # gone, kept aside: there is no file to refresh
    if index and stale(conn, path):
        _refresh_stale(conn, path)
    return _ref(conn, path)


def is_bare_name(ref: str) -> bool:
    """A SESSION argument that is a file name and no more: a session's
    (``X.jsonl``) or one of its copies' (``X.jsonl.pending``, ``X.jsonl.bak``)."""
    return os.sep not in ref and "/" not in ref and not ref.startswith("~") and SESSION_SUFFIX in ref[1:]


def _resolve_name(conn, ref: str, roots, mutating: bool, index: bool) -> SessionRef:
    """``X.jsonl`` or a copy's name ``X.jsonl.pending`` not in the working
    folder: the session ``X`` (an id, a prefix or a file's stem, as any
    SESSION), then that file of its folder."""
    stem = session_stem(ref)
    try:
        found = resolve_session(conn, stem, roots, mutating, index)
    except SessionNotFound:
        where = ", ".join(str(r) for r in (roots or config.projects_roots()))
        raise SessionNotFound(
            f"no session {ref!r}: looked for a session whose id, id prefix or file name is {stem!r} in the "
            f"catalog and for {stem + SESSION_SUFFIX} in the project folders of {where}, and in the working "
            "folder (run `txdb refresh`, or pass the file's path)") from None
    path = Path(found.path)
    copy = path.with_name(path.name + ref[len(stem) + len(SESSION_SUFFIX):])
    return found if copy == path else _resolve_path(conn, str(copy), mutating, index)


def _unindexed(p: Path) -> SessionRef:
    """A session file the catalog lacks, found without indexing it (``index=False``)."""
    return SessionRef(None, str(p), None, "subagent" if is_subagent(p) else "session")


def _refresh_stale(conn: sqlite3.Connection, path: str) -> None:
    """Refresh a catalogued file that changed; a catalog that cannot be
    written (full disk, read-only) keeps its older rows, which still name the
    file (apply and undo work on the file, and log through the swap journal)."""
    from txdb.catalog.ingest.store import refresh_path
    try:
        refresh_path(conn, path)
    except sqlite3.OperationalError as e:
        if str(e) not in db.MACHINE_CONDITIONS:
            raise
def resolve_positions(conn: sqlite3.Connection, ref: str, original: bool = False) -> SessionRef:
    """SESSION for a command that shows chain positions (analyze, show-tool,
    show-thinking): the file the next surgery edits
    (``paths.working_file``). A session with a pending copy is
    read through that copy, so a position shown is the one ``--from/--to/
    --pos`` take; ``original`` reads the session file itself."""
    r = resolve_session(conn, ref)
    if not r.catalogued or original:
        return r
    w = working_file(r.path)
    if w == original_path(r.path):
        return r
    return SessionRef(None, str(w), None, copy_kind(w), _copy_of(w))


def current_session(conn: sqlite3.Connection, session_id: str, cwd: str | Path) -> dict:
    """`txdb current`: the session file of ``session_id`` (its id, path and
    whether it exists). A session that has written no line yet has no file:
    its path is where Claude Code will write it, the project folder of
    ``cwd`` under the first projects root."""
    if not session_id or session_id in (".", "..") or any(
            not (c.isascii() and (c.isalnum() or c in "-_.")) for c in session_id):
        raise SessionNotFound(f"{session_id!r} is not a session id")
    try:
        path = resolve_session(conn, session_id).path
    except SessionNotFound:
        path = str(config.projects_roots()[0] / config.project_folder(cwd) / (session_id + SESSION_SUFFIX))
    return {"id": session_id, "path": path, "exists": os.path.exists(path)}


def _find_in_root(root: Path, name: str) -> Path | None:
    """``<root>/<project>/<name>``, the name taken literally."""
    try:
        projects = sorted(d for d in root.iterdir() if d.is_dir())
    except OSError:
        return None
    for d in projects:
        p = d / name
        if p.is_file():
            return p
    return None


def _resolve_path(conn, ref: str, mutating: bool, index: bool = True) -> SessionRef:
    p = Path(ref).expanduser().absolute()
    if is_pending_name(p.name) and not p.is_file():
        # The pending copy of a symlinked session lives beside the file the link points at.
        real = Path(os.path.realpath(session_of_copy(p)))
        beside = pending_of(real)
        if not beside.is_file():
            raise SessionNotFound(f"no pending copy at {ref} (the original is {session_of_copy(p)}; "
                                  "a surgery command or `txdb snapshot` makes one)")
        p = beside
    if not is_session_path(p):
        if not mutating:
            if not p.is_file():
                raise SessionNotFound(f"{ref} is a folder, not a session file" if p.is_dir() else f"no file at {ref}")
            return SessionRef(None, str(p), None, copy_kind(p), _copy_of(p))
        if not is_pending_name(p.name):
            raise NotASession(f"{ref} is {copy_kind(p)}, not a session: txdb never changes it "
                              "(name the session instead)")
        p = session_of_copy(p)
    if not p.is_file():
        raise SessionNotFound(f"no session file at {ref}")
    path = catalogued_path(conn, p)
    if not index:
        return _ref(conn, path) if path is not None else _unindexed(p)
    if path is None:
        from txdb.catalog.ingest.store import refresh_path
        refresh_path(conn, p)
        path = catalogued_path(conn, p)
    elif stale(conn, path):
        _refresh_stale(conn, path)
    return _ref(conn, path)


def list_sessions(conn, project: str | None = None, limit: int | None = None,
                  include_subagents: bool = False, order: str = "last_timestamp") -> list[dict]:
    where = ["1 = 1"]
    params: list = []
    if project:
        where.append("project LIKE ? ESCAPE '\\'")  # contains it, taken literally
        params.append(f"%{db.like_literal(project)}%")
    if not include_subagents:
        where.append("parent_session_id IS NULL")
    orders = {
        "last_timestamp": "last_timestamp DESC",
        "tokens": "est_context_tokens DESC",
        "size": "file_bytes DESC",
        "cost": "cost_usd IS NULL, cost_usd DESC",
    }
    sql = (
        "SELECT session_id, project, title, last_timestamp, first_timestamp, lines, chain_length, "
        "est_context_tokens, gauge_tokens, cost_usd, unpriced_messages, file_bytes, path, file_id, "
        # Secrets found by the last `txdb secrets scan`; NULL for a file no scan has read.
        "(SELECT CASE WHEN sc.file_id IS NOT NULL THEN (SELECT count(*) FROM secret_findings x "
        " WHERE x.file_id = sc.file_id) END FROM secret_scans sc WHERE sc.file_id = session_costs.file_id) "
        "AS secrets, "
        # How close to its window (sessions_near_limit: sessions only; a subagent's are NULL).
        "window_tokens, pct_of_window, status, gone "
        "FROM (SELECT c.*, n.window_tokens, n.pct_of_window, n.status FROM session_costs c "
        "      LEFT JOIN sessions_near_limit n ON n.file_id = c.file_id) session_costs WHERE "
        + " AND ".join(where) + f" ORDER BY {orders.get(order, orders['last_timestamp'])}"
    )
    if limit:
        sql += " LIMIT ?"
        params.append(limit)
    return _rows(conn, sql, params)


def gone_sessions(conn, project: str | None = None, limit: int | None = None) -> list[dict]:
    """Sessions whose file vanished from disk, newest loss first (view gone_sessions)."""
    sql, params = "SELECT * FROM gone_sessions", []
    if project:
        sql += " WHERE project LIKE ? ESCAPE '\\'"
        params.append(f"%{db.like_literal(project)}%")
    if limit:
        sql += " LIMIT ?"
        params.append(limit)
    return _rows(conn, sql, params)


def analyze(conn: sqlite3.Connection, file_id: int) -> dict:
    """The analyze report (docs/commands-guide.md, "txdb analyze SESSION"), from the catalog."""
    session = _rows(conn, "SELECT * FROM session_costs WHERE file_id = ?", (file_id,))
    by_type = _rows(
        conn,
        "SELECT category, items, chars, signature_chars, tokens FROM analyze_by_type "
        "WHERE file_id = ? ORDER BY tokens DESC",
        (file_id,),
    )
    by_tool = _rows(
        conn,
        "SELECT tool_name, calls, errors, input_tokens, result_tokens, tokens FROM analyze_by_tool "
        "WHERE file_id = ? ORDER BY tokens DESC",
        (file_id,),
    )
    attachments = _rows(
        conn,
        "SELECT type, policy, count, tokens, kept, dropped, dropped_tokens, free "
        "FROM attachments_by_type WHERE file_id = ? ORDER BY tokens DESC",
        (file_id,),
    )
    health = _rows(
        conn,
        "SELECT problem, severity, count(*) AS count, min(line) AS first_line FROM chain_health "
        "WHERE file_id = ? GROUP BY problem, severity ORDER BY severity",
        (file_id,),
    )
    # Cut points: human prompts (view human_prompts) along the chain, with the tokens before each.
    cut_points = _rows(
        conn,
        "SELECT pos, line, timestamp, before_tokens FROM ("
        "  SELECT c.pos, r.line, r.timestamp, r.offset, "
        "         sum(r.tokens) OVER (ORDER BY c.pos ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)"
        "           AS before_tokens "
        "  FROM chain c JOIN records r ON r.file_id = c.file_id AND r.offset = c.offset "
        "  WHERE c.file_id = ?1) x "
        "WHERE EXISTS (SELECT 1 FROM human_prompts h WHERE h.file_id = ?1 AND h.offset = x.offset) ORDER BY pos",
        (file_id,),
    )
    on_disk = _rows(
        conn,
        "SELECT CASE WHEN journal = 1 THEN 'journal' "
        "            WHEN on_chain = 1 THEN 'active chain' ELSE 'off chain' END AS part, "
        "count(*) AS records, sum(bytes) AS bytes FROM record_costs WHERE file_id = ? GROUP BY part",
        (file_id,),
    )
    images = _rows(
        conn,
        "SELECT coalesce(sum(CASE b.kind WHEN 'image' THEN 1 ELSE b.images END), 0) AS images, "
        "coalesce(sum(CASE WHEN b.kind = 'tool_result' THEN b.images ELSE 0 END), 0) AS in_tool_results, "
        "max(max(coalesce(b.width, 0), coalesce(b.height, 0))) AS largest_px "
        "FROM chain c JOIN blocks b ON b.file_id = c.file_id AND b.offset = c.offset "
        "WHERE c.file_id = ? AND (b.kind = 'image' OR (b.kind = 'tool_result' AND b.images > 0))",
        (file_id,),
    )[0]
    images["warnings"] = vision.limit_warnings(images["images"], images["in_tool_results"],
                                               images["largest_px"] or None)
    # What is persisted (markers on the active chain) and what it saved.
    persisted = _rows(
        conn,
        "SELECT kind, count(*) AS markers, sum(original_chars) AS original_chars, "
        "sum(marker_chars) AS marker_chars, sum(saved_chars) AS saved_chars "
        "FROM persisted WHERE file_id = ? AND on_chain = 1 GROUP BY kind ORDER BY saved_chars DESC",
        (file_id,),
    )
    for row in persisted:
        row["saved_tokens"] = tokens.text_tokens(row["saved_chars"] or 0)
    # What of this file txdb does not model (the format_census view's rule).
    not_modelled = _rows(
        conn,
        "SELECT f.kind, f.name, f.version, f.n AS count FROM file_formats f "
        "JOIN format_census c ON c.version = f.version AND c.kind = f.kind AND c.name = f.name "
        "WHERE f.file_id = ? AND c.modelled = 0 ORDER BY f.kind, f.n DESC, f.name",
        (file_id,),
    )
    from txdb.catalog.estimate import catalog_breakdown, session_estimate

    est = session_estimate(conn, file_id)
    return {
        "session": session[0] if session else None,
        "estimate": est,
        # restated to add up to the estimate (the session page's table too); raw_tokens: chars/4
        "by_type": catalog_breakdown(conn, file_id, by_type, est),
        "by_tool": by_tool,
        "attachments": attachments,
        "on_disk": on_disk,
        "cut_points": cut_points,
        "health": health,
        "images": images,
        "persisted": persisted,
        "not_modelled": not_modelled,
    }


@contextlib.contextmanager
def reading(conn: sqlite3.Connection, ref: SessionRef):
    """(connection, file_id) to read a resolved SESSION's rows from. A file
    that is not a session (the pending copy, a backup) is never catalogued:
    it is indexed into a throwaway catalog, so the same queries run there and
    its chain positions are the file's own (for a pending copy, the ones the
    next pass uses)."""
    if ref.catalogued:
        yield conn, ref.file_id
        return
    # A private temporary database: in memory while small, spilled to a
    # temporary file (deleted on close) when the copy is large.
    scratch = sqlite3.connect("", isolation_level=None)
    try:
        db.register_functions(scratch)
        db.migrate(scratch)
        db.ensure_views(scratch)
        from txdb.catalog.ingest.store import refresh_path
        refresh_path(scratch, ref.path, sidecars=False)
        (file_id,) = scratch.execute("SELECT id FROM files").fetchone()
        yield scratch, file_id
    finally:
        scratch.close()


def file_info(ref: SessionRef) -> dict:
    """What a report says about the file it read."""
    return {"path": ref.path, "catalogued": ref.catalogued, "kind": ref.kind, "copy_of": ref.copy_of}


def analyze_session(conn: sqlite3.Connection, ref: SessionRef) -> dict:
    """The analyze report of a resolved SESSION (a pending copy or backup
    read through ``reading``)."""
    with reading(conn, ref) as (c, file_id):
        return {"file": file_info(ref), **analyze(c, file_id)}
