"""The surgery commands through the CLI: reports, fork stamping, one-line errors."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import orjson
import pytest

from sessions import with_prompt_usage
from click.testing import CliRunner

from conftest import run
from txdb.cli import cli

DATA = Path(__file__).parent / "data"
TOOLS_DIR = DATA / "cli" / "-tmp-txdb-cli-fixtures-tools-demo"
EDGE = DATA / "surgery" / "edge.jsonl"


@pytest.fixture
def env(tmp_path, monkeypatch):
    monkeypatch.setenv("TXDB_DB", str(tmp_path / "catalog.db"))
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "claude"))
    proj = tmp_path / "claude" / "projects" / TOOLS_DIR.name
    proj.mkdir(parents=True)
    for p in TOOLS_DIR.glob("*.jsonl"):
        shutil.copyfile(p, proj / p.name)
    with_prompt_usage(EDGE, proj / "11111111-2222-3333-4444-555555555555.jsonl")
    return proj


def _session(proj: Path) -> Path:
    return next(p for p in proj.glob("*.jsonl") if not p.name.startswith("1111"))


def test_strip_all_then_verify_then_apply(env):
    f = _session(env)
    before = f.read_bytes()
    r = run("strip-all", str(f))
    assert r.exit_code == 0, r.output
    assert "Pending copy:" in r.output and "original is untouched" in r.output
    assert f.read_bytes() == before
    r = run("verify", str(f) + ".pending")
    assert r.exit_code == 0 and "OK" in r.output
    r = run("apply", str(f) + ".pending", "--json")
    assert r.exit_code == 0, r.output
    rep = json.loads(r.output)
    assert rep["applied"] and rep["backup"].endswith(".bak")
    assert f.read_bytes() != before


def test_commands_by_session_id_and_json(env):
    sid = _session(env).stem
    r = run("strip-tools", sid, "--only-results", "--keep-last-lines", "1", "--json", "--dry-run")
    assert r.exit_code == 0, r.output
    rep = json.loads(r.output)
    assert rep["dry_run"] and not rep["written"] and rep["operation"] == "strip-tools"
    assert not (env / (sid + ".jsonl.pending")).exists()


def test_strip_attachments_list(env):
    f = env / "11111111-2222-3333-4444-555555555555.jsonl"
    # the fixture's model has no task tools: its task_reminders are free
    r = run("strip-attachments", str(f), "--list", "--include-free", "--json")
    assert r.exit_code == 0, r.output
    rows = {x["type"]: x for x in json.loads(r.output)}
    assert rows["task_reminder"]["count"] == 3 and rows["task_reminder"]["drop"] == 2
    assert rows["queued_command"]["drop"] == 0
    assert not Path(str(f) + ".pending").exists()
    r = run("strip-attachments", str(f), "--include-free")
    assert r.exit_code == 0 and "2 of 5 attachments dropped" in r.output


def test_fork_stamping_and_title_collisions(env):
    f = _session(env)
    original = f.read_bytes()
    r = run("strip-tools", str(f), "--fork", "--json")
    assert r.exit_code == 0, r.output
    rep = json.loads(r.output)
    fork = Path(rep["target"])
    assert fork.parent == f.parent and fork.name == rep["fork_session_id"] + ".jsonl"
    assert f.read_bytes() == original and not Path(str(f) + ".pending").exists()
    assert fork.stat().st_mode & 0o777 == 0o600
    objs = [orjson.loads(x) for x in fork.read_bytes().splitlines()]
    old_sid = f.stem
    types = {o.get("type") for o in objs}
    assert not types & {"api-request", "api-request-blob", "api-request-shape", "cost-state",
                        "bridge-session", "continued-in"}
    for o in objs:
        if "sessionId" in o:
            assert o["sessionId"] == rep["fork_session_id"]
        if o.get("uuid") and o.get("type") in ("user", "assistant", "attachment", "system"):
            assert o["forkedFrom"] == {"sessionId": old_sid, "messageUuid": o["uuid"]}
            assert o["strippedBy"]["tool"] == "txdb" and o["strippedBy"]["operation"] == "strip-tools"
            assert o["strippedBy"]["at"].endswith("Z")
    roots = [o for o in objs if o.get("uuid") and o.get("parentUuid") is None]
    assert roots and all(o.get("parentUuid") is None for o in roots)
    title = objs[-1]
    assert title["type"] == "custom-title" and title["customTitle"].endswith(" (Stripped)")
    r2 = json.loads(run("fork", str(f), "--json").output)
    t2 = [orjson.loads(x) for x in Path(r2["target"]).read_bytes().splitlines()][-1]["customTitle"]
    assert t2.endswith(" (Stripped 2)") and t2[: -len(" (Stripped 2)")] == title["customTitle"][: -len(" (Stripped)")]
    r3 = json.loads(run("fork", str(f), "--fork-title", "checkpoint", "--json").output)
    assert [orjson.loads(x) for x in Path(r3["target"]).read_bytes().splitlines()][-1]["customTitle"] == "checkpoint"


def test_the_usage_reset_line_counts_turns_in_words(env):
    f = env / "11111111-2222-3333-4444-555555555555.jsonl"
    n = json.loads(run("strip-all", str(f), "--dry-run", "--json").output)["usage"]["capped"]
    assert n >= 1
    out = run("strip-all", str(f), "--dry-run").output
    assert f"Usage reset: {n} turn{'' if n == 1 else 's'} capped;" in out, out


def test_reset_usage_standalone(env):
    f = env / "11111111-2222-3333-4444-555555555555.jsonl"
    r = run("strip-all", str(f), "--no-usage-reset", "--json")
    rep = json.loads(r.output)
    assert rep["usage"] is None
    r = run("apply", str(f))
    assert r.exit_code == 0, r.output
    r = run("reset-usage", str(f), "--json")
    assert r.exit_code == 0, r.output
    rep = json.loads(r.output)
    assert rep["result"]["capped"] >= 1
    assert rep["result"]["last_after"] < rep["result"]["last_before"]


def test_snapshot_command(env):
    f = _session(env)
    r = run("snapshot", str(f))
    assert r.exit_code == 0 and "Snapshot taken" in r.output
    r = run("snapshot", str(f))
    assert "reused" in r.output
    r = run("snapshot", str(f), "--refresh", "--json")
    assert json.loads(r.output)["created"] is True


@pytest.mark.parametrize("args,code,error", [
    (["apply", "{f}"], 1,
     "no pending copy for {name}: a surgery command (strip-*, persist-*, compact-range, ...) makes one first"),
    (["strip-all", "/nonexistent/x.jsonl"], 1, "no session file at /nonexistent/x.jsonl"),
    (["strip-attachments", "{f}", "--drop-all"], 2,
     "--drop-all needs --types (it can remove what tells the model its tools exist)"),
    (["strip-thinking", "{f}", "--from", "9", "--to", "3"], 1,
     "--from 9 is after --to 3: give the range lowest position first"),
    (["strip-tools", "{f}", "--only-inputs", "--only-results"], 2, "--only-inputs and --only-results exclude each other"),
    (["strip-all", "no-such-session-id"], 1, "no session 'no-such-session-id' in the catalog (run `txdb refresh`?)"),
    (["strip-all", "{f}", "--apply", "--fork"], 2, "--apply and --fork exclude each other (a fork needs no apply)"),
    (["strip-all", "{f}", "--where", "1"], 2, "give a SESSION or --where, not both"),
    (["strip-all"], 2, "Missing argument 'SESSION' (or --where \"<SQL condition>\")"),
    (["reset-usage", "{f}", "--from", "3"], 2, "No such option '--from'. Did you mean '--fork'?"),
    (["reset-usage", "{f}", "--no-usage-reset"], 2, "No such option '--no-usage-reset'."),
])
def test_errors_are_one_line(env, args, code, error):
    f = _session(env)
    args = [a.replace("{f}", str(f)) for a in args]
    r = CliRunner().invoke(cli, args)
    assert r.exit_code == code
    # An error the user can fix is one line (a usage error after click's usage hint).
    assert r.output.splitlines()[-1] == "Error: " + error.replace("{name}", f.name)
    if code == 1:
        assert r.output.count("\n") == 1


@pytest.mark.parametrize("args,makes", [(["strip-all"], True), (["reset-usage"], False),
                                        (["strip-tools", "--where", "1"], True), (["fork"], True),
                                        (["compact", "--before", "2"], True)])
def test_every_mutating_command_takes_no_backup(env, args, makes):
    """The surgery spec: every command takes --no-backup. Without --apply it
    has nothing to skip: the original is untouched and no .bak appears."""
    f = _session(env)
    before, sessions = f.read_bytes(), len(list(env.glob("*.jsonl")))
    if "--where" in args:
        assert run("refresh").exit_code == 0
        argv = [args[0], "--no-backup", *args[1:]]
    else:
        argv = [args[0], str(f), "--no-backup", *args[1:]]
    r = CliRunner().invoke(cli, argv)
    assert r.exit_code == 0, r.output
    assert "Error" not in r.output
    assert f.read_bytes() == before and not list(env.glob("*.bak*"))
    # the pass itself was made: a pending copy, or (fork, compact) a new session
    # (reset-usage finds nothing stale in a session no pass changed)
    assert not makes or Path(str(f) + ".pending").exists() or len(list(env.glob("*.jsonl"))) == sessions + 1


def test_no_backup_with_apply_keeps_no_backup(env):
    f = _session(env)
    assert run("refresh").exit_code == 0
    r = CliRunner().invoke(cli, ["strip-tools", "--where", "1", "--apply", "--no-backup"])
    assert r.exit_code == 0, r.output
    assert not Path(str(f) + ".pending").exists() and not list(env.glob("*.bak*"))


def test_apply_refusal_is_one_line_and_changes_nothing(env):
    f = _session(env)
    run("strip-all", str(f))
    with open(f, "r+b") as fh:  # rewrite the original in place (as some other tool might)
        fh.seek(10)
        fh.write(b"X")
    state = {p.name: p.read_bytes() for p in env.iterdir()}
    r = CliRunner().invoke(cli, ["apply", str(f)])
    assert r.exit_code == 1
    assert r.output == (f"Error: {f.name} was rewritten since the snapshot (prefix hash differs); the pending "
                        f"copy no longer descends from it: run `txdb snapshot --refresh {f}`\n")
    assert {p.name: p.read_bytes() for p in env.iterdir()} == state


# (CLI arguments, the command's options as a library caller gives them to its declaration)
_BY_DECLARATION = [
    (["strip-tools", "--only-results", "--from", "13", "--to", "20"], {"only_results": True, "positions": (13, 20)}),
    (["strip-thinking", "--from", "0", "--to", "11"], {"positions": (0, 11)}),
    (["strip-all", "--keep-last-lines", "2"], {"keep_last_lines": 2}),
    (["strip-attachments", "--include-free", "--keep-recent", "0"], {"include_free": True, "keep_recent": 0}),
    (["persist-tool", "--id", "toolu_fake0004cbd1149dd5af", "--summary", "s"],
     {"id": "toolu_fake0004cbd1149dd5af", "summary": "s"}),
    (["persist-text", "--pos", "25"], {"pos": 25}),
    (["persist-thinking", "--pos", "27", "--summary", "t"], {"pos": 27, "summary": "t"}),
    (["compact-range", "--from", "11", "--to", "13", "--summary", "s"], {"positions": (11, 13), "summary": "s"}),
    (["rescue", "--target", "13000", "--keep-recent", "0"], {"target": 13000, "keep_recent": 0}),
]


@pytest.mark.parametrize("args,options", _BY_DECLARATION, ids=[" ".join(a) for a, _ in _BY_DECLARATION])
def test_a_command_is_its_declaration_for_a_session_too(env, args, options):
    """Issue 18: a SESSION runs the op its declaration builds (the one --where
    uses), so a library caller naming the command and its options gets the
    pending copy (and sidecars) the CLI writes, byte for byte."""
    from txdb.surgery import pending as pend
    from txdb.model import sidecar
    from txdb.surgery.commands import COMMANDS
    from txdb.surgery.engine import PassOptions, run_surgery

    f = _session(env)
    r = run(args[0], str(f), *args[1:])
    assert r.exit_code == 0, r.output
    by_cli = pend.pending_path(f).read_bytes()
    sdir = sidecar.session_dir(f)
    files = {p.relative_to(sdir): p.read_bytes() for p in sdir.rglob("*") if p.is_file()} if sdir.is_dir() else {}
    assert by_cli != f.read_bytes()
    pend.pending_path(f).unlink()
    pend.meta_path(f).unlink()
    if sdir.is_dir():
        shutil.rmtree(sdir)
    rep = run_surgery(f, args[0], COMMANDS[args[0]].make_op(options), PassOptions(positions=options.get("positions")))
    assert rep.written
    assert type(rep.result) is COMMANDS[args[0]].result and rep.result.changed > 0  # its declared kind, typed
    assert pend.pending_path(f).read_bytes() == by_cli
    assert ({p.relative_to(sdir): p.read_bytes() for p in sdir.rglob("*") if p.is_file()}
            if sdir.is_dir() else {}) == files
