"""The line types of newer CLI releases: what txdb calls each, end to end."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
from click.testing import CliRunner

from txdb.catalog import db
from txdb.cli import cli
from txdb.model.records import ENVELOPE_KEYS, LINE_TYPES
from rewind import rewind

TOOLS_DIR = Path(__file__).parent / "data" / "cli" / "-tmp-txdb-cli-fixtures-tools-demo"


def _with_new_lines(tmp_path, monkeypatch) -> Path:
    """The CLI fixture session plus the lines CLI 2.1.332 adds."""
    monkeypatch.setenv("TXDB_DB", str(tmp_path / "catalog.db"))
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "claude"))
    src = next(TOOLS_DIR.glob("*.jsonl"))
    proj = tmp_path / "claude" / "projects" / TOOLS_DIR.name
    proj.mkdir(parents=True)
    f = proj / src.name
    sid = src.stem
    extra = [
        {"type": "api-request-resumed", "sessionId": sid, "timestamp": "2026-01-01T00:00:00.000Z",
         "version": "2.1.332", "messageId": "msg_x", "pausedRequestId": "req_x"},
        {"type": "resume-head-vouch", "sessionId": sid, "sum": "abc123"},
        {"type": "session-owner", "accountUuid": "u-1", "sessionId": sid},
        {"type": "derived-from", "v": 1, "sessionId": sid, "sessions": []},
    ]
    f.write_bytes(src.read_bytes() + b"".join(orjson.dumps(o) + b"\n" for o in extra))
    return f


def test_new_journal_and_session_bound_lines(tmp_path, monkeypatch):
    f = _with_new_lines(tmp_path, monkeypatch)
    r = CliRunner().invoke(cli, ["fork", str(f), "--json"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    fork = Path(json.loads(r.output)["target"])
    types = {orjson.loads(x).get("type") for x in fork.read_bytes().splitlines()}
    # Bound to the original file: the journal line and the vouch for its resume-head.jsonl.
    assert not types & {"api-request-resumed", "resume-head-vouch"}
    # State of the session that a fork carries on.
    assert {"session-owner", "derived-from"} <= types
    # a pass writing a fork does not index the original first: index it to read its records
    assert CliRunner().invoke(cli, ["refresh"], catch_exceptions=False).exit_code == 0
    conn = db.connect(tmp_path / "catalog.db")
    (journal,) = conn.execute("SELECT journal FROM record_costs WHERE type = 'api-request-resumed'").fetchone()
    assert journal == 1
    conn.close()


def test_known_formats_view_is_the_python_list(tmp_path):
    conn = db.connect(tmp_path / "c.db")
    lines = dict(conn.execute("SELECT name, class FROM known_formats WHERE kind = 'line'").fetchall())
    keys = {r[0] for r in conn.execute("SELECT name FROM known_formats WHERE kind = 'key'")}
    conn.close()
    assert lines == LINE_TYPES and keys == ENVELOPE_KEYS


# --------------------------------------------------------------------------
# the format census: what each release writes, and what txdb does not model

NEW_THINGS = [
    # a line type, a key, an attachment type and a block type no txdb knows
    {"type": "brand-new-line", "sessionId": "s", "version": "9.9.9", "novelKey": 1},
    {"type": "attachment", "uuid": "a-new", "parentUuid": None, "sessionId": "s", "version": "9.9.9",
     "timestamp": "2026-01-01T00:00:00.000Z", "attachment": {"type": "brand_new_reminder"}},
    {"type": "user", "uuid": "u-new", "parentUuid": "a-new", "sessionId": "s", "version": "9.9.9",
     "timestamp": "2026-01-01T00:00:01.000Z",
     "message": {"role": "user", "content": [{"type": "container_upload", "file_id": "f"},
                                             {"type": "web_search_tool_result", "tool_use_id": "t",
                                              "content": []}]}},
]


def _expected_census(path: Path) -> dict:
    """(version, kind, name) -> (count, modelled), from the file and the
    Python homes of the known sets (records, policy)."""
    from txdb.model.policy import policy_class
    from txdb.model.records import block_rows, message_content, record_kind

    out: dict = {}
    objs = [orjson.loads(x) for x in path.read_bytes().splitlines() if x.strip()]
    session_version = next(o["version"] for o in objs if o.get("type") in ("user", "assistant"))

    def add(v, kind, name, known):
        n, _ = out.get((v, kind, name), (0, known))
        out[(v, kind, name)] = (n + 1, int(known))

    for o in objs:
        v = o.get("version") or session_version
        rtype, subtype = record_kind(o)
        add(v, "line", rtype, rtype in LINE_TYPES)
        for k in o:
            add(v, "key", k, k in ENVELOPE_KEYS)
        if rtype == "attachment":
            add(v, "attachment", subtype, policy_class(subtype) != "unknown")
        content = message_content(o)
        if content is not None:
            role = (o.get("message") or {}).get("role")
            for b in block_rows(content, role):
                add(v, "block", b["type"], b["kind"] != "other")
    return out


def _census(conn) -> dict:
    return {(v, k, n): (c, m) for v, k, n, m, c in
            conn.execute("SELECT version, kind, name, modelled, count FROM format_census")}


def test_format_census_is_what_the_files_hold_and_what_txdb_knows(tmp_path, monkeypatch):
    f = _with_new_lines(tmp_path, monkeypatch)
    runner = CliRunner()
    assert runner.invoke(cli, ["refresh"], catch_exceptions=False).exit_code == 0
    # an appended tail adds to the counts (a grown file is read from its cursor)
    with open(f, "ab") as fh:
        fh.write(b"".join(orjson.dumps(o) + b"\n" for o in NEW_THINGS))
    assert runner.invoke(cli, ["refresh"], catch_exceptions=False).exit_code == 0
    conn = db.connect(tmp_path / "catalog.db")
    got = _census(conn)
    assert got == _expected_census(f)
    unknown = {(v, k, n) for (v, k, n), (_c, m) in got.items() if not m}
    assert {("9.9.9", "line", "brand-new-line"), ("9.9.9", "key", "novelKey"),
            ("9.9.9", "attachment", "brand_new_reminder"), ("9.9.9", "block", "container_upload")} <= unknown
    # the new lines of 2.1.332 are known; a line without a version counts under its session's
    assert got[("2.1.332", "line", "api-request-resumed")] == (1, 1)
    assert got[("2.1.328", "line", "session-owner")] == (1, 1)
    assert got[("9.9.9", "block", "web_search_tool_result")][1] == 1
    # analyze names what of the session txdb does not model
    r = runner.invoke(cli, ["analyze", str(f)], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    assert "Not modelled by txdb" in r.output and "brand-new-line (1)" in r.output
    assert "container_upload (1)" in r.output and "novelKey (1)" in r.output
    # a rewritten file is counted again from its start, not on top
    f.write_bytes(b"".join(x + b"\n" for x in f.read_bytes().splitlines()[1:]))
    assert runner.invoke(cli, ["refresh"], catch_exceptions=False).exit_code == 0
    assert _census(conn) == _expected_census(f)
    conn.close()


def test_format_census_of_a_catalog_an_older_txdb_made(tmp_path, monkeypatch):
    """The migration fills the census from the rows an older txdb stored:
    the same as a refresh makes."""
    f = _with_new_lines(tmp_path, monkeypatch)
    with open(f, "ab") as fh:
        fh.write(b"".join(orjson.dumps(o) + b"\n" for o in NEW_THINGS))
    assert CliRunner().invoke(cli, ["refresh"], catch_exceptions=False).exit_code == 0
    conn = db.connect(tmp_path / "catalog.db")
    made = _census(conn)
    rewind(conn, "012")  # the schema before the census: records hold their raw lines again
    conn.close()
    conn = db.connect(tmp_path / "catalog.db")
    assert _census(conn) == made == _expected_census(f)
    conn.close()


def test_block_types_are_what_block_rows_reads():
    from fnmatch import fnmatchcase

    from txdb.model.records import BLOCK_TYPES, block_rows

    names = [t.replace("*", "web_search") for t in BLOCK_TYPES] + ["container_upload"]
    for name in names:
        (row,) = block_rows([{"type": name}], "assistant")
        known = any(fnmatchcase(name, p) for p in BLOCK_TYPES)
        assert (row["kind"] != "other") == known, name
