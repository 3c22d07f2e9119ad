"""--pos N (one chain position) on the surgery commands, and ranges the
chain does not have: one Error line, nothing written."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from conftest import run
from sessions import conversation, write

SID = "44444444-0000-0000-0000-000000000001"


@pytest.fixture
def session(tmp_path, monkeypatch):
    monkeypatch.setenv("TXDB_DB", str(tmp_path / "catalog.db"))
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "claude"))
    return write(tmp_path / "claude" / "projects" / "-home-me-app" / f"{SID}.jsonl", conversation(4, session=SID))


def _results(p: Path) -> list[str]:
    out = []
    for line in p.read_bytes().splitlines():
        for b in (orjson.loads(line).get("message") or {}).get("content") or ():
            if isinstance(b, dict) and b.get("type") == "tool_result":
                out.append(b["content"])
    return out


@pytest.mark.parametrize("cmd", ["strip-tools", "strip-all"])
def test_pos_is_one_position(session, cmd):
    r = run(cmd, session, "--pos", 6)             # the second turn's tool_result
    assert r.exit_code == 0, r.output
    res = _results(Path(str(session) + ".pending"))
    stripped = [i for i, c in enumerate(res) if c.startswith("[stripped by txdb")]
    assert stripped == [1]
    log = orjson.loads(Path(str(session) + ".pending.json").read_bytes())["passes"][0]["arguments"]
    assert log["pos"] == 6


def test_pos_with_from_or_to_is_refused(session):
    r = run("strip-tools", session, "--pos", 2, "--from", 1)
    assert r.exit_code == 2 and "--pos N is one position" in r.output


@pytest.mark.parametrize("args,msg", [
    (("--from", 16), "Error: --from 16 is past the end of the active chain (positions 0..15)"),
    (("--to", 40), "Error: --to 40 is past the end of the active chain (positions 0..15)"),
    (("--pos", 16), "Error: --pos 16 is past the end of the active chain (positions 0..15)"),
    (("--from", 9, "--to", 3), "--from 9 is after --to 3"),
])
def test_ranges_the_chain_does_not_have(session, args, msg):
    r = run("strip-thinking", session, *args)
    assert r.exit_code != 0 and msg in r.output and "Traceback" not in r.output
    assert not Path(str(session) + ".pending").exists()
