"""Stored figures of a catalog an older txdb built follow the current rules
once a command opens it (docs/architecture.md, "Re-deriving stored
figures"): the estimates are computed again from the catalog at that open,
once; a file whose sizes need reading again is read by a command on its
session, and the commands over the whole catalog say so in one line until a
refresh has read it."""

from __future__ import annotations

import json
import sqlite3

from conftest import copy_fixture_sessions, run
from rewind import rewind
from sessions import assistant, pdf_block, pdf_bytes, user, write
from txdb.catalog import db
from txdb.catalog.ingest.store import refresh

ESTIMATES = "SELECT session_id, est_context_tokens, est_method, est_turns FROM sessions ORDER BY file_id"


def shown(r) -> dict:
    """session id -> est. context tokens, as `txdb sessions --json` shows them."""
    assert r.exit_code == 0, r.output
    return {s["session_id"]: s["est_context_tokens"] for s in json.loads(r.stdout)}


def test_an_older_catalogs_estimates_are_computed_again_when_it_is_opened(tmp_path):
    projects = copy_fixture_sessions(tmp_path / "projects")
    path = tmp_path / "c.db"
    conn = db.connect(path)
    refresh(conn, [projects])
    fresh = conn.execute(ESTIMATES).fetchall()
    assert len(fresh) > 5 and all(e is not None for _s, e, _m, _t in fresh)
    # As an older txdb left it: before migration 026, each session's estimate
    # by the rules of its day (here: all of them off), its files unchanged.
    rewind(conn, "026")
    # Its sizes current (027 re-reads files whose sizes changed: the other test's case).
    # (only 027: a later migration runs at the open, as on an older catalog)
    later = [name for name, _sql in db.migrations() if name.startswith("027_")]
    conn.executemany("INSERT INTO _txdb_migrations VALUES (?, datetime('now'))", [(n,) for n in later])
    conn.execute("UPDATE sessions SET est_context_tokens = est_context_tokens * 3 + 1000, est_method = 'older',"
                 " est_turns = 0")
    conn.close()

    r = run("sessions", "--db", path, "--json", "--subagents", "--limit", 1000)
    assert shown(r) == {s: e for s, e, _m, _t in fresh}
    assert "stale" not in r.stderr  # nothing left to do: no notice
    raw = sqlite3.connect(path)
    assert raw.execute(ESTIMATES).fetchall() == fresh  # stored, method and turns too
    # A second open does no work: a figure set behind txdb's back stays.
    raw.execute("UPDATE sessions SET est_context_tokens = 7 WHERE file_id = (SELECT min(file_id) FROM sessions)")
    raw.commit()
    raw.close()
    assert 7 in shown(run("sessions", "--db", path, "--json", "--subagents", "--limit", 1000)).values()


SID = "44444444-0000-0000-0000-000000000001"
OTHER = "44444444-0000-0000-0000-000000000002"


def test_a_file_an_older_rule_sized_is_read_again_or_named_stale(tmp_path, monkeypatch):
    """A document sized by its base64 (before migration 025): `analyze` of its
    session reads the file again first and shows a fresh refresh's figures;
    `sessions` says in one line that a refresh is due, until one has read it."""
    monkeypatch.setenv("TXDB_DB", str(tmp_path / "catalog.db"))
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "claude"))
    proj = tmp_path / "claude" / "projects" / "-home-me-app"
    u0 = user([pdf_block(pdf_bytes(3, pad_to=60_000)), {"type": "text", "text": "Summarise this"}], session=SID)
    write(proj / f"{SID}.jsonl", [u0, assistant("A summary.", u0["uuid"], session=SID)])
    u1 = user("no document here", session=OTHER)
    write(proj / f"{OTHER}.jsonl", [u1, assistant("Fine.", u1["uuid"], session=OTHER)])
    run("refresh", ok=True)
    fresh = json.loads(run("analyze", SID, "--json", ok=True).stdout)
    fresh_list = shown(run("sessions", "--json"))

    # As the older rule left it: the document sized as its base64 (chars/4).
    raw = sqlite3.connect(tmp_path / "catalog.db")
    raw.execute("UPDATE blocks SET tokens = tokens + 15000 WHERE type = 'document'")
    raw.execute("UPDATE records SET tokens = tokens + 15000 WHERE type = 'user' AND EXISTS (SELECT 1 FROM blocks b "
                "WHERE b.file_id = records.file_id AND b.offset = records.offset AND b.type = 'document')")
    raw.execute("UPDATE sessions SET chain_tokens = chain_tokens + 15000,"
                " est_context_tokens = est_context_tokens + 15000 WHERE session_id = ?", (SID,))
    raw.execute("DELETE FROM _txdb_migrations WHERE name LIKE '025%'")
    raw.commit()
    raw.close()

    r = run("sessions", "--json")
    assert r.exit_code == 0, r.output
    assert r.stderr.splitlines() == ["Note: figures stale for 1 session file (read by an older txdb): "
                                     "run `txdb refresh`"]
    json.loads(r.stdout)  # the listing itself is untouched by the note

    now = json.loads(run("analyze", SID, "--json", ok=True).stdout)
    assert now["estimate"] == fresh["estimate"]
    assert now["session"]["chain_tokens"] == fresh["session"]["chain_tokens"]
    r = run("sessions", "--json")
    assert shown(r) == fresh_list
    assert r.stderr == ""  # the one marked file was read again: no notice


def test_the_notice_names_the_root_a_refresh_needs_and_that_refresh_clears_it(tmp_path):
    # Files catalogued under a root refresh is not given by default: `txdb refresh`
    # alone never read them again, and the notice came back after it.
    projects = copy_fixture_sessions(tmp_path / "elsewhere")
    path = tmp_path / "c.db"
    conn = db.connect(path)
    refresh(conn, [projects])
    conn.execute("UPDATE files SET inode = NULL WHERE id = (SELECT min(id) FROM files WHERE gone = 0)")
    conn.commit()
    conn.close()
    r = run("sessions", "--db", path, "--json")
    (note,) = r.stderr.splitlines()
    command = note.split("run `", 1)[1].rstrip("`")
    assert f"--root {projects}" in command
    assert run(*command.split()[1:]).exit_code == 0
    assert "stale" not in run("sessions", "--db", path, "--json").stderr


def test_a_rules_bump_re_derives_once_when_the_catalog_is_opened(tmp_path, monkeypatch):
    """Issue 26: a rule change that only re-derives stored figures bumps
    ``rules.RULES_VERSION`` (no migration); the first open of a catalog
    recording an older version marks the files the bump names to be read
    again and computes every estimate again, once."""
    from txdb import rules

    projects = copy_fixture_sessions(tmp_path / "projects")
    path = tmp_path / "c.db"
    conn = db.connect(path)
    refresh(conn, [projects])
    fresh = conn.execute(ESTIMATES).fetchall()
    marked = {r[0] for r in conn.execute("SELECT DISTINCT file_id FROM blocks WHERE type = 'tool_use'")}
    assert 0 < len(marked) < conn.execute("SELECT count(*) FROM files WHERE gone = 0").fetchone()[0]
    # As the older rules left them:
    conn.execute("UPDATE sessions SET est_context_tokens = est_context_tokens * 3 + 1000, est_method = 'older'")
    older = conn.execute(ESTIMATES).fetchall()
    conn.close()
    db.connect(path).close()  # this txdb's rules are the catalog's: nothing to do
    raw = sqlite3.connect(path)
    assert raw.execute(ESTIMATES).fetchall() == older
    raw.close()

    bump = rules.Bump(rules.RULES_VERSION + 1, "tool calls sized anew",
                      reread="id IN (SELECT file_id FROM blocks WHERE type = 'tool_use')", estimates=True)
    monkeypatch.setattr(rules, "BUMPS", (*rules.BUMPS, bump))
    monkeypatch.setattr(rules, "RULES_VERSION", bump.version)
    r = run("sessions", "--db", path, "--json", "--subagents", "--limit", 1000)
    assert shown(r) == {s: e for s, e, _m, _t in fresh}
    assert f"figures stale for {len(marked)} session files" in r.stderr
    raw = sqlite3.connect(path)
    assert raw.execute(ESTIMATES).fetchall() == fresh
    assert {r[0] for r in raw.execute("SELECT id FROM files WHERE inode IS NULL")} == marked
    assert raw.execute("SELECT value FROM _txdb_meta WHERE key = 'rules_version'").fetchone() == (str(bump.version),)
    # Once: a second open re-derives nothing (a figure set behind txdb's back,
    # on a file the bump did not mark, stays).
    (other,) = raw.execute(f"SELECT min(file_id) FROM sessions WHERE file_id NOT IN ({','.join(map(str, marked))})"
                           ).fetchone()
    raw.execute("UPDATE sessions SET est_context_tokens = 7 WHERE file_id = ?", (other,))
    raw.commit()
    raw.close()
    refresh(db.connect(path), [projects])  # reads the marked files again
    conn = db.connect(path)
    assert conn.execute("SELECT count(*) FROM files WHERE inode IS NULL").fetchone() == (0,)
    assert conn.execute("SELECT est_context_tokens FROM sessions WHERE file_id = ?", (other,)).fetchone() == (7,)
    conn.close()
    assert "stale" not in run("sessions", "--db", path, "--json").stderr


def test_a_blank_catalog_records_the_current_rules_and_does_no_work(tmp_path, monkeypatch):
    from txdb import rules

    bump = rules.Bump(rules.RULES_VERSION + 1, "a later rule", reread="", estimates=True)
    monkeypatch.setattr(rules, "BUMPS", (*rules.BUMPS, bump))
    monkeypatch.setattr(rules, "RULES_VERSION", bump.version)
    conn = db.connect(tmp_path / "c.db")
    assert conn.execute("SELECT value FROM _txdb_meta WHERE key = 'rules_version'").fetchone() == (str(bump.version),)
    projects = copy_fixture_sessions(tmp_path / "projects")
    refresh(conn, [projects])
    conn.close()
    conn = db.connect(tmp_path / "c.db")  # made by these rules: no file marked again
    assert conn.execute("SELECT count(*) FROM files WHERE inode IS NULL").fetchone() == (0,)


def test_a_catalog_whose_appends_renamed_a_transcripts_session_reads_it_again(tmp_path):
    """Rules 2: an older txdb took an agent transcript's parent (beside the
    sessions) from its newest lines, and kept a session file's name as its
    id when its first lines named none. A catalog it left reads those
    files, and only those, again, and then names what a fresh build does."""
    projects = copy_fixture_sessions(tmp_path / "projects")
    path = tmp_path / "c.db"
    conn = db.connect(path)
    refresh(conn, [projects])
    named = "SELECT file_id, session_id, parent_session_id FROM sessions ORDER BY file_id"
    fresh = conn.execute(named).fetchall()
    (agent,) = conn.execute("SELECT id FROM files WHERE path LIKE '%agent-1d78a5e5.jsonl'").fetchone()
    session = conn.execute("SELECT s.file_id FROM sessions s JOIN files f ON f.id = s.file_id "
                           "WHERE f.kind = 'session' AND s.lines > 0 LIMIT 1").fetchone()[0]
    # As the older txdb left them (a parent its first lines do not name; an id they do not name first):
    conn.execute("UPDATE sessions SET parent_session_id = ? WHERE file_id = ?", (OTHER, agent))
    conn.execute("UPDATE sessions SET session_id = ? WHERE file_id = ?", (SID, session))
    conn.execute("UPDATE _txdb_meta SET value = '1' WHERE key = 'rules_version'")
    conn.commit()
    conn.close()
    conn = db.connect(path)
    assert {r[0] for r in conn.execute("SELECT id FROM files WHERE inode IS NULL")} == {agent, session}
    refresh(conn, [projects])
    assert conn.execute(named).fetchall() == fresh
    conn.close()
