"""Acceptance against the real Claude Code CLI: after each surgery + apply the
session resumes, nothing is compacted, no message is lost, and the resumed
request is no bigger (smaller when content was stripped).

Uses the resume oracle of tests/realcli (skips with one reason when the
pinned CLI cannot be installed)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from txdb.surgery import ops
from txdb.surgery import pending as pend
from sessions import shipped_sessions
from txdb.surgery.engine import run_surgery

pytestmark = pytest.mark.realcli

DATA = Path(__file__).parent / "data"
FIXTURES = [next((DATA / "cli" / d).glob("*.jsonl")) for d in (
    "-tmp-txdb-cli-fixtures-tools-demo", "-tmp-txdb-cli-fixtures-compact-demo")]
# shipped in tests/data: the two smallest generated sessions (CLI 2.1.328) and a
# real one (CLI 2.1.114: attachments, thinking, parallel tool calls)
FIXTURES += shipped_sessions("generated") + [
    DATA / "projects" / "-experiments-worktrees" / "ef958aa1-0e93-49f0-bb71-150f63befcd1.jsonl"]

COMMANDS = {
    "strip-all": lambda t, o: ops.strip_all(t),
    "strip-tools-results": lambda t, o: ops.strip_tools(t, only_results=True, keep_last_lines=1),
    "strip-thinking": lambda t, o: ops.strip_thinking(t),
    "strip-attachments": lambda t, o: ops.strip_attachments(t, include_free=True, keep_recent=0),
}


@pytest.fixture(scope="module")
def resume():
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from realcli.oracle import resume as _resume
    return _resume


@pytest.fixture(scope="module")
def baselines(resume, tmp_path_factory):
    out = {}
    for f in FIXTURES:
        out[f.name] = resume(f, "ping", workdir=tmp_path_factory.mktemp("base"))
    return out


@pytest.mark.parametrize("cmd", sorted(COMMANDS))
@pytest.mark.parametrize("src", FIXTURES, ids=lambda p: p.parent.name.split("fixtures-")[-1].split("src-")[-1])
def test_resumes_whole_after_surgery(resume, baselines, tmp_path, src, cmd):
    base = baselines[src.name]
    assert base.loaded and not base.compacted, base.summary()
    d = tmp_path / "proj"
    d.mkdir()
    f = d / src.name
    shutil.copyfile(src, f)
    rep = run_surgery(f, cmd, COMMANDS[cmd])
    if not rep.written:
        pytest.skip(f"{cmd} changes nothing in {src.name}")
    pend.apply(f, settle=0.0)
    r = resume(f, "ping", workdir=tmp_path / "run")
    assert r.loaded, r.summary()
    assert not r.compacted, r.summary()
    # nothing lost: the same user/assistant turns (thinking-only lines merge into their message)
    assert len(r.user_assistant_messages()) == len(base.user_assistant_messages()), (r.summary(), base.summary())
    uses = {b["id"] for b in r.blocks("tool_use")}
    results = {b["tool_use_id"] for b in r.blocks("tool_result")}
    assert uses == results == {b["id"] for b in base.blocks("tool_use")}
    assert r.messages_chars <= base.messages_chars
    if cmd in ("strip-all", "strip-tools-results") and results:
        assert r.messages_chars < base.messages_chars


WHERE_RUNS = [
    ("strip-attachments", "--where", "policy = 'superseded'"),
    ("strip-tools", "--where", "tool_name = 'Read' and result_tokens > 10000", "--only-results"),
    ("strip-all", "--where", "kind in ('tool_result', 'thinking') and on_chain = 1 and tokens > 20"),
]


def test_resumes_whole_after_bulk_where_apply(resume, baselines, tmp_path):
    """The bulk path: a catalog over every fixture, three `--where` commands
    planned (passes add up in one pending copy per session), then
    `txdb apply --all-pending`; every session still resumes on the real CLI,
    uncompacted, with the same turns and tool pairs, and no bigger."""
    from click.testing import CliRunner

    from txdb.cli import cli

    root = tmp_path / "projects"
    files = {}
    for src in FIXTURES:
        d = root / src.parent.name
        d.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, d / src.name)
        files[src.name] = d / src.name
    dbp = str(tmp_path / "c.db")
    runner = CliRunner()
    r = runner.invoke(cli, ["refresh", "--root", str(root), "--db", dbp])
    assert r.exit_code == 0, r.output
    for args in WHERE_RUNS:
        r = runner.invoke(cli, [*args, "--db", dbp])
        assert r.exit_code == 0, (args, r.output)
    r = runner.invoke(cli, ["apply", "--all-pending", "--db", dbp, "--json"])
    assert r.exit_code == 0, r.output
    import json
    applied = [o for o in json.loads(r.output) if o["applied"]]
    assert len(applied) == len(files), r.output
    for name, f in files.items():
        base = baselines[name]
        res = resume(f, "ping", workdir=tmp_path / f"run-{f.stem}")
        assert res.loaded and not res.compacted, res.summary()
        assert len(res.user_assistant_messages()) == len(base.user_assistant_messages()), (res.summary(), base.summary())
        uses = {b["id"] for b in res.blocks("tool_use")}
        assert uses == {b["tool_use_id"] for b in res.blocks("tool_result")} == {b["id"] for b in base.blocks("tool_use")}
        assert res.messages_chars <= base.messages_chars
