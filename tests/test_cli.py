"""The command line: each command against a real catalog in tmp_path."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from functools import partial
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from conftest import run as txdb
from sessions import append, conversation, user, write
from txdb.cli import cli
from txdb.catalog.estimate import FITTED


@pytest.fixture
def run(db_path, monkeypatch, tmp_path):
    """conftest's ``run`` (asserting exit 0 unless ok=False) with this test's catalog and config folder."""
    monkeypatch.setenv("TXDB_DB", str(db_path))
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "claude"))
    monkeypatch.delenv("CLAUDE_CODE_SESSION_ID", raising=False)
    return partial(txdb, ok=True)


@pytest.fixture
def home(tmp_path, projects):
    """CLAUDE_CONFIG_DIR/projects holding the fixture sessions."""
    target = tmp_path / "claude" / "projects"
    target.parent.mkdir(parents=True, exist_ok=True)
    projects.rename(target)
    return target


def test_refresh_then_query_formats(run, home):
    out = run("refresh").output
    assert out.startswith("1") and "new, 0 grown, 0 rewritten, 0 unchanged, 0 gone" in out
    sql = "select type, count(*) as n from records where type in ('user','assistant') group by type order by type"
    as_json = json.loads(run("query", sql, "--json").output)
    assert [r["type"] for r in as_json] == ["assistant", "user"]
    nl = [json.loads(ln) for ln in run("query", sql, "--nl").output.splitlines()]
    assert nl == as_json
    csv_out = run("query", sql, "--csv").output.splitlines()
    assert csv_out[0] == "type,n" and csv_out[1] == f"assistant,{as_json[0]['n']}"
    table = run("query", sql, "--table").output.splitlines()
    assert table[0].split() == ["type", "n"] and table[2].split()[0] == "assistant"
    params = json.loads(run("query", "select :x as x", "-p", "x", "7", "--json").output)
    assert params == [{"x": "7"}]


def test_csv_lines_end_with_a_newline_only(run, home, tmp_path):
    """`$(txdb query ... --csv)` in a shell keeps a \\r: lines end with \\n, as
    sqlite-utils' CSV; a value holding a newline is quoted whole."""
    run("refresh")
    r = run("query", "select 'a' as x, 1 as n union all select 'two' || char(10) || 'lines', 2", "--csv")
    assert r.stdout_bytes == b'x,n\na,1\n"two\nlines",2\n'
    r = subprocess.run(["sh", "-c", f'v=$({sys.executable} -m txdb.cli query "select 7 as n" --csv); printf %s "$v"'],
                       capture_output=True, env=dict(os.environ), check=True)
    assert r.stdout == b"n\n7"


def test_query_is_read_only_and_errors_are_one_line(run, home):
    run("refresh")
    r = run("query", "delete from records", ok=False)
    assert r.exit_code == 1
    assert r.output == ("Error: query refused: DELETE on records is not allowed: queries only read "
                        "(SELECT, WITH, schema PRAGMAs)\n")
    r = run("query", "select nope from nowhere", ok=False)
    assert r.exit_code == 1 and r.output == "Error: query failed: no such table: nowhere\n"


def test_missing_root_is_a_hint_not_an_error(run, tmp_path):
    r = run("refresh", "--root", tmp_path / "none")
    first, summary = r.output.splitlines()
    assert first == f"No sessions folder at {tmp_path / 'none'} (nothing to index; set --root or CLAUDE_CONFIG_DIR)."
    assert summary.startswith("0 new, 0 grown, 0 rewritten, 0 unchanged, 0 gone; 0 lines")


def test_sessions_lists_one_row_per_session(run, home):
    run("refresh")
    data = json.loads(run("sessions", "--json").output)
    ids = {d["session_id"] for d in data}
    assert "b3edadab-bca0-4054-9b41-f7ffa6941260" in ids
    assert not any(d["session_id"].startswith("agent-") for d in data)
    with_sub = json.loads(run("sessions", "--json", "--subagents").output)
    assert len(with_sub) > len(data)
    top = json.loads(run("sessions", "--json", "--sort", "tokens", "--limit", "1").output)
    assert top[0]["est_context_tokens"] == max(d["est_context_tokens"] for d in data)


def test_sessions_print_the_url_of_each_session_page_that_serve_serves(run, home, db_path):
    import asyncio
    import sqlite3

    from txdb.web.metadata import make_datasette

    run("refresh")
    data = json.loads(run("sessions", "--json").output)
    conn = sqlite3.connect(db_path)
    paths = {p for (p,) in conn.execute("SELECT path FROM files")}
    conn.close()
    prefix = "http://127.0.0.1:8001"  # where `txdb serve` listens by default
    for d in data:  # the page by the session's id (its file's name), not an internal file number
        assert d["path"] in paths and d["url"] == f"{prefix}/-/txdb/session/{Path(d['path']).stem}"
    assert f"{prefix}/-/txdb/session/b3edadab-bca0-4054-9b41-f7ffa6941260" in {d["url"] for d in data}
    table = run("sessions", "--table", "--urls").output.splitlines()
    assert table[0].split()[-1] == "url" and all(ln.split()[-1].startswith(prefix) for ln in table[2:])
    assert "url" not in run("sessions", "--table").output.splitlines()[0].split()
    # the page is there, for this session
    one = next(d for d in data if d["session_id"] == "b3edadab-bca0-4054-9b41-f7ffa6941260")

    async def get(path):
        return await make_datasette(db_path).client.get(path)
    page = asyncio.run(get(one["url"][len(prefix):]))
    assert page.status_code == 200 and one["session_id"] in page.text


def test_analyze_by_id_and_path(run, home):
    run("refresh")
    sid = "ef958aa1-0e93-49f0-bb71-150f63befcd1"
    report = json.loads(run("analyze", sid, "--json").output)
    s = report["session"]
    assert s["session_id"] == sid and s["chain_length"] > 100
    cats = {r["category"] for r in report["by_type"]}
    assert {"tool_use", "tool_result", "attachment", "thinking"} <= cats
    # raw_tokens are chars/4 of the chain; tokens restate them to add up to the estimate (below)
    assert sum(r["raw_tokens"] for r in report["by_type"] if r["category"] != FITTED) == s["chain_tokens"]
    tools = {r["tool_name"]: r for r in report["by_tool"]}
    assert tools and all(r["calls"] >= 1 for r in tools.values())
    att = {r["type"]: r for r in report["attachments"]}
    assert att["task_reminder"]["kept"] == 1 and att["task_reminder"]["dropped"] == att["task_reminder"]["count"] - 1
    text = run("analyze", str(home / "-experiments-worktrees" / f"{sid}.jsonl")).output
    assert f"Session {sid}" in text and "By tool (tokens: chars/4, as raw_tokens):" in text
    assert "Attachments (tokens: chars/4, as raw_tokens):" in text
    # as the headings say: the tools' tokens are the chars/4 of their calls and results
    raw = {r["category"]: r["raw_tokens"] for r in report["by_type"]}
    assert sum(r["tokens"] for r in tools.values()) == raw["tool_use"] + raw["tool_result"]


def test_analyze_by_type_adds_up_to_the_estimate_as_the_session_page_does(run, home, db_path):
    """A new user's item 9: analyze's "By type" summed to chars/4 (347,678)
    under an estimate of 635,290, while the session page restated the same
    breakdown to the estimate: the two disagreed on what fills the context.
    Both now show the figures that add up to the estimate (the fitted
    system prompt and tools a row of their own), chars/4 beside them."""
    from txdb.catalog import db
    from txdb.web.session import load_session

    run("refresh")
    sid = "ef958aa1-0e93-49f0-bb71-150f63befcd1"
    report = json.loads(run("analyze", sid, "--json").output)
    rows = report["by_type"]
    assert sum(r["tokens"] for r in rows) == report["estimate"]["calibrated"]
    assert report["estimate"]["calibrated"] != report["estimate"]["raw"]  # a figure scaling can change
    conn = db.connect(db_path)
    page = load_session(conn, report["session"]["file_id"], 0, 50)
    conn.close()
    assert [(r["category"], r["tokens"], r["raw_tokens"]) for r in page["by_type"]] == \
        [(r["category"], r["tokens"], r["raw_tokens"]) for r in rows]
    text = run("analyze", sid).output
    table = text.split("By type", 1)[1].split("\n\n", 1)[0]
    fitted = next(ln for ln in table.splitlines() if ln.startswith(FITTED))
    assert f" {next(r['tokens'] for r in rows if r['category'] == FITTED):,} " in f"{fitted} "


def test_a_path_the_catalog_lacks_or_that_changed_is_refreshed_first(run, tmp_path):
    path = write(tmp_path / "loose" / "-p" / "s.jsonl", conversation(2, session="loose"))
    report = json.loads(run("analyze", path, "--json").output)
    assert report["session"]["chain_length"] == 8
    leaf = orjson.loads(path.read_bytes().splitlines()[-1])["uuid"]
    append(path, user("more", leaf, session="loose"))
    report = json.loads(run("analyze", "loose", "--json").output)
    assert report["session"]["chain_length"] == 9


def test_unknown_session_and_missing_file_are_one_line_errors(run, home, tmp_path):
    run("refresh")
    missing = tmp_path / "missing.jsonl"
    for ref, error in (("no-such-session", "no session 'no-such-session' in the catalog (run `txdb refresh`?)"),
                       (str(missing), f"no session file at {missing}")):
        r = run("analyze", ref, ok=False)
        assert r.exit_code == 1
        assert r.output == f"Error: {error}\n"
    for command in ("analyze", "verify"):
        r = run(command, tmp_path, ok=False)
        assert r.exit_code == 1 and r.output == f"Error: {tmp_path} is a folder, not a session file\n"


def test_verify_exit_codes(run, tmp_path):
    good = write(tmp_path / "p" / "-x" / "good.jsonl", conversation(2))
    r = run("verify", good)
    assert r.output.splitlines()[-1].startswith("OK:")
    objs = conversation(3)
    objs[5]["parentUuid"] = "not-there"  # breaks the chain mid-file
    for o in objs[5:]:  # a minute later: resume bridges only a gap of seconds
        o["timestamp"] = o["timestamp"].replace("T10:", "T11:")
    bad = write(tmp_path / "p" / "-x" / "bad.jsonl", objs)
    r = run("verify", bad, ok=False)
    assert r.exit_code == 1
    assert r.output.splitlines() == [
        "error: line 6: parent not-there is not in the file: 5 user/assistant lines (lines 1-5) are not on "
        "the chain resume sends",
        f"BROKEN: {bad}: 12 lines, chain of 7; 1 error, 0 warnings, 0 notes"]
    report = json.loads(run("verify", bad, "--json", ok=False).output)
    assert report["ok"] is False and report["counts"]["error"] == 1


def test_verify_a_pending_copy_without_the_catalog(run, tmp_path):
    pending = tmp_path / "s.jsonl.pending"
    write(pending, conversation(1))
    assert run("verify", pending).output.startswith("OK:")


def test_current_uses_the_session_env_var(run, home, monkeypatch):
    r = run("current", ok=False)
    assert r.exit_code == 1 and r.output == ("Error: CLAUDE_CODE_SESSION_ID is not set: not inside a Claude "
                                             "Code session; name the session instead\n")
    monkeypatch.setenv("CLAUDE_CODE_SESSION_ID", "b3edadab-bca0-4054-9b41-f7ffa6941260")
    # Not refreshed yet: found under the projects root all the same.
    path = run("current", "--quiet").output.strip()
    assert path == str(home / "-Users-user-project" / "b3edadab-bca0-4054-9b41-f7ffa6941260.jsonl")
    assert "exists: True" in run("current").output


def test_current_of_a_session_with_no_file_yet_says_where_it_will_be(run, home, monkeypatch, tmp_path):
    """A session that has written no line has no file: `current` prints its
    id, the path Claude Code will write, and that it does not exist."""
    work = tmp_path / "my work.dir"
    work.mkdir()
    monkeypatch.chdir(work)
    sid = "0000beef-0000-4000-8000-000000000000"
    monkeypatch.setenv("CLAUDE_CODE_SESSION_ID", sid)
    want = home / str(work).replace("/", "-").replace(" ", "-").replace(".", "-").replace("_", "-") / f"{sid}.jsonl"
    assert run("current").output == f"id: {sid}\npath: {want}\nexists: False\n"
    assert json.loads(run("current", "--json").output) == {"id": sid, "path": str(want), "exists": False}
    assert run("current", "--quiet").output == f"{want}\n"
    assert not want.parent.exists()  # said, never made
    monkeypatch.setenv("CLAUDE_CODE_SESSION_ID", "../../etc/x")
    r = run("current", ok=False)
    assert r.exit_code == 1 and r.output == "Error: '../../etc/x' is not a session id\n"


def _complete(words: str, db: Path, shell: str = "bash") -> list[str]:
    """What `txdb` answers the shell's completion for ``words`` (the last one being typed)."""
    env = dict(os.environ, _TXDB_COMPLETE=f"{shell}_complete", COMP_WORDS=words,
               COMP_CWORD=str(len(words.split()) - (0 if words.endswith(" ") else 1)), TXDB_DB=str(db))
    r = subprocess.run([sys.executable, "-m", "txdb.cli"], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    return [ln for ln in r.stdout.splitlines() if ln]


def test_session_ids_complete_in_the_shell(run, home, db_path, tmp_path):
    run("refresh")
    sid = "b3edadab-bca0-4054-9b41-f7ffa6941260"
    assert _complete("txdb analyze b3e", db_path) == [f"plain,{sid}"]
    for command in ("strip-tools", "verify", "show-tool", "apply", "fork"):  # every SESSION argument
        assert _complete(f"txdb {command} b3edadab-b", db_path) == [f"plain,{sid}"], command
    every = _complete("txdb analyze ", db_path)
    ids = {ln.split(",", 1)[1] for ln in every}
    assert sid in ids and "ef958aa1-0e93-49f0-bb71-150f63befcd1" in ids
    assert not any(i.startswith("agent-") for i in ids)  # subagents are not sessions to name
    # zsh shows the title beside the id
    zsh = _complete("txdb analyze 4e27", db_path, "zsh")
    assert zsh[1] == "4e27c414-a885-46a0-b5c8-d58e1417377d" and zsh[2] not in ("", "_")
    # a path is the shell's to complete; --db on the line is the catalog read
    assert _complete("txdb analyze ./x", db_path) == ["file,./x"]
    other = tmp_path / "other.db"
    assert _complete(f"txdb analyze --db {other} b3e", db_path) == []


def test_completion_never_fails_and_creates_nothing(tmp_path):
    missing = tmp_path / "none" / "c.db"
    assert _complete("txdb analyze b3", missing) == []
    assert not (tmp_path / "none").exists()
    broken = tmp_path / "broken.db"
    broken.write_text("not a database\n")
    assert _complete("txdb analyze b3", broken) == []
    assert broken.read_text() == "not a database\n"


def test_path_prints_the_catalog_location(run, db_path):
    assert run("path").output.strip() == str(db_path)


def test_every_command_has_help_with_an_example():
    runner = CliRunner()
    names = cli.list_commands(None)
    assert {"refresh", "query", "strip-tools", "apply", "serve"} <= set(names)
    for name in names:
        out = runner.invoke(cli, [name, "--help"]).output
        assert "Example:" in out, name


# The commands that print no report: a path for `$(...)`, a server.
NOT_REPORTING = {"path", "serve"}


def test_every_command_that_reports_takes_json():
    """README: commands that report take --json. Walks the whole command
    table (main.py's and commands.py's), so a new command is held to it."""
    import click
    ctx = click.Context(cli)
    names = cli.list_commands(ctx)
    assert NOT_REPORTING < set(names)

    def leaves(name, cmd):  # a group's subcommands report, not the group
        if isinstance(cmd, click.Group):
            sub = click.Context(cmd)
            return [x for n in cmd.list_commands(sub) for x in leaves(f"{name} {n}", cmd.get_command(sub, n))]
        return [(name, cmd)]
    commands = [x for n in names if n not in NOT_REPORTING for x in leaves(n, cli.get_command(ctx, n))]
    assert any(" " in n for n, _ in commands)  # groups are walked (`secrets scan`)
    lacking = [n for n, c in commands if "--json" not in {o for p in c.params for o in getattr(p, "opts", ())}]
    assert lacking == []


def test_every_command_of_the_lazy_modules_is_listed():
    """Each command a lazy module defines is one `txdb` resolves. Checked from
    fresh processes: in this one the modules may be imported already, and a
    command missing from LAZY_COMMANDS would resolve here and nowhere else."""
    from txdb.cli.main import LAZY_COMMANDS
    code = (
        "import importlib, json\n"
        "from txdb.cli.main import LAZY_COMMANDS, cli\n"
        "base = set(cli.commands)\n"
        "for module in sorted(set(LAZY_COMMANDS.values())):\n"
        "    importlib.import_module(module)\n"
        "defined = {n: c.callback.__module__ for n, c in cli.commands.items() if n not in base}\n"
        "print(json.dumps({'base': sorted(base), 'defined': defined}))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    seen = json.loads(r.stdout)
    defined = seen["defined"]  # each command the lazy modules define: the module it lives in
    assert defined == LAZY_COMMANDS
    listed = subprocess.run([sys.executable, "-m", "txdb.cli", "--help"], capture_output=True, text=True)
    assert listed.returncode == 0, listed.stderr
    shown = {ln.split()[0] for ln in listed.stdout.split("Commands:", 1)[1].splitlines() if ln.strip()}
    assert shown == set(seen["base"]) | set(defined)
    for name in sorted(defined):
        h = subprocess.run([sys.executable, "-m", "txdb.cli", name, "--help"], capture_output=True, text=True)
        assert h.returncode == 0 and f"Usage: txdb {name}" in h.stdout, (name, h.stderr)


def test_installed_entry_point_runs_without_traceback(tmp_path):
    exe = Path(sys.executable).parent / "txdb"
    if not exe.exists():
        pytest.skip("txdb entry point not installed in this environment")
    env = dict(os.environ, TXDB_DB=str(tmp_path / "c.db"))
    r = subprocess.run([str(exe), "analyze", "nothing-here"], capture_output=True, text=True, env=env)
    assert r.returncode == 1
    # TXDB_DB names the catalog, so plain `txdb refresh` makes it
    assert r.stderr == f"Error: no catalog at {tmp_path / 'c.db'}: run `txdb refresh` first\n"


def test_catalog_and_surgery_estimates_never_disagree(catalog):
    """analyze, the views, the session list and the surgery plan show one
    figure per session: the calibrated estimate (and one raw chars/4)."""
    from txdb.catalog import sessions as cat
    from txdb.catalog import estimate
    from txdb.surgery.engine import PassOptions, run_surgery
    from txdb.surgery.ops import chain_estimate
    from txdb.model.transcript import Transcript
    from txdb.surgery.usage import context_estimator

    rows = catalog.execute("SELECT file_id, path, est_context_tokens, raw_context_tokens FROM session_costs"
                           ).fetchall()
    assert len(rows) >= 10
    listed = {r["path"]: r["est_context_tokens"] for r in cat.list_sessions(catalog, include_subagents=True)}
    for file_id, path, est, raw in rows:
        t = Transcript.load(path)
        assert chain_estimate(t) == raw, path
        assert (estimate.catalog_chain_tokens(catalog, file_id)
                + estimate.catalog_system_prompt_tokens(catalog, file_id)) == raw, path
        assert cat.analyze(catalog, file_id)["estimate"]["calibrated"] == est, path
        assert listed[path] == est, path
        assert context_estimator(t)(t) == est, path
    # the plan's "before" is that figure too
    file_id, path, est, _ = rows[0]
    rep = run_surgery(path, "strip-all", lambda t, o: {}, PassOptions(dry_run=True))
    assert rep.tokens_before == rep.tokens_base == est

# -- errors: expected ones are one line, a bug keeps its traceback ----------------

def test_an_unexpected_exception_shows_its_traceback(tmp_path):
    """A bug is not dressed up as `Error: unexpected ...`: Python's traceback
    names where it happened (as sqlite-utils does)."""
    code = ("import click\n"
            "from txdb.cli import cli\n"
            "@cli.command('boom')\n"
            "def boom():\n"
            "    'Example: txdb boom'\n"
            "    {}['missing']\n"
            "cli(['boom'], prog_name='txdb')\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env=dict(os.environ, TXDB_DB=str(tmp_path / "c.db")))
    assert r.returncode == 1
    assert r.stderr.startswith("Traceback (most recent call last):")
    assert r.stderr.splitlines()[-1] == "KeyError: 'missing'"
    assert "Error: unexpected" not in r.stderr


def test_verify_exits_through_the_group_like_every_command(tmp_path):
    """verify's verdict is click's Exit(1), the way every command exits: a
    caller running the group without standalone mode gets the code back."""
    objs = conversation(3)
    objs[5]["parentUuid"] = "not-there"
    for o in objs[5:]:
        o["timestamp"] = o["timestamp"].replace("T10:", "T11:")
    bad = write(tmp_path / "p" / "-x" / "bad.jsonl", objs)
    good = write(tmp_path / "p" / "-x" / "good.jsonl", conversation(2))
    db_arg = ["--db", str(tmp_path / "c.db")]
    assert cli.main(["verify", str(bad), *db_arg], standalone_mode=False) == 1
    assert cli.main(["verify", str(good), *db_arg], standalone_mode=False) is None


@pytest.mark.parametrize("make,error", [
    (lambda p: p.write_text("hello\n"), "{p} cannot be used as a txdb catalog: file is not a database"),
    (lambda p: __import__("sqlite3").connect(p).executescript("create table records(x);"),
     "{p} is not a txdb catalog (it holds other tables): name another --db"),
])
def test_a_db_that_is_not_a_catalog_is_one_error_line_and_left_alone(tmp_path, make, error):
    p = tmp_path / "other.db"
    make(p)
    p.chmod(0o644)
    before = p.read_bytes()
    for args in (["sessions"], ["refresh", "--root", str(tmp_path / "none")], ["query", "select 1"],
                 ["analyze", "x"]):
        r = CliRunner().invoke(cli, [*args, "--db", str(p)])
        assert r.exit_code == 1, r.output
        assert r.output == "Error: " + error.format(p=p) + "\n"
    assert p.read_bytes() == before and p.stat().st_mode & 0o777 == 0o644
    assert sorted(x.name for x in tmp_path.iterdir()) == ["other.db"]


@pytest.mark.parametrize("args", [
    ["sessions"], ["sessions", "--json"], ["query", "select 1"], ["analyze", "abcd1234"], ["verify", "abcd1234"],
    ["show-tool", "abcd1234"], ["show-thinking", "abcd1234"], ["list-images", "abcd1234"], ["search", "word"],
    ["cost"], ["cost", "--json"],
])
def test_a_reading_command_on_a_missing_catalog_says_so_and_creates_nothing(tmp_path, args):
    """A mistyped --db is one error line naming the path and the command that
    makes a catalog there, never an empty catalog answering []."""
    typo = tmp_path / "typo" / "catalgo.db"
    r = CliRunner().invoke(cli, [*args, "--db", str(typo)])
    assert r.exit_code == 1, r.output
    assert r.output == f"Error: no catalog at {typo}: run `txdb refresh --db {typo}` first\n"
    assert list(tmp_path.iterdir()) == []


def test_serve_on_a_missing_catalog_says_so_and_creates_nothing(tmp_path):
    typo = tmp_path / "catalgo.db"
    r = subprocess.run([sys.executable, "-m", "txdb.cli", "serve", "--port", "0", "--db", str(typo)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and r.stderr == f"Error: no catalog at {typo}: run `txdb refresh --db {typo}` first\n"
    assert list(tmp_path.iterdir()) == []


def test_the_default_catalog_missing_says_run_txdb_refresh(tmp_path, monkeypatch):
    monkeypatch.delenv("TXDB_DB", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    r = CliRunner().invoke(cli, ["sessions"])
    assert r.exit_code == 1
    assert r.output == f"Error: no catalog at {tmp_path / 'data' / 'txdb' / 'txdb.db'}: run `txdb refresh` first\n"
    assert not (tmp_path / "data").exists()


def test_a_catalog_path_that_cannot_exist_is_one_error_line(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    r = CliRunner().invoke(cli, ["strip-tools", "abcd1234", "--db", str(blocker / "c.db")])
    assert r.exit_code == 1
    assert r.output == f"Error: cannot create the catalog {blocker / 'c.db'}: a file is in the way of its folder\n"


_NOT_AT_REFRESH = ('txdb.surgery', 'txdb.web', 'datasette', 'sqlite_utils')
# Nor, with nothing to do, what reading files or pricing new models needs.
_NOT_AT_NOOP_REFRESH = _NOT_AT_REFRESH + ('importlib.resources', 'importlib.readers', 'zipfile',
                                          'genai_prices')


def test_refresh_does_not_load_the_surgery_engine_or_datasette(tmp_path, projects):
    """Start-up (issue 18): a refresh loads neither the surgery engine nor
    Datasette nor sqlite-utils; one with nothing to do not even the
    importlib.resources machinery (the catalog's SQL is read from its folder)."""
    for forbidden in (_NOT_AT_REFRESH, _NOT_AT_NOOP_REFRESH):
        code = ("import sys\n"
                "from txdb.cli import cli\n"
                f"cli.main(['refresh', '--root', {str(projects)!r}, '--db', {str(tmp_path / 'c.db')!r}],"
                " standalone_mode=False)\n"
                f"print(sorted(m for m in sys.modules if m.startswith({forbidden!r})))\n")
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        assert r.stdout.splitlines()[-1] == "[]"


def test_query_loads_no_catalog_module_and_no_file_reading(tmp_path, projects):
    """Start-up (issue 18): `txdb query` opens the catalog and runs the SQL;
    it loads neither txdb.catalog.sessions nor what reads session files (discovery,
    the store; nor the surgery engine)."""
    db_path = str(tmp_path / "c.db")
    assert CliRunner().invoke(cli, ["refresh", "--root", str(projects), "--db", db_path]).exit_code == 0
    code = ("import sys\n"
            "from txdb.cli import cli\n"
            f"cli.main(['query', 'select count(*) as n from files', '--json', '--db', {db_path!r}],"
            " standalone_mode=False)\n"
            "print(sorted(m for m in sys.modules if m.startswith(('txdb.catalog.sessions', 'txdb.catalog.ingest.store', "
            "'txdb.catalog.ingest.discover', 'txdb.model.lines', 'txdb.surgery'))))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert '"n": ' in r.stdout and r.stdout.splitlines()[-1] == "[]"


def test_every_command_shows_its_examples_line_by_line():
    """`txdb COMMAND --help` prints each example on its own line (click rewraps
    a paragraph unless it is marked to be kept as written)."""
    import importlib

    from txdb.cli.main import LAZY_COMMANDS
    for module in set(LAZY_COMMANDS.values()):
        importlib.import_module(module)
    for name in sorted(cli.commands):
        r = CliRunner().invoke(cli, [name, "--help"], terminal_width=80)
        assert r.exit_code == 0, name
        doc = cli.commands[name].help or ""
        assert "Example:" in doc, f"{name} has no Example block"
        examples = [ln.strip() for ln in doc.split("Example:", 1)[1].splitlines()
                    if ln.strip() and ln.strip() != "\b"]
        shown = [ln.strip() for ln in r.output.splitlines()]
        for ex in examples:
            assert ex in shown, (name, ex)


@pytest.mark.parametrize("args,name", [
    (["query", "select '\udcff'"], "SQL"),
    (["analyze", "\udcff"], "SESSION"),
    (["sessions", "--project", "x\udcff"], "--project"),
    (["strip-all", "--where", "x = '\udcff'"], "--where"),
])
def test_text_that_is_not_utf8_is_one_error_line(tmp_path, monkeypatch, args, name):
    """Bytes that are not UTF-8 on the command line (lone surrogates in Python)
    are refused before any command runs; paths may be any bytes."""
    monkeypatch.setenv("TXDB_DB", str(tmp_path / "catalog.db"))
    r = CliRunner().invoke(cli, args)
    assert r.exit_code == 1 and r.output == f"Error: {name} is not valid UTF-8 text\n"
    assert not (tmp_path / "catalog.db").exists()


def test_help_lists_every_command_without_importing_their_modules():
    """`txdb --help` and `txdb --version` import no command module, no catalog,
    ingest or surgery code, not even orjson or csv (what prints JSON and CSV); --help lists every command with the same text as
    when all modules are loaded."""
    code = (
        "import sys\n"
        "import importlib\n"
        "from txdb.cli import cli\n"
        "from txdb.cli.commands import COMMANDS\n"
        "for m in sorted({e.module for e in COMMANDS.values()}) if sys.argv[2:] else ():\n"
        "    importlib.import_module(m)\n"
        "try:\n"
        "    cli([sys.argv[1]], prog_name='txdb')\n"
        "except SystemExit:\n"
        "    pass\n"
        "print('MODULES', sorted(m for m in sys.modules if m.startswith('txdb') or m in ('orjson', 'csv')))\n"
    )
    for flag in ("--help", "--version"):
        r = subprocess.run([sys.executable, "-c", code, flag], capture_output=True, text=True, check=True,
                           env=dict(os.environ, COLUMNS="80"))
        text, mods = r.stdout.split("MODULES ")
        loaded = eval(mods)
        assert not [m for m in loaded if m.startswith(("txdb.surgery", "txdb.catalog.ingest", "txdb.catalog", "txdb.db"))
                    or m in ("txdb.cli.strip", "txdb.cli.surgery", "txdb.cli.persist", "txdb.cli.serve",
                             "orjson", "csv")], loaded
        if flag == "--help":
            r = subprocess.run([sys.executable, "-c", code, flag, "all"], capture_output=True, text=True,
                               check=True, env=dict(os.environ, COLUMNS="80"))
            assert text == r.stdout.split("MODULES ")[0]
            from txdb.cli.commands import COMMANDS
            for name in COMMANDS:
                assert f"  {name} " in text
        else:
            assert text.strip() == "txdb, version 0.1.0"


def test_each_commands_short_help_is_written_once():
    """Issue 26: a command of another module has one short help, its entry in
    cli/commands.py; its --help opens with it and its docstring is the rest
    (so the two cannot drift: the docstring repeats no summary of its own)."""
    import importlib
    import inspect

    from txdb.cli.commands import COMMANDS
    for m in {e.module for e in COMMANDS.values()}:
        importlib.import_module(m)
    for name, entry in COMMANDS.items():
        c = cli.commands[name]
        assert c.help.split("\n\n")[0] == entry.help, name
        doc = inspect.cleandoc(inspect.unwrap(c.callback).__doc__ or "")
        first = " ".join(doc.split("\n\n")[0].split())
        assert first != entry.help and not first.startswith(entry.help.rstrip(".")), name
        r = CliRunner().invoke(cli, [name, "--help"], terminal_width=200)
        assert r.exit_code == 0 and entry.help in r.output and r.output.count(entry.help) == 1, name


def test_a_second_serve_on_the_same_port_is_one_error_line(conn, db_path):
    """Two `txdb serve` on one port: the second says so in one line and exits
    non-zero (never uvicorn's bind error); the first keeps serving."""
    import urllib.request

    first = subprocess.Popen([sys.executable, "-m", "txdb.cli", "serve", "--port", "0", "--db", str(db_path)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = first.stderr.readline()
        url = line.split(" at ", 1)[1].split()[0]
        port = int(url.rstrip("/").rsplit(":", 1)[1])
        second = subprocess.run([sys.executable, "-m", "txdb.cli", "serve", "--port", str(port), "--db", str(db_path)],
                                capture_output=True, text=True, timeout=60)
        assert second.returncode == 1, second.stderr
        assert second.stderr == f"Error: port {port} is in use (another txdb serve?)\n"
        with urllib.request.urlopen(url + "-/versions.json", timeout=30) as r:
            assert r.status == 200
    finally:
        first.terminate()
        first.wait(30)


def test_serve_open_without_a_browser_says_the_url(conn, db_path):
    """`serve --open` where no browser starts names the URL instead of
    staying silent."""
    env = {**os.environ, "BROWSER": str(db_path.parent / "no-such-browser") + " %s"}
    proc = subprocess.Popen([sys.executable, "-m", "txdb.cli", "serve", "--open", "--port", "0", "--db", str(db_path)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    import threading

    killer = threading.Timer(30, proc.kill)  # a silent serve ends the test, never hangs it
    killer.start()
    try:
        url = proc.stderr.readline().split(" at ", 1)[1].split()[0]
        assert proc.stderr.readline() == f"No web browser found: open {url} yourself\n"
    finally:
        killer.cancel()
        proc.terminate()
        proc.wait(30)


@pytest.mark.parametrize("command", [["refresh"], ["doctor"], ["serve"], ["restore", "3f2a9c1e"]])
@pytest.mark.parametrize("empty", ["", " "])
def test_an_empty_root_is_a_usage_error_not_the_current_folder(tmp_path, monkeypatch, command, empty):
    monkeypatch.setenv("TXDB_DB", str(tmp_path / "c.db"))
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    r = txdb(*command, "--root", empty)
    assert r.exit_code == 2, r.output
    assert "--root" in r.output and "empty path" in r.output and "Traceback" not in r.output, r.output
    assert not (tmp_path / "c.db").exists()
