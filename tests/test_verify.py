"""`txdb verify`: when it fails, and the exact findings users see.

Missing parents are judged as CLI 2.1.328 resumes (tests/test_realcli_verify.py
checks the same rules against the real CLI): a gap is bridged to the record
written just before it within 5 s; verify fails when user or assistant lines
drop off the chain resume sends. A pending copy is never being written.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from sessions import assistant, edit_pending_copy, user, write
from txdb.model import chain as chainmod
from txdb.cli import cli
from txdb.errors import SurgeryError
from txdb.surgery import ops
from txdb.surgery import pending as pend
from txdb.surgery.engine import run_surgery
from txdb.model.verify import verify_file

DATA = Path(__file__).parent / "data"
TOOLS = next((DATA / "cli" / "-tmp-txdb-cli-fixtures-tools-demo").glob("*.jsonl"))
CORPUS = Path(__file__).resolve().parents[1].parent / "shared" / "corpus"
SID = "5e55a0b1-0000-4000-8000-000000000000"


def uid(n: int) -> str:
    return f"{n:08d}-0000-4000-8000-00000000000{n % 10}"


def at(seconds: float) -> str:
    m, s = divmod(seconds, 60)
    return f"2026-11-01T10:{int(m):02d}:{s:06.3f}Z"


def turns(n: int, gap: float = 60.0) -> list[dict]:
    """n prompt/answer turns, each prompt ``gap`` seconds after the answer
    before it, each answer 2 s after its prompt; an attachment line 1 ms
    after each prompt, between prompt and answer (as the CLI writes them)."""
    out, parent, t = [], None, 0.0
    for k in range(n):
        u = user(f"prompt {k}", parent, uid=uid(3 * k), session=SID, timestamp=at(t))
        att = {"parentUuid": u["uuid"], "isSidechain": False, "type": "attachment", "uuid": uid(3 * k + 1),
               "attachment": {"type": "task_reminder", "content": [], "itemCount": 0},
               "timestamp": at(t + 0.001), "sessionId": SID}
        a = assistant(f"answer {k}", att["uuid"], uid=uid(3 * k + 2), session=SID, timestamp=at(t + 2))
        out += [u, att, a]
        parent, t = a["uuid"], t + 2 + gap
    return out


def lines_of(report, severity=None):
    return [(f.severity, f.code, f.line, f.message) for f in report.findings
            if severity is None or f.severity == severity]


# --------------------------------------------------------------------------
# missing parents


def test_a_gap_resume_bridges_loses_nothing_and_is_a_warning(tmp_path):
    objs = turns(4)
    whole = verify_file(write(tmp_path / "whole.jsonl", objs))
    del objs[7]  # turn 2's attachment: its answer, written 2 s later, hangs off nothing
    r = verify_file(write(tmp_path / "s.jsonl", objs))
    assert r.ok and r.chain_length == whole.chain_length - 1
    assert lines_of(r, "warning") == [
        ("warning", "bridged_parent", 8, f"parent {uid(7)} is not in the file; resume bridges over it to the "
                                         "record written just before (within 5 s)")]


def test_a_gap_resume_cannot_bridge_is_an_error_counting_what_drops(tmp_path):
    objs = turns(4)
    del objs[5]  # turn 1's answer: the next prompt comes 60 s later, too late to bridge
    r = verify_file(write(tmp_path / "s.jsonl", objs))
    assert not r.ok
    assert lines_of(r, "error") == [
        ("error", "cut_off_messages", 6, f"parent {uid(5)} is not in the file: 3 user/assistant lines "
                                         "(lines 1-4) are not on the chain resume sends")]


def test_naive_deletion_behind_a_last_prompt_checkpoint_moves_the_leaf(tmp_path):
    # The d8fbf478 case: a last-prompt names the first prompt; the last row
    # descends from it only across the deleted line, so resume walks from the
    # checkpoint and sends one prompt. The gap itself would be bridged.
    objs = turns(4) + [{"type": "last-prompt", "lastPrompt": "prompt 0", "leafUuid": uid(0), "sessionId": SID}]
    assert verify_file(write(tmp_path / "whole.jsonl", objs)).ok
    del objs[7]
    r = verify_file(write(tmp_path / "s.jsonl", objs))
    assert not r.ok and r.chain_length == 1
    assert lines_of(r, "error") == [
        ("error", "cut_off_messages", 8, f"parent {uid(7)} is not in the file: 7 user/assistant lines "
                                         "(lines 3-11) are not on the chain resume sends")]


def test_partial_transcript_and_a_branch_before_a_compact_boundary_lose_nothing(tmp_path):
    # A checkpoint store's excerpt: its first line hangs off a row outside the
    # file, then /compact starts the chain resume sends.
    head = turns(2)
    head[0]["parentUuid"] = "0badf00d-0000-4000-8000-000000000000"
    boundary = {"parentUuid": None, "logicalParentUuid": head[-1]["uuid"], "isSidechain": False, "type": "system",
                "subtype": "compact_boundary", "uuid": uid(90), "timestamp": at(600), "sessionId": SID}
    summary = user("summary of the conversation", uid(90), uid=uid(91), session=SID, timestamp=at(601),
                   isCompactSummary=True)
    answer = assistant("carrying on", uid(91), uid=uid(92), session=SID, timestamp=at(603))
    r = verify_file(write(tmp_path / "s.jsonl", head + [boundary, summary, answer]))
    assert r.ok and r.chain_length == 3
    assert lines_of(r, "warning") == [
        ("warning", "dangling_parent_off_chain", 1, "parent 0badf00d-0000-4000-8000-000000000000 is not in the "
                                                    "file (off the active chain; resume would not send this "
                                                    "branch with its parent either)")]
    # Without the compact boundary the excerpt's first line starts the chain: nothing above it is lost.
    r = verify_file(write(tmp_path / "t.jsonl", head))
    assert r.ok
    assert [(f.code, f.line) for f in r.findings if f.severity == "warning"] == [("dangling_parent", 1)]


def test_a_subagent_transcript_hanging_off_its_parent_is_a_note(tmp_path):
    objs = turns(2)
    for o in objs:
        o["isSidechain"] = True
    objs[0]["parentUuid"] = "0badf00d-0000-4000-8000-000000000000"
    r = verify_file(write(tmp_path / "agent-a1.jsonl", objs))
    assert r.ok and r.counts() == {"error": 0, "warning": 0, "note": 1}
    assert lines_of(r)[0][:3] == ("note", "parent_outside_file", 1)


def test_a_missing_parent_is_bridged_to_the_latest_record_written_before_on_the_same_side():
    # What CLI 2.1.328 sent for these shapes: the record with the latest
    # timestamp at or before the orphan (not the line above it), never a
    # sidechain record for a main-chain orphan, never more than 5 s back.
    def u(n, parent, t, **kw):
        return user(f"q{n}", parent, uid=uid(n), session=SID, timestamp=at(t), **kw)

    def a(n, parent, t):
        return assistant(f"a{n}", parent, uid=uid(n), session=SID, timestamp=at(t))

    root, ans = u(0, None, 0), a(1, uid(0), 1)
    early_branch = [u(2, uid(1), 2), a(3, uid(2), 3)]       # written first, placed last in the file
    late_branch = [u(4, uid(1), 4), a(5, uid(4), 5)]
    side = u(6, None, 5.5, isSidechain=True)
    orphan = [u(7, "0badf00d-0000-4000-8000-000000000000", 6), a(8, uid(7), 7)]

    def chain(objs):
        return [n.uuid for n in chainmod.active_chain([chainmod.node_from(i, o) for i, o in enumerate(objs)])]

    got = chain([root, ans, *late_branch, *early_branch, side, *orphan])
    assert got == [uid(0), uid(1), uid(4), uid(5), uid(7), uid(8)]
    far = [u(7, "0badf00d-0000-4000-8000-000000000000", 10.5), a(8, uid(7), 11)]
    assert chain([root, ans, *late_branch, *far]) == [uid(7), uid(8)]


def test_a_tail_cut_off_from_every_message_leaves_the_conversation_to_resume():
    # Deleting the first of two trailing /model lines: CLI 2.1.328 resumes the
    # conversation (the last branch-ending message), not the orphaned line.
    objs = turns(2)
    s1 = {"parentUuid": objs[-1]["uuid"], "isSidechain": False, "type": "system", "subtype": "local_command",
          "uuid": uid(80), "timestamp": at(900), "content": "<command-name>/model</command-name>"}
    s2 = dict(s1, uuid=uid(81), parentUuid=uid(80), content="<local-command-stdout>ok</local-command-stdout>")
    nodes = [chainmod.node_from(i, o) for i, o in enumerate(objs + [s2])]
    assert [n.uuid for n in chainmod.active_chain(nodes)] == [o["uuid"] for o in objs]


def test_an_unanswered_tool_call_mid_conversation_is_an_error(tmp_path):
    u = user("run it", None, uid=uid(1), session=SID, timestamp=at(0))
    a = assistant([{"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {}}], uid(1), uid=uid(2),
                  session=SID, timestamp=at(1))
    u2 = user("never mind", uid(2), uid=uid(3), session=SID, timestamp=at(30))
    a2 = assistant("ok", uid(3), uid=uid(4), session=SID, timestamp=at(31))
    r = verify_file(write(tmp_path / "s.jsonl", [u, a, u2, a2]))
    assert lines_of(r, "error") == [
        ("error", "tool_use_without_result", 2, "tool_use toolu_1 has no tool_result on the active chain; "
                                                "resume drops the call")]
    # In the last turn the call may still be running: a note.
    assert verify_file(write(tmp_path / "t.jsonl", [u, a])).ok


# --------------------------------------------------------------------------
# pending copies


def _pending(tmp_path: Path) -> tuple[Path, Path]:
    d = tmp_path / "proj"
    d.mkdir()
    f = d / TOOLS.name
    shutil.copyfile(TOOLS, f)
    run_surgery(f, "strip-all", lambda t, o: ops.strip_all(t))
    return f, pend.pending_path(f)


def test_a_cut_short_pending_copy_fails_and_apply_refuses_it(tmp_path):
    f, p = _pending(tmp_path)
    data = p.read_bytes()
    cut = data[: data.rfind(b"\n", 0, len(data) - 1) + 40]  # the last line cut 39 bytes in
    edit_pending_copy(f, cut)  # its record says so: apply's own check of the last line judges it
    r = verify_file(p)
    assert not r.ok
    n = cut.count(b"\n") + 1
    assert lines_of(r, "error") == [
        ("error", "unfinished_last_line", n, "the last line is cut short (39 bytes without a newline that are "
                                             "no whole JSON object); a pending copy is never being written")]
    original = f.read_bytes()
    with pytest.raises(SurgeryError, match="ends in an unfinished line .39 bytes after its last newline.: it was cut short"):
        pend.apply(f, settle=0.0)
    assert f.read_bytes() == original


def test_an_empty_pending_copy_fails_and_apply_refuses_it(tmp_path):
    f, p = _pending(tmp_path)
    edit_pending_copy(f, b"")
    r = verify_file(p)
    assert lines_of(r, "error") == [
        ("error", "empty_pending_copy", None, f"the pending copy holds no record while its original {f.name} "
                                              f"holds {f.stat().st_size:,} bytes")]
    with pytest.raises(SurgeryError, match="would lose 26 of the 26 records"):
        pend.apply(f, settle=0.0)
    assert f.stat().st_size > 0


def test_a_whole_last_line_without_newline_is_fine_and_a_session_may_be_mid_write(tmp_path):
    objs = turns(2)
    p = write(tmp_path / "s.jsonl.pending", objs, trailing_newline=False)
    assert verify_file(p).ok  # published files often lack the final newline
    # The same cut in a session file: Claude Code may be writing that line.
    live = tmp_path / "s.jsonl"
    live.write_bytes(p.read_bytes() + b'\n{"type":"user","mess')
    r = verify_file(live)
    assert r.ok
    assert lines_of(r) == [("note", "unfinished_last_line", 7,
                            "the last line is unfinished (20 bytes without a newline): being written? left out")]
    # An empty pending copy of an empty (or absent) original loses nothing.
    empty = tmp_path / "e.jsonl.pending"
    empty.write_bytes(b"")
    assert verify_file(empty).ok


@pytest.fixture
def run(tmp_path, monkeypatch):
    monkeypatch.setenv("TXDB_DB", str(tmp_path / "catalog.db"))
    runner = CliRunner()

    def go(*args, code=0):
        r = runner.invoke(cli, [str(a) for a in args])
        assert r.exit_code == code, r.output
        return r.output

    return go


def test_cli_verify_of_a_pending_copy_that_does_not_exist_says_so(run, tmp_path):
    f = write(tmp_path / "proj" / "s.jsonl", turns(2))
    out = run("verify", f"{f}.pending", code=1)
    assert out == (f"Error: no pending copy at {f}.pending (the original is {f}; "
                   "a surgery command or `txdb snapshot` makes one)\n")


def test_cli_verify_prints_the_finding_and_exits_1(run, tmp_path):
    objs = turns(3)
    del objs[2]
    f = write(tmp_path / "proj" / "s.jsonl", objs)
    out = run("verify", f, code=1)
    assert out.splitlines() == [
        f"error: line 3: parent {uid(2)} is not in the file: 1 user/assistant line (line 1) "
        "is not on the chain resume sends",
        f"BROKEN: {f}: 8 lines, chain of 6; 1 error, 0 warnings, 0 notes",
    ]
    report = json.loads(run("verify", f, "--json", code=1))
    assert report["ok"] is False and report["findings"][0]["code"] == "cut_off_messages"


def test_cli_verify_of_a_file_that_is_not_a_session_is_one_error_line(run, tmp_path):
    f = tmp_path / "SOURCES.md"
    f.write_text("# Sources\n\n" + "".join(f"- source {k}, {{see}} notes\n" for k in range(40)))
    before = f.read_bytes()
    for extra in ((), ("--json",)):
        out = run("verify", f, *extra, code=1)
        assert out == f"Error: {f} is not a session: none of its 42 lines is a JSON record\n"
    assert f.read_bytes() == before
    # one record among the lines makes it a session, its other lines errors
    f.write_text(f.read_text() + json.dumps(user("hi", session=SID)) + "\n")
    out = run("verify", f, code=1)
    assert "invalid JSON" in out and out.splitlines()[-1].startswith("BROKEN: ")


# --------------------------------------------------------------------------
# what real files contain


def test_every_corpus_file_passes_the_glued_line_with_a_warning(tmp_path):
    if not CORPUS.is_dir():
        pytest.skip("../shared/corpus is not here")
    failing = {}
    for p in sorted(CORPUS.rglob("*.jsonl")):
        r = verify_file(p)
        if not r.ok:
            failing[str(p.relative_to(CORPUS))] = [f.code for f in r.findings if f.severity == "error"]
    assert failing == {}
    # One file holds two JSON objects glued on one line (SOURCES.md): Claude Code
    # reads the first and drops the second, a summary, so resume loses nothing.
    glued = verify_file(CORPUS / "real/entireio-cli/37/995ebed6e4/2/full.jsonl")
    assert [(f.severity, f.code, f.line) for f in glued.findings if f.code == "parse"] == [("warning", "parse", 128)]



def test_cli_verify_and_analyze_print_counts_with_separators(run, tmp_path):
    f = write(tmp_path / "proj" / "s.jsonl", turns(400))  # 1,200 lines: the counts need a separator
    n = len(f.read_bytes().splitlines())
    report = json.loads(run("verify", f, "--json"))
    chain = report["chain_length"]
    assert n >= 1000 and chain >= 1000 and isinstance(chain, int)  # --json stays numeric
    assert f"OK: {f}: {n:,} lines, chain of {chain:,}; " in run("verify", f)
    a = json.loads(run("analyze", f, "--json"))["session"]
    assert a["lines"] == n and isinstance(a["lines"], int)
    assert f"Lines: {n:,}  chain: {a['chain_length']:,}  file: " in run("analyze", f)
