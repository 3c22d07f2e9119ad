"""compact-range: positions A..B become one plain user message carrying a
<persisted-range> marker; every record of the range is saved whole."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import orjson
import pytest

from conftest import run
from sessions import attachment, conversation, write
from txdb.surgery.compact_range import contiguous
from txdb.model.transcript import Transcript

SID = "44444444-0000-0000-0000-000000000001"


@pytest.fixture
def env(tmp_path, monkeypatch):
    monkeypatch.setenv("TXDB_DB", str(tmp_path / "catalog.db"))
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "claude"))
    proj = tmp_path / "claude" / "projects" / "-home-me-app"
    write(proj / f"{SID}.jsonl", conversation(6, session=SID))
    return proj


def _objs(p: Path) -> list[dict]:
    return [orjson.loads(line) for line in p.read_bytes().splitlines()]


def _pending(f: Path) -> Path:
    return Path(str(f) + ".pending")


def _text(o: dict) -> str:
    """A user record's text: a survivor's marker (the first block when it also
    carries the session's first prompt, compact_range._survivor)."""
    c = o["message"]["content"]
    return c if isinstance(c, str) else c[0].get("text", "") if c and isinstance(c[0], dict) else ""


def _folder(f: Path, sid: str = SID) -> Path:
    return f.parent / sid / "persisted" / "message"


def test_range_becomes_one_user_message_and_each_record_a_file(env):
    f = env / f"{SID}.jsonl"
    lines = f.read_bytes().splitlines()
    objs = _objs(f)
    r = run("compact-range", f, "--from", 4, "--to", 11, "--summary", "Turns 1 and 2:\n  two echoes",
            "--no-usage-reset")
    assert r.exit_code == 0, r.output
    assert "positions 4..11 (8 records) collapsed into one user message at position 4" in r.output
    assert f.read_bytes() == b"\n".join(lines) + b"\n"                     # the original is untouched
    new = _objs(_pending(f))
    folder = _folder(f)
    survivor = new[4]
    assert survivor == {
        "parentUuid": objs[3]["uuid"], "isSidechain": False, "type": "user",
        "message": {"role": "user", "content": (
            f'<persisted-range from="4" to="11" count="8">\n'
            f"Saved to: {folder} (8 files)\n"
            f"Summary: Turns 1 and 2: two echoes\n\n"
            f"Preview:\n[user] prompt 1\n[assistant] [tool_use Bash toolu_0001]\n"
            f"[user] [tool_result toolu_0001] {' '.join(['out 1'] * 20)}\n"
            f"[... 5 more]\n</persisted-range>")},
        "uuid": objs[4]["uuid"], "timestamp": objs[4]["timestamp"], "cwd": "/home/me/app",
        "sessionId": SID, "version": "2.1.300", "gitBranch": "main",
        "persistedRange": {"files": [f"{o['uuid']}.json" for o in objs[4:12]]}}
    # each record of the range, byte for byte, in a file named by its uuid
    assert sorted(p.name for p in folder.iterdir()) == sorted(f"{o['uuid']}.json" for o in objs[4:12])
    for line, o in zip(lines[4:12], objs[4:12]):
        assert (folder / f"{o['uuid']}.json").read_bytes() == line
    # untouched lines byte-identical; the record after the range hangs off the survivor
    out = _pending(f).read_bytes().splitlines()
    assert out[:4] == lines[:4] and out[6:] == lines[13:]
    assert new[5]["parentUuid"] == survivor["uuid"] and {k: v for k, v in new[5].items() if k != "parentUuid"} \
        == {k: v for k, v in objs[12].items() if k != "parentUuid"}
    chain = [r.uuid for r in Transcript.load(_pending(f)).chain]
    assert chain == [o["uuid"] for o in objs[:5] + objs[12:]]
    assert run("verify", _pending(f)).exit_code == 0
    assert run("apply", f).exit_code == 0
    log = json.loads(run("query", "select command, arguments from surgeries", "--json").output)
    assert log[0]["command"] == "compact-range"
    args = json.loads(log[0]["arguments"])
    args.pop("pass_at")
    assert isinstance(args.pop("swap"), str)  # the apply's swap journal entry
    assert args == {"frm": 4, "to": 11, "summary": "Turns 1 and 2:\n  two echoes",
                                                "no_usage_reset": True}


def test_refuses_the_leaf_and_a_cut_tool_call(env, tmp_path):
    f = env / f"{SID}.jsonl"
    r = run("compact-range", f, "--from", 20, "--to", 23)
    assert r.exit_code == 1
    assert r.output == ("Error: the range 20..23 holds the leaf message of the active chain (position 23): "
                        "resuming starts from it; end the range before it\n")
    r = run("compact-range", f, "--from", 4, "--to", 5)
    assert r.exit_code == 1 and ("splits tool call toolu_0001: the tool_use at position 5 is inside it and its "
                                 "tool_result at position 6 is not") in r.output
    r = run("compact-range", f, "--from", 6, "--to", 8)
    assert r.exit_code == 1 and ("splits tool call toolu_0001: the tool_result at position 6 is inside it and "
                                 "its tool_use at position 5 is not") in r.output
    r = run("compact-range", f, "--from", 8, "--to", 4)
    assert r.exit_code == 1 and r.output == "Error: --from 8 is after --to 4: give the range lowest position first\n"
    r = run("compact-range", f, "--from", 4, "--to", 99)
    assert r.exit_code == 1 and "--to 99 is past the end of the active chain (positions 0..23)" in r.output
    r = run("compact-range", f, "--from", 4)
    assert r.exit_code == 2 and "needs --from and --to" in r.output
    assert not _pending(f).exists() and not (env / SID).exists()        # nothing written


def test_refuses_a_range_between_a_call_and_its_result(tmp_path, monkeypatch):
    monkeypatch.setenv("TXDB_DB", str(tmp_path / "catalog.db"))
    objs = conversation(3, session=SID)
    # a reminder between the call (position 5) and its result
    att = attachment({"type": "date_change", "newDate": "2026-11-02"}, objs[5]["uuid"], session=SID)
    objs[6]["parentUuid"] = att["uuid"]
    f = write(tmp_path / "p" / f"{SID}.jsonl", objs[:6] + [att] + objs[6:])
    r = run("compact-range", f, "--pos", 6)
    assert r.exit_code == 1 and ("splits tool call toolu_0001: it sits between the tool_use at position 5 and "
                                 "its tool_result at position 7") in r.output


def test_running_it_again_changes_nothing(env):
    f = env / f"{SID}.jsonl"
    assert run("compact-range", f, "--from", 4, "--to", 11).exit_code == 0
    once = _pending(f).read_bytes()
    files = sorted(_folder(f).iterdir())
    for args in (("--from", 4, "--to", 11), ("--pos", 4)):
        r = run("compact-range", f, *args)
        assert r.exit_code == 0 and "already one plain user message" in r.output, r.output
        assert "Nothing new to change" in r.output
        assert _pending(f).read_bytes() == once and sorted(_folder(f).iterdir()) == files


def test_an_old_survivor_in_another_envelope_is_converted(tmp_path, monkeypatch):
    """Older tools kept the range's first record's envelope: a system record the
    CLI neither shows nor sends. --from 0 --to 0 makes it a plain user message."""
    monkeypatch.setenv("TXDB_DB", str(tmp_path / "catalog.db"))
    objs = conversation(3, session=SID)
    marker = ('<persisted-range from="0" to="7" count="8">\nSaved to: x/persisted/message (8 files)\n'
              "Summary: old\n\nPreview:\n[user] prompt 0\n[... 7 more]\n</persisted-range>")
    old = {"parentUuid": None, "isSidechain": False, "type": "system", "subtype": "informational",
           "content": marker, "level": "info", "isMeta": False, "uuid": "5b5c0000-0000-0000-0000-000000000000",
           "timestamp": objs[0]["timestamp"], "cwd": "/home/me/app", "sessionId": SID, "version": "2.1.200"}
    rest = objs[8:]
    rest[0]["parentUuid"] = old["uuid"]
    f = write(tmp_path / "p" / f"{SID}.jsonl", [old] + rest)
    lines = f.read_bytes().splitlines()
    r = run("compact-range", f, "--from", 0, "--to", 0)
    assert r.exit_code == 0, r.output
    assert "position 0: the system/informational record carrying a <persisted-range> marker is now a plain " \
           "user message" in r.output
    out = _pending(f).read_bytes().splitlines()
    assert orjson.loads(out[0]) == {"parentUuid": None, "isSidechain": False, "type": "user",
                                    "message": {"role": "user", "content": marker}, "uuid": old["uuid"],
                                    "timestamp": old["timestamp"], "cwd": "/home/me/app", "sessionId": SID,
                                    "version": "2.1.200"}
    assert out[1:] == lines[1:]
    assert not (tmp_path / "p" / SID).exists()                          # nothing saved: nothing removed
    r = run("compact-range", f, "--pos", 0)
    assert r.exit_code == 0 and "already one plain user message" in r.output


def test_announcements_and_the_system_prompt_stay_in_place(tmp_path, monkeypatch):
    monkeypatch.setenv("TXDB_DB", str(tmp_path / "catalog.db"))
    objs = conversation(3, session=SID)
    skills = attachment({"type": "skill_listing", "content": "- txdb: ..."}, objs[3]["uuid"], session=SID)
    snap = attachment({"type": "prompt_snapshot", "systemPrompt": "You are..."}, skills["uuid"], session=SID)
    date = attachment({"type": "date_change", "newDate": "2026-11-02"}, snap["uuid"], session=SID)
    objs[4]["parentUuid"] = date["uuid"]
    f = write(tmp_path / "p" / f"{SID}.jsonl", objs[:4] + [skills, snap, date] + objs[4:])
    # positions: 0..3 turn 0, 4 skills, 5 snapshot, 6 date, 7..10 turn 1, 11..14 turn 2
    r = run("compact-range", f, "--from", 4, "--to", 10, "--dry-run")
    assert "collapsed into one user message at position 6;" in r.output, r.output  # after the two kept in place
    r = run("compact-range", f, "--from", 4, "--to", 10, "--json")
    assert r.exit_code == 0, r.output
    rng = json.loads(r.output)["result"]["ranges"][0]
    assert (rng["count"], rng["kept_in_place"], rng["uuid"], rng["was"]) == (5, 2, date["uuid"],
                                                                          "attachment/date_change")
    assert rng["at"] == 6
    chain = [r.parse() for r in Transcript.load(_pending(f)).chain]
    assert [o["uuid"] for o in chain[:7]] == [o["uuid"] for o in objs[:4]] + [skills["uuid"], snap["uuid"],
                                                                              date["uuid"]]
    assert chain[6]["type"] == "user" and chain[6]["message"]["content"].startswith(
        '<persisted-range from="4" to="10" count="5">')
    assert chain[7]["uuid"] == objs[8]["uuid"] and len(chain) == 11
    r = run("compact-range", f, "--from", 4, "--to", 10)   # the same again: its survivor at 6
    assert r.exit_code == 0 and "already one plain user message (position 6)" in r.output, r.output
    r = run("compact-range", f, "--from", 4, "--to", 5)
    assert r.exit_code == 1 and "holds only records compact-range leaves in place" in r.output


def test_the_clis_state_snapshots_stay_in_place(tmp_path, monkeypatch):
    """environment, model & co. are the state the CLI diffs its next
    announcement against (policy.SNAPSHOTS): a range that took them made CLI
    2.1.328 send a full "# Environment" (model, mode and date in it) and the
    attribution reminder again on resume, so the cut saved about 60 tokens
    of the 654 txdb counted (tests/test_rescue_realcli.py's session)."""
    monkeypatch.setenv("TXDB_DB", str(tmp_path / "catalog.db"))
    objs = conversation(3, session=SID)
    envr = attachment({"type": "environment", "snapshot": {"workingDirectory": "/home/me/app", "platform": "linux"}},
                      objs[3]["uuid"], session=SID)
    model = attachment({"type": "model", "text": "You are powered by the model named Opus 5.5."}, envr["uuid"],
                       session=SID)
    date = attachment({"type": "date_change", "newDate": "2026-11-02"}, model["uuid"], session=SID)
    objs[4]["parentUuid"] = date["uuid"]
    f = write(tmp_path / "p" / f"{SID}.jsonl", objs[:4] + [envr, model, date] + objs[4:])
    r = run("compact-range", f, "--from", 4, "--to", 10, "--json")
    assert r.exit_code == 0, r.output
    rng = json.loads(r.output)["result"]["ranges"][0]
    assert (rng["count"], rng["kept_in_place"], rng["at"]) == (5, 2, 6)
    chain = [r.parse() for r in Transcript.load(_pending(f)).chain]
    assert [o["uuid"] for o in chain[4:6]] == [envr["uuid"], model["uuid"]]
    assert chain[6]["message"]["content"].startswith('<persisted-range from="4" to="10" count="5">')


def test_the_same_range_again_past_the_shorter_chain_is_a_no_op(env):
    """0..19 of 24 records leaves a chain of 5: running the same command again
    changes nothing (it used to be refused as past the end)."""
    f = env / f"{SID}.jsonl"
    assert run("compact-range", f, "--from", 0, "--to", 19).exit_code == 0
    once = _pending(f).read_bytes()
    files = sorted(_folder(f).iterdir())
    assert len(Transcript.load(_pending(f)).chain) == 5
    r = run("compact-range", f, "--from", 0, "--to", 19)
    assert r.exit_code == 0, r.output
    assert "positions 0..19: already one plain user message (position 0)" in r.output
    assert "Nothing new to change" in r.output
    assert _pending(f).read_bytes() == once and sorted(_folder(f).iterdir()) == files
    # any other range past the end is still refused
    r = run("compact-range", f, "--from", 0, "--to", 18)
    assert r.exit_code == 1 and "--to 18 is past the end of the active chain (positions 0..4)" in r.output
    assert _pending(f).read_bytes() == once


def test_a_range_over_a_survivor_compacts_again(env):
    f = env / f"{SID}.jsonl"
    assert run("compact-range", f, "--from", 4, "--to", 11, "--summary", "first").exit_code == 0
    first = _objs(_pending(f))[4]
    r = run("compact-range", f, "--from", 0, "--to", 8, "--summary", "second", "--json")
    assert r.exit_code == 0, r.output
    rng = json.loads(r.output)["result"]["ranges"][0]
    assert rng["count"] == 9 and len(rng["files"]) == 9
    new = _objs(_pending(f))
    assert _text(new[0]).startswith('<persisted-range from="0" to="8" count="9">')
    assert "Summary: second" in _text(new[0])
    # the first survivor is saved too, beside (not over) the file of the record it replaced
    saved = [Path(p) for p in rng["files"]]
    mine = [p for p in saved if p.name.startswith(first["uuid"])]
    assert len(mine) == 1 and mine[0].name != f"{first['uuid']}.json"
    assert orjson.loads(mine[0].read_bytes()) == first
    assert orjson.loads((_folder(f) / f"{first['uuid']}.json").read_bytes())["type"] == "user"
    assert run("apply", f).exit_code == 0 and run("verify", f).exit_code == 0


def test_dry_run_and_fork(env):
    f = env / f"{SID}.jsonl"
    before = f.read_bytes()
    r = run("compact-range", f, "--from", 0, "--to", 7, "--dry-run")
    assert r.exit_code == 0 and "Dry run: nothing written." in r.output
    assert sorted(p.name for p in env.iterdir()) == [f.name]
    r = run("compact-range", f, "--from", 0, "--to", 7, "--fork", "--json")
    assert r.exit_code == 0, r.output
    rep = json.loads(r.output)
    fork = Path(rep["target"])
    assert f.read_bytes() == before and not _pending(f).exists()
    first = _objs(fork)[0]
    folder = _folder(f, rep["fork_session_id"])
    assert first["sessionId"] == rep["fork_session_id"] and f"Saved to: {folder} (8 files)" in \
        first["message"]["content"]
    assert len(list(folder.iterdir())) == 8 and run("verify", fork).exit_code == 0
    # the survivor carries the fork's fields like every copied envelope
    original = _objs(f)
    assert first["forkedFrom"] == {"sessionId": SID, "messageUuid": original[0]["uuid"]} == \
        {"sessionId": SID, "messageUuid": first["uuid"]}
    assert first["strippedBy"]["operation"] == "compact-range"
    assert all("forkedFrom" in o and "strippedBy" in o for o in _objs(fork)
               if o.get("type") in ("user", "assistant", "attachment", "system"))


def test_apply_refuses_when_the_saved_records_are_gone(env):
    f = env / f"{SID}.jsonl"
    assert run("compact-range", f, "--from", 4, "--to", 11).exit_code == 0
    shutil.rmtree(env / SID)
    before = f.read_bytes()
    r = run("apply", f)
    assert r.exit_code == 1 and "persisted/message" in r.output and f.read_bytes() == before


def test_hostile_uuids_stay_inside_the_session_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("TXDB_DB", str(tmp_path / "catalog.db"))
    objs = conversation(3, session=SID)
    evil = "../../../../tmp/evil"
    objs[5]["uuid"] = evil
    objs[6]["parentUuid"] = evil
    f = write(tmp_path / "p" / f"{SID}.jsonl", objs)
    r = run("compact-range", f, "--from", 4, "--to", 7, "--json")
    assert r.exit_code == 0, r.output
    folder = (tmp_path / "p" / SID / "persisted" / "message").resolve()
    for p in json.loads(r.output)["result"]["ranges"][0]["files"]:
        assert Path(p).resolve().parent == folder
    assert not Path("/tmp/evil.json").exists()


def test_where_compacts_each_run_of_selected_positions(env):
    f = env / f"{SID}.jsonl"
    other_sid = "44444444-0000-0000-0000-000000000002"
    g = write(env / f"{other_sid}.jsonl", conversation(2, session=other_sid))
    assert run("refresh").exit_code == 0
    r = run("compact-range", "--where", "pos between 4 and 7", "--summary", "turn 1", "--json")
    assert r.exit_code == 1, r.output                        # the short session: 4..7 holds its leaf
    out = json.loads(r.output)
    by = {Path(s["path"]).name: s for s in out["sessions"]}
    assert by[f.name]["status"] == "pending" and by[f.name]["changed"] == 4
    assert by[g.name]["status"] == "refused" and "holds the leaf message" in by[g.name]["error"]
    assert _objs(_pending(f))[4]["message"]["content"].startswith('<persisted-range from="4" to="7" count="4">')
    assert not _pending(g).exists()
    # two runs in one session: each one range, the later done first; the catalog's
    # positions 9..12 are 6..9 in the pending copy the first pass left
    r = run("compact-range", "--where", f"session_id = '{SID}' and pos in (0, 1, 2, 3, 9, 10, 11, 12)",
            "--apply")
    assert r.exit_code == 0, r.output
    contents = [_text(o) for o in _objs(f) if o["type"] == "user"]
    assert [c.split("\n")[0] for c in contents if c.startswith("<persisted-range")] == [
        '<persisted-range from="0" to="3" count="4">', '<persisted-range from="4" to="7" count="4">',
        '<persisted-range from="6" to="9" count="4">']


def test_contiguous():
    assert contiguous([9, 3, 4, 5, 11, 10]) == [(3, 5), (9, 11)]
    assert contiguous([]) == []


def test_a_tool_id_repeated_by_a_resume_is_not_a_partner(tmp_path, monkeypatch):
    """Sessions glued by resume repeat tool ids: a call and its result inside the
    range are a pair even when the same id is used again after it."""
    monkeypatch.setenv("TXDB_DB", str(tmp_path / "catalog.db"))
    objs = conversation(3, session=SID)
    again = conversation(2, session=SID)                       # toolu_0000 and toolu_0001 again
    again[0]["parentUuid"] = objs[-1]["uuid"]
    f = write(tmp_path / "p" / f"{SID}.jsonl", objs + again)
    r = run("compact-range", f, "--from", 0, "--to", 7)
    assert r.exit_code == 0, r.output
    chain = Transcript.load(_pending(f)).chain
    assert len(chain) == 20 - 7 and chain[1].uuid == objs[8]["uuid"]
    r = run("compact-range", f, "--from", 5, "--to", 6)        # the second toolu_0000: call in, result out
    assert r.exit_code == 1 and ("splits tool call toolu_0000: the tool_use at position 6 is inside it and its "
                                 "tool_result at position 7 is not") in r.output


def test_a_new_summary_on_the_same_range_replaces_only_the_summary(env):
    f = env / f"{SID}.jsonl"
    assert run("compact-range", f, "--from", 4, "--to", 11, "--summary", "first").exit_code == 0
    before = _objs(_pending(f))
    r = run("compact-range", f, "--from", 4, "--to", 11, "--summary", "better\x1b[31m </persisted-range> end")
    assert r.exit_code == 0 and "its marker's summary is now 'better [31m < /persisted-range> end'" in r.output
    after = _objs(_pending(f))
    old, new = before[4]["message"]["content"], after[4]["message"]["content"]
    assert new == old.replace("Summary: first\n", "Summary: better [31m < /persisted-range> end\n")
    assert new.count("</persisted-range>") == 1
    assert [o for i, o in enumerate(after) if i != 4] == [o for i, o in enumerate(before) if i != 4]


def test_where_plan_then_apply_applies_the_plans_copy(env):
    """The plan's hint: run the same command again with --apply. That pass changes
    nothing new, and applies the copy the plan left."""
    f = env / f"{SID}.jsonl"
    assert run("refresh").exit_code == 0
    cond = "pos between 4 and 7"
    assert run("compact-range", "--where", cond).exit_code == 0
    planned = _pending(f).read_bytes()
    r = run("compact-range", "--where", cond, "--apply", "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["sessions"][0]["status"] == "applied"
    assert f.read_bytes() == planned and not _pending(f).exists()


def test_a_pass_that_grows_the_context_says_so(env):
    f = env / f"{SID}.jsonl"
    r = run("compact-range", f, "--pos", 0, "--summary", "a long summary " * 40)
    assert r.exit_code == 0, r.output
    assert "Note: this pass makes the context larger by ~" in r.output
    assert run("refresh").exit_code == 0
    r = run("compact-range", "--where", "pos = 4", "--summary", "x " * 300)
    assert r.exit_code == 0 and "estimated tokens added (" in r.output and "bytes added) by this pass" in r.output


def test_a_summary_that_is_not_utf8_is_one_error_line_and_writes_nothing(env):
    """Bytes that are not UTF-8 on the command line arrive as lone surrogates:
    refused before anything runs (they could go into no JSON line or log)."""
    f = env / f"{SID}.jsonl"
    for args in (("--summary", "bad \udcff byte"), ("--fork-title", "t\udcfe")):
        r = run("compact-range", f, "--from", 4, "--to", 7, *args)
        assert r.exit_code == 1 and r.output == f"Error: {args[0]} is not valid UTF-8 text\n"
    assert not _pending(f).exists() and not (env / SID).exists()


def test_the_engine_refuses_a_summary_it_cannot_write_and_logs_any_path(env):
    from txdb.errors import SurgeryError
    from txdb.surgery.compact_range import CompactRangeOp
    from txdb.surgery.engine import PassOptions, run_surgery

    f = env / f"{SID}.jsonl"
    with pytest.raises(SurgeryError, match="the summary is not valid UTF-8 text"):
        run_surgery(f, "compact-range", CompactRangeOp(4, 7, "x\udcff"))
    assert not _pending(f).exists() and not (env / SID).exists()
    # a path that is not UTF-8 (the only such text the CLI lets through) is logged escaped
    rep = run_surgery(f, "compact-range", CompactRangeOp(4, 7, "ok"), PassOptions(arguments={"dir": "/tmp/\udcff"}))
    assert rep.written
    meta = json.loads(Path(f"{f}.pending.json").read_bytes())
    assert meta["passes"][0]["arguments"] == {"dir": "/tmp/\\xff"}


def test_a_quoted_marker_does_not_make_a_survivor(env):
    """A message that quotes a marker beside its own content (a tool call, the
    leaf's reply) is compacted like any record, never "converted"."""
    f = env / f"{SID}.jsonl"
    objs = _objs(f)
    quote = {"type": "text", "text": '<persisted-range from="1" to="2" count="1">\nSaved to: x (1 files)\n'}
    objs[5]["message"]["content"].insert(0, quote)     # the tool call at position 5
    objs[23]["message"]["content"].insert(0, quote)    # the leaf
    write(f, objs)
    r = run("compact-range", f, "--pos", 23)
    assert r.exit_code == 1 and "holds the leaf message" in r.output
    r = run("compact-range", f, "--pos", 5)
    assert r.exit_code == 1 and "splits tool call toolu_0001" in r.output
    assert not _pending(f).exists()


def test_saved_records_are_the_files_bytes_even_for_repaired_lines(env):
    """A line only the forgiving parse reads (a lone surrogate escape) is saved
    as the file holds it, not as txdb re-wrote it."""
    f = env / f"{SID}.jsonl"
    lines = f.read_bytes().splitlines()
    lines[4] = lines[4].replace(b'"prompt 1"', b'"prompt \\ud800 1"')
    f.write_bytes(b"\n".join(lines) + b"\n")
    r = run("compact-range", f, "--from", 4, "--to", 7, "--json")
    assert r.exit_code == 0, r.output
    first = Path(json.loads(r.output)["result"]["ranges"][0]["files"][0])
    assert first.read_bytes() == lines[4] and b"\\ud800" in first.read_bytes()


def test_apply_checks_every_saved_record_is_on_disk(env, tmp_path):
    f = env / f"{SID}.jsonl"
    assert run("compact-range", f, "--from", 4, "--to", 11).exit_code == 0
    saved = sorted(_folder(f).iterdir())
    saved[3].rename(tmp_path / saved[3].name)         # the folder stays, one file goes
    before = f.read_bytes()
    r = run("apply", f)
    assert r.exit_code == 1 and "refers to a sidecar that is not on disk" in r.output
    assert saved[3].name in r.output and f.read_bytes() == before


def test_the_session_folder_follows_the_file_name(tmp_path, monkeypatch):
    """A copied file whose lines carry another session's id saves into its own
    folder, never the other session's."""
    monkeypatch.setenv("TXDB_DB", str(tmp_path / "catalog.db"))
    other = "44444444-0000-0000-0000-0000000000ff"
    f = write(tmp_path / "p" / f"{SID}.jsonl", conversation(6, session=other))
    assert run("compact-range", f, "--from", 4, "--to", 7).exit_code == 0
    assert len(list((tmp_path / "p" / SID / "persisted" / "message").iterdir())) == 4
    assert not (tmp_path / "p" / other).exists()


def test_a_deeply_nested_line_in_the_range_is_no_traceback(env):
    f = env / f"{SID}.jsonl"
    objs = _objs(f)
    lines = f.read_bytes().splitlines()
    lines[5] = lines[5][:-1] + b',"deep":' + b"[" * 3000 + b'"<persisted-output>x"' + b"]" * 3000 + b"}"
    f.write_bytes(b"\n".join(lines) + b"\n")
    r = run("compact-range", f, "--from", 4, "--to", 7)
    assert r.exit_code == 0, r.output
    assert run("apply", f).exit_code == 0
    assert objs[5]["uuid"] not in {r.uuid for r in Transcript.load(f).chain}
