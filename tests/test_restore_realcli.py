"""`txdb restore` judged by the real Claude Code CLI (2.1.328, offline, loopback fake API).

The CLI writes a session with a subagent (its transcript and .meta.json)
and a Bash output big enough that the CLI persists it itself
(``tool-results/*.txt``). txdb catalogues it; every file of the session is
deleted, as Claude Code's cleanup does; `txdb restore` brings them back:
each file's sha256 equals the original's, and `claude --resume` sends the
same messages and the same request as it did before the deletion."""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
from pathlib import Path

import pytest

from conftest import run

sys.path.insert(0, str(Path(__file__).resolve().parent))
from realcli import claude_binary  # noqa: E402
from realcli.driver import Sandbox, munge  # noqa: E402
from realcli.fake_api import FakeAPI, agent, bash, read, text  # noqa: E402
from realcli.oracle import resume  # noqa: E402
from realcli.scenarios import seed_workspace  # noqa: E402

pytestmark = pytest.mark.realcli


def tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def _scrubbed(res, value):
    """``value`` with the resume's scratch folder (as a path and as Claude
    Code's project folder name) written as <ROOT>."""
    root = str(res.session_file.parents[4])
    body = json.dumps(value, sort_keys=True).replace(root, "<ROOT>").replace(munge(root), "<ROOT>")
    return json.loads(body)


def test_a_swept_session_comes_back_and_resumes_the_same(tmp_path, monkeypatch):
    binary = claude_binary()
    monkeypatch.setenv("TXDB_DB", str(tmp_path / "catalog.db"))
    with Sandbox(binary, tmp_path / "cli", FakeAPI([])) as sb:
        files = seed_workspace(sb.cwd)
        prompt = "SUBAGENT-TASK: list the project files and read notes.txt, then report."
        sb.script(
            agent(prompt, description="Survey the project", replies=[
                bash("ls -1", "List files"), read(str(files["notes"])),
                text("Subagent report: notes.txt has three lines."),
            ]),
            text("The survey agent is running."),
            text("The subagent found notes.txt with three lines."),
        )
        first = sb.run("Survey the project with a subagent.").check()
        sid = first.session_id
        sb.script(bash("seq 1 40000"), text("done"))
        sb.run("now a lot", resume=sid).check()
        session = sb.session_file(sid)
        project = session.parent
    sdir = project / sid
    assert list((sdir / "subagents").glob("*.meta.json")) and list((sdir / "tool-results").glob("*.txt"))
    run("refresh", "--root", project.parent, ok=True)
    original = tree(project)
    before = resume(session, workdir=tmp_path / "before", binary=binary)
    assert before.loaded and not before.compacted

    session.unlink()  # the sweep: the transcript and its folder
    shutil.rmtree(sdir)
    assert "1 session and 1 subagent transcript newly gone" in run("refresh", "--root", project.parent, ok=True).output
    assert sid in run("sessions", "--gone", "--json", ok=True).output

    out = run("restore", sid, "--root", project.parent, ok=True).output
    assert tree(project) == original, out
    assert len(original) >= 4  # session, subagent transcript, its meta.json, the persisted output

    after = resume(session, workdir=tmp_path / "after", binary=binary)
    assert after.loaded and not after.compacted
    assert _scrubbed(after, after.messages) == _scrubbed(before, before.messages)
    # The whole request but its metadata (a device id each scratch HOME draws anew).
    assert _scrubbed(after, {**after.main_request, "metadata": None}) == \
        _scrubbed(before, {**before.main_request, "metadata": None})
