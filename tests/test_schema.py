"""The catalog's schema as a whole: what a blank catalog holds after its
migrations, what an older catalog becomes, inserts that name their columns,
and the one way a migration has stored figures re-derived."""

from __future__ import annotations

import sqlite3

import pytest

from conftest import copy_fixture_sessions
from txdb.catalog import db
from txdb.catalog.ingest.store import refresh

TABLES = {
    "_txdb_meta": ["key", "value"],
    "_txdb_migrations": ["name", "applied_at"],
    "attachments": ["file_id", "offset", "session_id", "type", "timestamp", "policy", "tokens", "from_rendered",
                    "free", "hook_event"],
    "blocks": ["file_id", "offset", "idx", "session_id", "role", "type", "kind", "tool_name", "tool_use_id",
               "is_error", "chars", "signature_chars", "media_type", "width", "height", "image_sha256", "images",
               "tokens", "text", "cut"],
    "blobs": ["sha256", "size", "data"],
    "blocks_fts": ["text"],
    "blocks_fts_config": ["k", "v"],
    "blocks_fts_data": ["id", "block"],
    "blocks_fts_docsize": ["id", "sz"],
    "blocks_fts_idx": ["segid", "term", "pgno"],
    "chain": ["file_id", "pos", "offset", "timestamp"],
    "chain_findings": ["file_id", "offset", "severity", "code", "detail"],
    "dangling_parents": ["file_id", "offset", "parent_uuid"],
    "file_formats": ["file_id", "version", "kind", "name", "n"],
    "history": ["id", "line_sha256", "source", "timestamp_ms", "timestamp", "session_id", "cwd", "project", "display",
                "pasted", "pasted_text", "raw"],
    "history_files": ["path", "size", "inode", "mtime_ns", "head_sha", "cursor", "lines", "refreshed_at"],
    "history_fts": ["display", "pasted_text"],
    "history_fts_config": ["k", "v"],
    "history_fts_data": ["id", "block"],
    "history_fts_docsize": ["id", "sz"],
    "history_fts_idx": ["segid", "term", "pgno"],
    "files": ["id", "path", "root", "project", "kind", "session_id", "size", "mtime_ns", "inode", "head_sha",
              "tail_sha", "cursor", "lines", "gone", "refreshed_at", "sha256", "sha_state", "gone_at", "mode"],
    "markers": ["file_id", "offset", "idx", "recorded_size", "text"],
    "parse_errors": ["file_id", "line", "offset", "length", "message", "recovered"],
    "prices": ["model", "valid_from", "valid_until", "above_tokens", "priced_as", "input_mtok", "output_mtok",
               "cache_read_mtok", "cache_write_5m_mtok", "cache_write_1h_mtok", "library", "library_version",
               "data_date", "provider", "resembles"],
    "secret_scans": ["file_id", "scanned_to", "scanned_at"],
    "secret_findings": ["file_id", "offset", "idx", "field", "start", "length", "line", "col", "type", "secret_sha256"],
    "records": ["file_id", "offset", "length", "line", "session_id", "type", "subtype", "uuid", "parent_uuid",
                "logical_parent_uuid", "leaf_uuid", "timestamp", "is_sidechain", "is_meta", "role", "model",
                "message_id", "request_id", "tokens", "compact_summary", "forked", "json"],
    "raw_chunks": ["id", "file_id", "first_offset", "last_offset", "lines", "bytes", "data"],
    "sessions": ["file_id", "session_id", "parent_session_id", "agent_id", "project", "title", "title_source",
                 "cwd", "git_branch", "version", "model", "first_timestamp", "last_timestamp", "lines", "messages",
                 "leaf_uuid", "chain_length", "chain_tokens", "chain_bytes", "record_bytes", "journal_bytes",
                 "est_context_tokens", "est_method", "est_turns", "long_context", "est_factor_logged"],
    "sidecars": ["id", "path", "root", "project", "session_id", "rel", "sha256", "size", "mtime_ns", "gone",
                 "gone_at", "refreshed_at", "mode"],
    "type_sums": ["file_id", "session_id", "category", "items", "chars", "signature_chars", "tokens"],
    "waste_found": ["file_id", "kind", "pos", "line", "item", "detail", "tokens", "resent_turns", "paid_turns"],
    "pruned_sessions": ["path", "session_id", "kind", "lines", "bytes", "pruned_at"],
    "restored_copies": ["path", "session_id", "source", "restored_at"],
    "surgeries": ["id", "at", "command", "arguments", "session_id", "file_id", "path", "backup_path",
                  "records_changed", "tokens_before", "tokens_after", "result_size", "result_sha256", "stale_from",
                  "fit_overhead", "fit_factor"],
    "usage": ["file_id", "message_id", "offset", "request_id", "session_id", "timestamp", "model", "input_tokens",
              "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens",
              "ephemeral_5m_input_tokens", "ephemeral_1h_input_tokens", "service_tier", "iterations",
              "gauge_input_tokens", "gauge_cache_read_input_tokens", "gauge_cache_creation_input_tokens",
              "gauge_iterations", "in_file", "rewritten", "invalid", "billed"],
}
VIEWS = {
    "active_chain", "analyze_by_tool", "analyze_by_type", "attachment_policy", "attachment_targets",
    "attachments_by_type", "billed_cost", "billed_usage", "block_targets", "cli_cost", "chain_health",
    "chain_problems", "chain_targets", "context_by_category", "context_by_tool", "context_gauge",
    "costliest_tool_calls", "format_census", "gone_sessions", "history_sessions", "human_prompts", "image_targets", "known_formats", "model_windows",
    "persisted", "persisted_by_session", "record_costs", "search_blocks", "search_messages", "search_thinking",
    "search_tool_input", "search_tool_output", "secrets", "session_costs", "session_usage", "sessions_by_context",
    "sessions_by_size", "sessions_near_limit", "sidecars_by_session", "surgery_log", "system_prompt",
    "repeated_reads", "usage_blocks", "usage_by_day", "usage_by_model", "usage_context", "waste", "waste_items",
}
INDEXES = {
    "attachments_type", "blocks_kind_sizes", "blocks_sizes", "blocks_tool_pairs", "chain_record",
    "records_file_uuid", "records_forked", "records_roots", "records_sizes", "records_type",
    "raw_chunks_file", "sessions_session_id", "history_session",
    "sidecars_session", "sidecars_sha256", "pruned_sessions_session",
    "usage_message", "usage_model", "usage_timestamp", "type_sums_tokens", "waste_found_file",
}


def schema(conn: sqlite3.Connection) -> dict:
    """Every table's columns (name, type, not null, default, key), the views
    and the indexes, with the SQL that made each index."""
    tables = {t: [tuple(r[1:]) for r in conn.execute(f'PRAGMA table_info("{t}")')]
              for (t,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' "
                                       "AND name NOT LIKE 'sqlite_%' ORDER BY name")}
    views = {n for (n,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'view'")}
    indexes = dict(conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL"))
    return {"tables": tables, "views": views, "indexes": indexes}


def test_a_blank_catalog_has_the_whole_schema(tmp_path):
    conn = db.connect(tmp_path / "c.db")
    s = schema(conn)
    assert {t: [c[0] for c in cols] for t, cols in s["tables"].items()} == TABLES
    assert s["views"] == VIEWS
    assert set(s["indexes"]) == INDEXES
    for view in VIEWS:  # each view compiles against the tables
        conn.execute(f'SELECT * FROM "{view}" LIMIT 0').fetchall()
    conn.close()


@pytest.mark.parametrize("applied", range(1, len(db.migrations())))
def test_a_catalog_of_an_older_schema_migrates_to_the_current_one(tmp_path, applied):
    """A catalog made when only the first ``applied`` migrations existed
    (with a session in it) is, once opened, the schema of a blank catalog."""
    old = tmp_path / "old.db"
    raw = sqlite3.connect(old, isolation_level=None)
    db.register_functions(raw)  # as connect has them when its migrations run
    raw.execute("CREATE TABLE _txdb_migrations (name TEXT PRIMARY KEY, applied_at TEXT)")
    for name, sql in db.migrations()[:applied]:
        for statement in db._split(sql):
            raw.execute(statement)
        if name in db.PYTHON_STEPS:  # a migration's Python step ran with it then
            db.PYTHON_STEPS[name](raw)
        raw.execute("INSERT INTO _txdb_migrations VALUES (?, 'then')", (name,))
    raw.execute("INSERT INTO files (path, kind, size, inode) VALUES ('/x/s.jsonl', 'session', 10, 1)")
    raw.close()
    conn = db.connect(old)
    blank = db.connect(tmp_path / "blank.db")
    assert schema(conn) == schema(blank)
    assert [r[0] for r in conn.execute("SELECT name FROM _txdb_migrations ORDER BY name")] == \
        [n for n, _ in db.migrations()]
    assert conn.execute("SELECT path FROM files").fetchall() == [("/x/s.jsonl",)]


def test_refresh_names_the_columns_it_writes(tmp_path):
    """A column a later migration adds (appended by ALTER TABLE) takes its
    default: refresh's inserts name their columns, never rely on positions."""
    conn = db.connect(tmp_path / "c.db")
    for table in ("records", "blocks", "attachments", "parse_errors", "dangling_parents", "chain",
                  "chain_findings", "usage", "sessions"):
        conn.execute(f"ALTER TABLE {table} ADD COLUMN later TEXT DEFAULT 'later'")
    projects = copy_fixture_sessions(tmp_path / "projects")
    stats = refresh(conn, [projects])
    assert stats.files > 0
    fresh = db.connect(tmp_path / "fresh.db")
    refresh(fresh, [projects])
    for table in ("records", "blocks", "attachments", "parse_errors", "dangling_parents", "chain",
                  "chain_findings", "usage"):
        n = fresh.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
        assert conn.execute(f"SELECT count(*) FROM {table} WHERE later = 'later'").fetchone()[0] == n, table
    assert conn.execute("SELECT sum(tokens), sum(length(txdb_json(file_id, offset))) FROM records").fetchone() == \
        fresh.execute("SELECT sum(tokens), sum(length(txdb_json(file_id, offset))) FROM records").fetchone()


def test_the_reread_idiom_re_derives_stored_figures(tmp_path):
    """docs/architecture.md, "Re-deriving stored figures": a migration that
    changes a rule ends with `UPDATE files SET inode = NULL WHERE gone = 0`;
    the next refresh reads those files again from the start, and the API's
    usage figures are kept."""
    projects = copy_fixture_sessions(tmp_path / "projects")
    conn = db.connect(tmp_path / "c.db")
    refresh(conn, [projects])
    figures = "SELECT sum(tokens), (SELECT sum(chain_tokens) FROM sessions), " \
              "(SELECT count(*) FROM sessions WHERE est_context_tokens IS NOT NULL) FROM records"
    before = conn.execute(figures).fetchone()
    api = ("SELECT file_id, message_id, offset, input_tokens, output_tokens, cache_read_input_tokens, "
           "cache_creation_input_tokens, iterations, in_file FROM usage ORDER BY file_id, message_id")
    usage = conn.execute(api).fetchall()
    assert before[0] > 0 and usage
    # As an older rule would have left them:
    conn.execute("UPDATE records SET tokens = 0")
    conn.execute("UPDATE sessions SET chain_tokens = 0, est_context_tokens = NULL")
    refresh(conn, [projects])
    assert conn.execute(figures).fetchone() != before  # unchanged files are not read again
    conn.execute("UPDATE files SET inode = NULL WHERE gone = 0")
    refresh(conn, [projects])
    assert conn.execute(figures).fetchone() == before
    assert conn.execute(api).fetchall() == usage


def test_an_older_catalogs_raw_lines_come_back_byte_identical_after_the_upgrade(tmp_path):
    """Migration 035 takes the raw lines out of `records` into compressed
    chunks: every line of a catalog made before it (real sessions, CRLF and
    a fork's copy among them) is given back byte for byte, whole files
    rebuild to their recorded sha256, and the columns views read of a
    line's JSON are filled from it."""
    import hashlib

    from txdb.surgery import restore
    from txdb.catalog.ingest import chunks

    projects = copy_fixture_sessions(tmp_path / "projects")
    paths = sorted(projects.rglob("*.jsonl"))[:6]
    forked = b'{"type":"user","uuid":"f1","forkedFrom":{"sessionId":"s"},"isCompactSummary":true,"message":{}}'
    cost = b'{"type":"cost-state","totalCostUSD":1.5}'
    made = {"/made/crlf.jsonl": b'{"type":"user","a":1}\r\n' + forked + b"\r\n" + cost + b"\r\n"}
    for p in paths:
        made[str(p)] = p.read_bytes()
    old = tmp_path / "old.db"
    raw = sqlite3.connect(old, isolation_level=None)
    raw.execute("CREATE TABLE _txdb_migrations (name TEXT PRIMARY KEY, applied_at TEXT)")
    for name, sql in db.migrations():
        if name >= "035":
            break
        for statement in db._split(sql):
            raw.execute(statement)
        raw.execute("INSERT INTO _txdb_migrations VALUES (?, 'then')", (name,))
    lines_of: dict[int, list[tuple[int, bytes]]] = {}
    for path, data in made.items():
        fid = raw.execute("INSERT INTO files (path, kind, size, sha256, gone) VALUES (?, 'session', ?, ?, 1)",
                          (path, len(data), hashlib.sha256(data).hexdigest())).lastrowid
        at, lines = 0, []
        for number, line in enumerate(data.splitlines(keepends=True), 1):
            body = line.rstrip(b"\r\n")
            if body:
                raw.execute("INSERT INTO records (file_id, offset, length, line, raw) VALUES (?, ?, ?, ?, "
                            "CAST(? AS TEXT))", (fid, at, len(body), number, body))
                lines.append((at, body))
            at += len(line)
        raw.execute("UPDATE records SET type = json_extract(raw, '$.type') WHERE file_id = ? AND json_valid(raw)",
                    (fid,))
        lines_of[fid] = lines
    raw.close()
    conn = db.connect(old)
    assert conn.execute("SELECT 1 FROM sqlite_master WHERE name = '_records_legacy'").fetchone() is None
    assert conn.execute("SELECT count(DISTINCT file_id) FROM raw_chunks").fetchone() == \
        conn.execute("SELECT count(DISTINCT file_id) FROM records").fetchone() == (sum(map(bool, lines_of.values())),)
    for (fid, path, sha) in conn.execute("SELECT id, path, sha256 FROM files").fetchall():
        assert list(chunks.raw_lines(conn, fid)) == lines_of[fid], path
        assert restore.rebuild_whole(conn, fid, sha) == made[path], path
    (fid,) = conn.execute("SELECT id FROM files WHERE path = '/made/crlf.jsonl'").fetchone()
    assert conn.execute("SELECT type, forked, compact_summary, json FROM records WHERE file_id = ? ORDER BY offset",
                        (fid,)).fetchall() == [("user", None, None, None), ("user", 1, 1, None),
                                               ("cost-state", None, None, cost.decode())]
    assert conn.execute("SELECT cli_cost_usd FROM cli_cost WHERE file_id = ?", (fid,)).fetchone() == (1.5,)
    assert conn.execute("SELECT txdb_json(file_id, offset) FROM records WHERE file_id = ? AND line = 2",
                        (fid,)).fetchone() == (forked.decode(),)


def _long_texts_session(projects) -> None:
    """A session whose tool input and output are longer than blocks.text
    keeps of them (a word past the cut in each), with a long Read input."""
    import json

    far = "word " * 700
    lines = [
        {"type": "user", "uuid": "u1", "parentUuid": None, "sessionId": "s-long", "timestamp": "2026-01-01T00:00:00Z",
         "message": {"role": "user", "content": "run it"}},
        {"type": "assistant", "uuid": "a1", "parentUuid": "u1", "sessionId": "s-long",
         "timestamp": "2026-01-01T00:00:01Z",
         "message": {"role": "assistant", "id": "m1", "model": "claude-sonnet-4-5", "content": [
             {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": far + "zyzzogeton input"}},
             {"type": "tool_use", "id": "t2", "name": "Read", "input": {"file_path": "/x/" + "r" * 2100}}]}},
        {"type": "user", "uuid": "u2", "parentUuid": "a1", "sessionId": "s-long", "timestamp": "2026-01-01T00:00:02Z",
         "message": {"role": "user", "content": [
             {"type": "tool_result", "tool_use_id": "t1", "content": far + "zyzzogeton output \u00e9\U0001f600"},
             {"type": "tool_result", "tool_use_id": "t2", "content": "short"}]}},
    ]
    folder = projects / "-long"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "s-long.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")


def test_an_older_catalogs_texts_stay_whole_and_searchable_after_038_cuts_them(tmp_path):
    """Migration 038 keeps only the first 2001 characters of a long tool
    input or output in blocks.text: a catalog made before it (refreshed,
    then rewound, so every text is whole again) upgrades with nothing lost:
    every block's whole text (txdb_text) as before, a word past the cut
    found by search with its excerpt, the same rows as a fresh catalog, and
    three indexes fewer."""
    from rewind import rewind
    from txdb.catalog import search
    from txdb.catalog.ingest.chunks import WHOLE_TEXT

    projects = copy_fixture_sessions(tmp_path / "projects")
    _long_texts_session(projects)
    fresh = db.connect(tmp_path / "fresh.db")
    refresh(fresh, [projects])
    whole = f"SELECT file_id, offset, idx, {WHOLE_TEXT.format('b')} FROM blocks b ORDER BY 1, 2, 3"
    stored = "SELECT file_id, offset, idx, text, cut FROM blocks ORDER BY 1, 2, 3"
    assert fresh.execute("SELECT kind, length(text) FROM blocks WHERE cut = 1 AND session_id = 's-long' "
                         "ORDER BY kind").fetchall() == [("tool_result", 400), ("tool_use", 400)]
    assert fresh.execute("SELECT 1 FROM blocks WHERE tool_name = 'Read' AND kind = 'tool_use' "
                         "AND length(text) > 2001 AND cut IS NULL").fetchone()
    hits = search.search(fresh, "zyzzogeton", limit=None)
    assert sorted(h["kind"] for h in hits) == ["tool_result", "tool_use"]
    assert all("\u00bbzyzzogeton\u00ab" in h["excerpt"] for h in hits)

    old = tmp_path / "old.db"
    conn = db.connect(old)
    refresh(conn, [projects])
    texts = conn.execute(whole).fetchall()
    assert texts == fresh.execute(whole).fetchall()
    undone = rewind(conn, "038")  # latest first, whichever came after 039
    assert undone[-2:] == ["039_type_sums", "038_text_once"] and undone == sorted(undone, reverse=True)
    assert conn.execute("SELECT file_id, offset, idx, text FROM blocks ORDER BY 1, 2, 3").fetchall() == texts
    assert conn.execute("SELECT count(*) FROM blocks_fts WHERE blocks_fts MATCH 'zyzzogeton'").fetchone() == (2,)
    conn.close()

    conn = db.connect(old)  # 038 runs (and 040)
    assert conn.execute(whole).fetchall() == texts
    assert conn.execute(stored).fetchall() == fresh.execute(stored).fetchall()
    assert search.search(conn, "zyzzogeton", limit=None) == hits
    assert search.search(conn, "word", limit=None) == search.search(fresh, "word", limit=None)
    names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    assert not names & {"records_session", "blocks_kind", "usage_session"}


def test_040_cuts_texts_to_400_and_packs_raw_lines_in_larger_chunks_losing_nothing(tmp_path, monkeypatch):
    """Migration 040 on a catalog made before it (texts cut at 2001
    characters, raw lines in small chunks): its stored rows become a fresh
    catalog's (400 characters of a long tool text), every whole text, raw
    line and search hit is as before, and the raw lines sit in fewer
    chunks."""
    from rewind import rewind
    from txdb.catalog import search
    from txdb.catalog.ingest import chunks
    from txdb.catalog.ingest.chunks import WHOLE_TEXT, raw_lines

    projects = copy_fixture_sessions(tmp_path / "projects")
    _long_texts_session(projects)
    fresh = db.connect(tmp_path / "fresh.db")
    refresh(fresh, [projects])
    whole = f"SELECT file_id, offset, idx, {WHOLE_TEXT.format('b')} FROM blocks b ORDER BY 1, 2, 3"
    stored = "SELECT file_id, offset, idx, text, cut FROM blocks ORDER BY 1, 2, 3"
    chunk_count = "SELECT count(*) FROM raw_chunks"

    def raws(c):
        return {fid: list(raw_lines(c, fid)) for fid, in c.execute("SELECT id FROM files ORDER BY id").fetchall()}

    monkeypatch.setattr(chunks, "CHUNK_BYTES", 2048)  # the older catalog's chunks: small
    old = tmp_path / "old.db"
    conn = db.connect(old)
    refresh(conn, [projects])
    hits = {w: search.search(conn, w, limit=None) for w in ("zyzzogeton", "word", "file")}
    undone = rewind(conn, "040")  # latest first, whichever came after 040
    assert undone[-1] == "040_smaller_archive" and undone == sorted(undone, reverse=True)
    assert conn.execute("SELECT kind, length(text) FROM blocks WHERE cut = 1 AND session_id = 's-long' "
                        "ORDER BY kind").fetchall() == [("tool_result", 2001), ("tool_use", 2001)]
    assert conn.execute("SELECT count(*) FROM blocks WHERE cut IS NULL AND length(text) > 400 "
                        "AND kind IN ('tool_result', 'tool_use') AND tool_name IS NOT 'Read'").fetchone()[0] > 0
    texts, lines, small = conn.execute(whole).fetchall(), raws(conn), conn.execute(chunk_count).fetchone()[0]
    conn.close()

    monkeypatch.setattr(chunks, "CHUNK_BYTES", 64 << 10)
    conn = db.connect(old)  # 040 runs
    assert conn.execute(stored).fetchall() == fresh.execute(stored).fetchall()
    assert conn.execute(whole).fetchall() == texts == fresh.execute(whole).fetchall()
    assert raws(conn) == lines
    assert conn.execute(chunk_count).fetchone()[0] < small
    assert {w: search.search(conn, w, limit=None) for w in hits} == hits
    assert all(search.search(fresh, w, limit=None) == h for w, h in hits.items())
    assert hits["zyzzogeton"] and hits["word"]
