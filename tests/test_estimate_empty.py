"""Issue 19: a session whose active chain holds no message (an empty file, a
summary or a snapshot alone) has no context: `sessions` shows 0, not the
prior's overhead; one message is enough to show an estimate again."""
from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from txdb.cli import cli

SID = "0c0ffee0-0000-4000-8000-000000000001"
NO_CONVERSATION = {
    "empty": b"",
    "summary": orjson.dumps({"type": "summary", "summary": "Old work", "leafUuid": "gone-1"}) + b"\n",
    "snapshot": orjson.dumps({"type": "file-history-snapshot", "messageId": "m1", "isSnapshotUpdate": False,
                              "snapshot": {"messageId": "m1", "trackedFileBackups": {},
                                           "timestamp": "2026-01-01T00:00:00.000Z"}}) + b"\n",
}
MESSAGE = orjson.dumps({"type": "user", "uuid": "u-1", "parentUuid": None, "isSidechain": False,
                        "sessionId": SID, "timestamp": "2026-01-01T00:00:01.000Z",
                        "message": {"role": "user", "content": "hello"}}) + b"\n"


def run(*args):
    r = CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return r.output


def _shown(tmp_path: Path, data: bytes) -> tuple[int, str]:
    proj = tmp_path / "projects" / "-tmp-demo"
    proj.mkdir(parents=True)
    f = proj / f"{SID}.jsonl"
    f.write_bytes(data)
    dbp = tmp_path / "c.db"
    run("refresh", "--root", tmp_path / "projects", "--db", dbp)
    rows = orjson.loads(run("sessions", "--db", dbp))
    assert [r["path"] for r in rows] == [str(f)]
    return rows[0]["est_context_tokens"], run("analyze", f, "--db", dbp)


@pytest.mark.parametrize("kind", sorted(NO_CONVERSATION))
def test_a_session_without_a_message_shows_no_context(tmp_path, kind):
    shown, analyzed = _shown(tmp_path, NO_CONVERSATION[kind])
    assert shown == 0
    assert "Estimated context: 0 tokens" in analyzed and "no message on the active chain" in analyzed


def test_one_message_shows_an_estimate(tmp_path):
    shown, analyzed = _shown(tmp_path, NO_CONVERSATION["snapshot"] + MESSAGE)
    assert shown > 0 and f"Estimated context: {shown:,} tokens" in analyzed
