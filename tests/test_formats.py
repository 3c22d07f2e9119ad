"""The line types of newer CLI releases: what txdb calls each, end to end."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import orjson
from click.testing import CliRunner

from txdb import db
from txdb.cli import cli
from txdb.records import ENVELOPE_KEYS, LINE_TYPES

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
