"""--pos N (one chain position) on the surgery commands, and ranges the
chain does not have: one Error line, nothing written."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from conftest import run
from sessions import attachment, conversation, write

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


# -- positions are the next surgery's (issue 19) ---------------------------------

def _with_reminders(n_turns: int) -> list[dict]:
    """conversation(n) with a date_change reminder after each prompt: each
    newer one supersedes the last, so strip-attachments drops all but the newest
    and every later position moves up."""
    out = []
    for o in conversation(n_turns, session=SID):
        if out and o["type"] == "user" and isinstance(o["message"]["content"], str):
            att = attachment({"type": "date_change", "newDate": f"2026-11-0{len(out) % 9 + 1}"},
                             out[-1]["uuid"], session=SID)
            o["parentUuid"] = att["uuid"]
            out.append(att)
        out.append(o)
    return out


def _json(*args):
    r = run(*args, "--json")
    assert r.exit_code == 0, r.output
    return orjson.loads(r.output)


def test_the_skill_workflow_compacts_the_tool_call_show_tool_listed(tmp_path, monkeypatch):
    """SKILL.md's slimming workflow, end to end: analyze, show-tool, a
    surgery that moves positions, show-tool again, compact-range at a
    position show-tool gave, apply: the call compacted is the one listed."""
    monkeypatch.setenv("TXDB_DB", str(tmp_path / "catalog.db"))
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "claude"))
    f = write(tmp_path / "claude" / "projects" / "-home-me-app" / f"{SID}.jsonl", _with_reminders(6))
    pending = Path(f"{f}.pending")
    assert run("refresh").exit_code == 0  # a reading command needs a catalog (the plugin's hooks make it)
    assert _json("analyze", SID)["file"]["path"] == str(f)
    before = {c["tool_use_id"]: c["pos"] for c in _json("show-tool", SID, "--list")["tool_calls"]}
    assert run("strip-attachments", SID).exit_code == 0 and pending.is_file()

    listed = _json("show-tool", SID, "--list")
    assert listed["file"] == {"path": str(pending), "catalogued": False, "kind": "the pending copy",
                              "copy_of": str(f)}
    calls = {c["tool_use_id"]: c for c in listed["tool_calls"]}
    assert calls["toolu_0004"]["pos"] < before["toolu_0004"]   # strip-attachments moved it up
    head = run("show-tool", SID, "--list").output.splitlines()[1]
    assert head == (f"Positions of {pending} (the pending copy of {f}: the file the next surgery "
                    "edits; not catalogued)")
    assert _json("analyze", SID)["file"]["path"] == str(pending)
    shown = _json("show-thinking", SID)
    assert shown["file"]["path"] == str(pending)

    call = calls["toolu_0004"]
    r = run("compact-range", SID, "--from", call["pos"], "--to", call["result_pos"],
            "--summary", "echo 4 ran")
    assert r.exit_code == 0, r.output
    assert run("apply", SID).exit_code == 0
    after = _json("show-tool", SID, "--list")
    assert after["file"]["path"] == str(f)                       # applied: no pending copy left
    assert [c["tool_use_id"] for c in after["tool_calls"]] == [
        "toolu_0000", "toolu_0001", "toolu_0002", "toolu_0003", "toolu_0005"]
    saved = list((f.parent / SID / "persisted").rglob("*"))
    texts = "".join(p.read_text() for p in saved if p.is_file())
    assert '"toolu_0004"' in texts and '"toolu_0003"' not in texts and '"toolu_0005"' not in texts
    # --original still reads the session file.
    assert run("strip-tools", SID, "--tools", "Bash").exit_code == 0
    assert _json("show-tool", SID, "--original", "--list")["file"]["path"] == str(f)
    assert _json("show-tool", SID, "--list")["file"]["path"] == str(pending)
