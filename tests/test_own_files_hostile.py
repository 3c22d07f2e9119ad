"""txdb's own files in the projects tree as hostile input: the swap journal,
the snapshot record, the pending copy, the backups and the sidecars may be
damaged, forged, or replaced by a FIFO, a symlink, a folder or a huge file
by anyone who can write the tree. Each command that reads one names it in
one `Error:` line or a warning, never waits, never ends in a traceback,
never reads a file outside the session's folder in its place, and leaves
the session's bytes as they were.

Built on a copy of a real session (tests/data/real: a subagent, tool
results), operated on by the real commands first (an applied persist-tools
pass, so a real journal, backup and sidecar), then broken one name at a time."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from sessions import CORPUS
from test_watch import interrupt, start, wait_ready
from txdb.cli import cli

pytestmark = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")

DATA = Path(__file__).parent / "data" / "real" / "-src-experiments-claude_p"
SID = "29ccd257-68b1-427f-ae5f-6524b7cb6f20"
PROJECT = "-src-experiments-claude_p"
HUGE = (256 << 20) + 1  # over every cap txdb reads its own files with (sparse: no disk)
TIMEOUT = 240


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def _session(root: Path) -> Path:
    return root / "projects" / PROJECT / f"{SID}.jsonl"


def _make(root: Path, pending: bool) -> Path:
    """A copy of the real session, indexed, persist-tools applied once (its
    journal, backup and sidecar), and with ``pending`` a rescue pass's
    pending copy on top. Returns the session file."""
    shutil.copytree(DATA, root / "projects" / PROJECT)
    db = root / "c.db"
    f = _session(root)
    assert run("refresh", "--root", root / "projects", "--db", db).exit_code == 0
    r = run("persist-tools", f, "--min-chars", "100", "--apply", "--db", db)
    assert r.exit_code == 0, r.output
    if pending:
        r = run("rescue", f, "--target", "21500", "--db", db)
        assert r.exit_code == 0 and Path(f"{f}.pending").is_file(), r.output
    return f


@pytest.fixture(scope="module")
def templates(tmp_path_factory):
    """Each state built once at one live path (the catalog, the journal and
    the markers hold absolute paths), kept as a copy each test run puts back there."""
    base = tmp_path_factory.mktemp("own-files")
    live = base / "live"
    f = _make(live, pending=False)
    shutil.copytree(live, base / "applied", symlinks=True)
    r = run("rescue", f, "--target", "21500", "--db", live / "c.db")
    assert r.exit_code == 0 and Path(f"{f}.pending").is_file(), r.output
    shutil.copytree(live, base / "pending", symlinks=True)
    return base


# Each name txdb gives a file of its own in a session's folder, the template
# state it is broken in, and the kinds planted there ("huge" only where txdb
# caps what it reads: the pending copy by its record, a backup is a session's size).
NAMES = {
    "swaps.json": ("pending", "{s}.swaps.json", ("fifo", "symlink", "folder", "garbage", "huge")),
    "pending.json": ("pending", "{s}.pending.json", ("fifo", "symlink", "folder", "garbage", "huge")),
    "pending": ("pending", "{s}.pending", ("fifo", "symlink", "folder", "garbage", "huge", "truncated")),
    "bak": ("applied", "{s}.bak", ("fifo", "symlink", "folder", "garbage", "huge")),
    "sidecar": ("pending", "{d}/tool-results/toolu_01SXaWzD5YZ73zGwchbcxeWi.txt",
                ("fifo", "symlink", "folder", "garbage")),
}
COMMANDS = {
    "refresh": ["refresh", "--root", "{root}/projects"],
    "apply": ["apply", "{s}"],
    "apply --all-pending": ["apply", "--all-pending"],
    "undo": ["undo", "{s}"],
    "persist-tools": ["persist-tools", "{s}", "--min-chars", "50"],
    "rescue": ["rescue", "{s}", "--target", "21000"],
    "verify": ["verify", "{s}"],
    "verify the copy": ["verify", "{s}.pending"],
    "analyze": ["analyze", "{s}"],
}
SWAPS = {"apply", "apply --all-pending", "undo"}
# The commands that read the planted file and must refuse (exit 1, one `Error:` line).
REFUSE = {
    "swaps.json": {"apply", "apply --all-pending", "undo"},
    "pending.json": {"apply", "apply --all-pending", "undo", "persist-tools", "rescue"},
    "pending": {"apply", "undo", "persist-tools", "rescue", "verify the copy"},
    "bak": {"undo"},
    "sidecar": {"undo"},  # refused for the pending copy beside it
}

# Runs every command on a fresh copy of the template with the file planted,
# in one process (a hang is caught by the caller's timeout; each command is
# announced first, so the one that hung is named).
DRIVER = textwrap.dedent('''
    import json, os, shutil, sys, traceback
    from pathlib import Path
    from click.testing import CliRunner
    from txdb.cli import cli
    template, root, rel, kind, commands, outside, huge = json.loads(sys.argv[1])
    root = Path(root)
    for label, args in commands:
        shutil.rmtree(root)
        shutil.copytree(template, root, symlinks=True)
        s = str(root / "projects" / %(project)r / %(sid)r) + ".jsonl"
        d = str(root / "projects" / %(project)r / %(sid)r)
        target = Path(rel.format(s=s, d=d))
        was = target.read_bytes() if target.is_file() and not target.is_symlink() else b""
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)
        elif os.path.lexists(target):
            target.unlink()
        if kind == "fifo":
            os.mkfifo(target)
        elif kind == "symlink":
            os.symlink(outside, target)
        elif kind == "folder":
            target.mkdir()
            (target / "x").write_bytes(b"{}")
        elif kind == "garbage":
            target.write_bytes(b'{"swaps": [1, {"id": 7}], "size": "x"\\x00\\xff garbage')
        elif kind == "huge":
            with open(target, "wb") as fh:
                fh.truncate(huge)
        elif kind == "truncated":  # whole lines, the last one gone
            target.write_bytes(was[: was.rstrip(b"\\n").rfind(b"\\n") + 1])
        before = Path(s).read_bytes()
        argv = [a.format(s=s, root=root) for a in args] + ["--db", str(root / "c.db")]
        print(json.dumps({"start": label}), flush=True)
        r = CliRunner().invoke(cli, argv)
        exc = None
        if r.exception is not None and not isinstance(r.exception, SystemExit):
            exc = "".join(traceback.format_exception(r.exception))
        print(json.dumps({"done": label, "rc": r.exit_code, "stdout": r.stdout, "stderr": r.stderr,
                          "exception": exc, "unchanged": Path(s).read_bytes() == before}), flush=True)
''' % {"project": PROJECT, "sid": SID})


def _outside(tmp_path: Path, templates: Path, name: str) -> Path:
    """What a planted link points at: a file outside the tree holding what
    txdb would accept at that name (a valid journal, record, session copy)."""
    tpl = _session(templates / NAMES[name][0])
    src = Path(NAMES[name][1].format(s=tpl, d=tpl.with_suffix("")))
    out = tmp_path / "outside" / src.name
    out.parent.mkdir(exist_ok=True)
    out.write_bytes(src.read_bytes() if src.is_file() else tpl.read_bytes())
    return out


CASES = [(name, kind) for name, (_, _, kinds) in NAMES.items() for kind in kinds]


@pytest.mark.parametrize("name,kind", CASES, ids=[f"{n}-{k}" for n, k in CASES])
def test_each_command_over_a_broken_own_file_names_it_and_never_hangs(tmp_path, templates, name, kind):
    state, rel, _ = NAMES[name]
    outside = _outside(tmp_path, templates, name)
    outside_bytes = outside.read_bytes()
    live = templates / "live"
    arg = json.dumps([str(templates / state), str(live), rel, kind, list(COMMANDS.items()), str(outside), HUGE])
    try:
        p = subprocess.run([sys.executable, "-c", DRIVER, arg], capture_output=True, text=True, timeout=TIMEOUT)
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        started = [json.loads(ln)["start"] for ln in out.splitlines() if ln.startswith('{"start"')]
        pytest.fail(f"hung at {started[-1] if started else '?'} with a {kind} at {name}")
    finally:
        for fifo in live.rglob("*"):
            if fifo.is_fifo():
                try:
                    os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))  # frees a reader stuck in open()
                except OSError:
                    pass
    assert p.returncode == 0, p.stderr
    results = {d["done"]: d for d in map(json.loads, p.stdout.splitlines()) if "done" in d}
    assert set(results) == set(COMMANDS)
    for label, r in results.items():
        where = f"{label} with a {kind} at {name}"
        assert r["exception"] is None, f"{where}: {r['exception']}"
        assert "Traceback" not in r["stderr"], where
        assert r["rc"] in (0, 1), f"{where}: {r}"
        if r["rc"] == 1:
            errors = [ln for ln in r["stderr"].splitlines() if ln.startswith("Error: ")]
            assert len(errors) == 1 or label in ("apply --all-pending", "verify", "verify the copy"), \
                f"{where}: {r['stderr']}"
        if label in REFUSE[name]:
            assert r["rc"] == 1, f"{where} was not refused: {r}"
        for ln in r["stderr"].splitlines():
            assert ln.startswith(("Error: ", "Warning: ", "Note: ", "Refused: ", "  ")), f"{where}: {ln!r}"
        # Only a swap that is no refusal changes the session (a FIFO at a sidecar the
        # pending copy no longer names does not stop its apply).
        assert r["unchanged"] or (r["rc"] == 0 and label in SWAPS), f"{where} changed the session"
    assert outside.read_bytes() == outside_bytes  # never written through a link


# -- 1. a damaged or forged swap journal ------------------------------------------

def _journal(f: Path) -> dict:
    return orjson.loads(Path(f"{f}.swaps.json").read_bytes())


def _forge(f: Path, change) -> None:
    """The journal with a copy of its entry, under a new id, changed by ``change``."""
    doc = _journal(f)
    e = dict(doc["swaps"][-1], id="f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0")
    change(e)
    doc["swaps"].append(e)
    Path(f"{f}.swaps.json").write_text(json.dumps(doc))


def _no_at(e):
    del e["at"]


def _string_rows(e):
    e["rows"] = "x"


def _string_arguments(e):
    e["rows"] = [dict(e["rows"][0], arguments="persist everything")]


def _huge_count(e):
    e["rows"] = [dict(e["rows"][0], tokens_after=1 << 63)]


def _other_session(e):
    e["session"] = "/etc/passwd"


DAMAGE = {"no at": _no_at, "string rows": _string_rows, "string arguments": _string_arguments,
          "count over 2^63": _huge_count, "another session": _other_session}


@pytest.mark.parametrize("damage", DAMAGE)
def test_a_damaged_journal_entry_is_one_warning_and_never_stops_refresh_or_commands(tmp_path, damage):
    f = _make(tmp_path, pending=True)
    db = tmp_path / "c.db"
    # A second session in the tree, grown since the last refresh.
    other = tmp_path / "projects" / "-other" / "b.jsonl"
    other.parent.mkdir()
    shutil.copy(f.with_suffix(".jsonl.bak"), other)
    _forge(f, DAMAGE[damage])
    before = f.read_bytes()
    r = run("refresh", "--root", tmp_path / "projects", "--db", db)
    assert r.exit_code == 0, r.output
    warnings = [ln for ln in r.stderr.splitlines() if ln.startswith("Warning: ")]
    assert len(warnings) == 1 and "entry 2 of the swap journal" in warnings[0]
    assert "f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0" in warnings[0] and "disregarded" in warnings[0]
    assert "1 new" in r.stdout  # the other session was read
    q = run("query", "select count(*) n from surgeries", "--db", db, "--json")
    assert json.loads(q.stdout) == [{"n": 1}]  # nothing forged was logged
    # The session's own apply goes on over the bad entry, names it, and drops it.
    r = run("apply", f, "--db", db)
    assert r.exit_code == 0, r.output
    assert r.stderr.count("Warning: entry 2 of the swap journal") == 1
    assert f.read_bytes() != before
    assert [e["command"] for e in _journal(f)["swaps"]] == ["apply", "apply"]  # the logged one, this one
    assert "f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0" not in Path(f"{f}.swaps.json").read_text()
    r = run("undo", f, "--db", db)
    assert r.exit_code == 0 and r.stderr == "", r.output


@pytest.mark.parametrize("content", [b"not json", b"[]", b'{"swaps": 3}', b"{" * 5000])
def test_a_journal_that_is_no_journal_refuses_its_session_only(tmp_path, content):
    f = _make(tmp_path, pending=True)
    db = tmp_path / "c.db"
    Path(f"{f}.swaps.json").write_bytes(content)
    before = f.read_bytes()
    r = run("refresh", "--root", tmp_path / "projects", "--db", db)
    assert r.exit_code == 0 and r.stderr.startswith("Warning: the swap journal "), r.output
    for args in (["apply", f], ["undo", f]):
        r = run(*args, "--db", db)
        assert r.exit_code == 1 and r.stdout == ""
        assert r.stderr.startswith("Error: the swap journal ") and r.stderr.count("\n") == 1, r.stderr
    r = run("apply", "--all-pending", "--db", db)
    assert r.exit_code == 1 and "Refused: " in r.stderr and "swap journal" in r.stderr
    assert f.read_bytes() == before
    assert Path(f"{f}.swaps.json").read_bytes() == content  # kept: it is not txdb's to overwrite


def test_refresh_watch_over_a_damaged_journal_warns_and_keeps_watching(tmp_path):
    f = _make(tmp_path, pending=False)
    _forge(f, _no_at)
    db = tmp_path / "c.db"
    proc = start(["refresh", "--watch", "--root", str(tmp_path / "projects"), "--db", str(db)], tmp_path)
    try:
        seen = wait_ready(proc)
        assert "Warning: entry 2 of the swap journal" in seen
        assert proc.poll() is None  # still watching
    finally:
        rc, err = interrupt(proc)
    assert rc in (0, 130) and "Traceback" not in err, err


# -- 2. a journal naming a backup from elsewhere ---------------------------------

def test_undo_never_restores_a_backup_the_journal_names_outside_the_session(tmp_path):
    f = _make(tmp_path, pending=False)
    db = tmp_path / "c.db"
    # An outside session, named as the backup of a made-up compact-range the journal says ran last.
    planted = tmp_path / "elsewhere" / "evil.jsonl"
    planted.parent.mkdir()
    kept = f.with_suffix(".jsonl.bak").read_bytes()
    planted.write_bytes(kept[kept.index(b"\n") + 1:])  # another file: the backup less its first line
    data = planted.read_bytes()

    def forged(e):
        e.update(backup=str(planted), backup_size=len(data), backup_sha256=hashlib.sha256(data).hexdigest(),
                 backup_lines=data.count(b"\n"), at="2099-01-01T00:00:00.000Z",
                 rows=[{"command": "compact-range", "arguments": {"from": 0, "to": 9}, "records_changed": 9,
                        "tokens_before": 1, "tokens_after": 1}])
    _forge(f, forged)
    before = f.read_bytes()
    r = run("undo", f, "--db", db)
    assert r.stderr.count("Warning: entry 2 of the swap journal") == 1
    assert "its backup is not one of the session's own" in r.stderr
    assert f.read_bytes() != data
    q = run("query", "select command from surgeries order by id", "--db", db, "--json")
    assert "compact-range" not in q.stdout
    if r.exit_code == 0:  # the real last swap undone instead, from its own backup
        assert f.read_bytes() == f.with_suffix(".jsonl.bak").read_bytes()
    else:
        assert f.read_bytes() == before


def test_undo_refuses_a_logged_backup_outside_the_session_folder(tmp_path):
    """The same rule holds for a backup a catalog row names (the journal gone)."""
    f = _make(tmp_path, pending=False)
    db = tmp_path / "c.db"
    Path(f"{f}.swaps.json").unlink()
    planted = tmp_path / "evil.jsonl.bak"
    shutil.copy(f.with_suffix(".jsonl.bak"), planted)
    conn = sqlite3.connect(db)
    conn.execute("UPDATE surgeries SET backup_path = ?", (str(planted),))
    conn.commit()
    conn.close()
    before = f.read_bytes()
    r = run("undo", f, "--force", "--db", db)
    assert r.exit_code == 1 and r.stderr.startswith("Error: the backup surgery #1 (persist-tools, ")
    assert f"names ({planted}) is not one of {f.name}'s own" in r.stderr
    assert f.read_bytes() == before


def test_a_journal_entry_without_its_backups_sha256_is_named_as_not_txdbs(tmp_path):
    """txdb writes a backup's sha256 with every backup: an entry without it
    is forged, named as not txdb's in one warning (its file and what is
    wrong), never blamed on an older txdb."""
    f = _make(tmp_path, pending=False)
    db = tmp_path / "c.db"
    _forge(f, lambda e: e.update(backup_sha256=None, at="2099-01-01T00:00:00.000Z"))
    r = run("undo", f, "--db", db, "--dry-run")
    assert "older txdb" not in r.output
    assert r.stderr.count(f"Warning: entry 2 of the swap journal {f}.swaps.json") == 1
    assert "is not one txdb wrote (no size and sha256 of its backup)" in r.stderr


def test_undo_without_the_journal_says_what_is_not_recorded_without_guessing(tmp_path):
    f = _make(tmp_path, pending=False)
    db = tmp_path / "c.db"
    Path(f"{f}.swaps.json").unlink()
    r = run("undo", f, "--db", db)
    assert r.exit_code == 1 and "older txdb" not in r.output
    assert r.stderr.startswith("Error: neither the swap journal") and f"{f.name}.swaps.json" in r.stderr
    assert "the sha256 of the backup" in r.stderr


def test_apply_all_pending_names_each_pending_name_that_is_no_regular_file(tmp_path):
    """A FIFO and a folder at `.pending` names: never opened, never passed
    over in silence: one warning names each, and with nothing else pending
    the command still exits 0."""
    f = _make(tmp_path, pending=False)
    db = tmp_path / "c.db"
    sub = f.with_suffix("") / "subagents" / "agent-a2271d1.jsonl"
    os.mkfifo(f"{f}.pending")
    os.mkdir(f"{sub}.pending")
    r = run("apply", "--all-pending", "--db", db)
    assert r.exit_code == 0, r.output
    warnings = [line for line in r.stderr.splitlines() if line.startswith("Warning:")]
    assert len(warnings) == 1, r.stderr
    assert f"{f}.pending (a FIFO)" in warnings[0] and f"{sub}.pending (a folder)" in warnings[0]
    assert "No pending copies." in r.stdout


def test_a_pending_record_naming_another_session_is_refused(tmp_path):
    f = _make(tmp_path, pending=True)
    db = tmp_path / "c.db"
    meta = Path(f"{f}.pending.json")
    doc = orjson.loads(meta.read_bytes())
    doc["original"] = str(tmp_path / "elsewhere.jsonl")
    meta.write_bytes(orjson.dumps(doc))
    before = f.read_bytes()
    r = run("apply", f, "--db", db)
    assert r.exit_code == 1 and "it names another session file as its original" in r.stderr, r.output
    assert f.read_bytes() == before


# -- 8. a rescue --apply killed part way ----------------------------------------

KILLED = textwrap.dedent('''
    import os, signal, sys
    from txdb.surgery import pending
    step = sys.argv.pop(1)
    pending._step_hook = lambda s: os.kill(os.getpid(), signal.SIGKILL) if s == step else None
    from txdb.cli import main
    sys.argv[0] = "txdb"
    main()
''')


@pytest.mark.parametrize("step", ["before apply", "checked", "backup", "renaming", "swapped"])
def test_rescue_apply_again_after_a_kill_finishes_the_job(tmp_path, step):
    shutil.copytree(DATA, tmp_path / "projects" / PROJECT)
    f = _session(tmp_path)
    db = tmp_path / "c.db"
    assert run("refresh", "--root", tmp_path / "projects", "--db", db).exit_code == 0
    cmd = ["rescue", str(f), "--target", "22000", "--db", str(db)]
    if step == "before apply":
        assert run(*cmd).exit_code == 0  # the pass wrote its copy; the apply never ran
    else:
        p = subprocess.run([sys.executable, "-c", KILLED, step, *cmd, "--apply"], capture_output=True, timeout=120)
        assert p.returncode == -9
    assert Path(f"{f}.pending").exists()
    r = run(*cmd, "--apply")
    assert r.exit_code == 0, r.output
    assert not Path(f"{f}.pending").exists() and not Path(f"{f}.pending.json").exists()
    assert f.stat().st_size < 10_000  # rescued (35,169 bytes before)
    assert run("refresh", "--root", tmp_path / "projects", "--db", db).exit_code == 0
    q = run("query", "select command from surgeries", "--db", db, "--json")
    assert json.loads(q.stdout) == [{"command": "rescue"}]  # logged once
    if step == "swapped":
        assert "had been applied already" in r.stdout
    else:
        assert "Applied: " in r.stdout


# -- the shared corpus, as an attacker would use it ---------------------------------

def test_a_planted_journal_in_a_corpus_tree_never_fails_its_refresh(tmp_path):
    sessions = sorted((CORPUS / "generated").glob("*/*.jsonl"))[:5] if CORPUS.is_dir() else []
    if not sessions:
        pytest.skip("no ../shared/corpus")
    for i, s in enumerate(sessions):
        dst = tmp_path / "projects" / f"-p{i}" / s.name
        dst.parent.mkdir(parents=True)
        shutil.copy(s, dst)
        journal = Path(f"{dst}.swaps.json")
        if i % 2:  # an entry the session matches (so catch-up would log it), without its time
            data = dst.read_bytes()
            journal.write_bytes(orjson.dumps({"swaps": [{
                "id": "x", "command": "apply", "session": str(dst), "backup": None, "result_size": len(data),
                "result_sha256": hashlib.sha256(data).hexdigest(), "rows": [{"command": "compact-range"}]}]}))
        else:
            os.mkfifo(journal)
    db = tmp_path / "c.db"
    p = subprocess.run([sys.executable, "-m", "txdb.cli", "refresh", "--root", str(tmp_path / "projects"),
                        "--db", str(db)], capture_output=True, text=True, timeout=TIMEOUT)
    assert p.returncode == 0, p.stderr
    assert f"{len(sessions)} new" in p.stdout
    assert p.stderr.count("Warning: ") == len(sessions) and "Traceback" not in p.stderr


# -- the catalog's own files ----------------------------------------------------

@pytest.mark.parametrize("suffix", ["-journal", "-wal", "-shm"])
@pytest.mark.parametrize("planted", ["fifo", "folder", "dangling link"])
def test_a_fifo_or_link_at_the_catalogs_sqlite_files_is_one_error_never_a_wait(tmp_path, suffix, planted):
    """SQLite opens its journal, WAL and WAL index by name: a FIFO there hung
    every command for ever (refresh, apply, watch); a link sends its writes
    outside. Each command that opens the catalog names it in one `Error:`."""
    root = tmp_path / "projects" / PROJECT
    shutil.copytree(DATA, root)
    db = tmp_path / "c.db"
    assert run("refresh", "--root", tmp_path / "projects", "--db", db).exit_code == 0
    side = Path(f"{db}{suffix}")
    if side.exists():
        side.unlink()
    if planted == "fifo":
        os.mkfifo(side)
    elif planted == "folder":
        side.mkdir()
    else:
        side.symlink_to(tmp_path / "outside" / "nowhere")
    for args in (["refresh", "--root", tmp_path / "projects"], ["verify", _session(tmp_path)],
                 ["query", "SELECT count(*) FROM files"], ["export", tmp_path / "out"]):
        p = subprocess.run([sys.executable, "-m", "txdb.cli", *map(str, args), "--db", str(db)],
                           capture_output=True, text=True, timeout=60)
        lines = p.stderr.strip().splitlines()
        assert p.returncode == 1 and len(lines) == 1 and lines[0].startswith("Error: the catalog's file "), (args, p.stderr)
        assert f"{db}{suffix}" in lines[0] and "not a regular file" in lines[0]
    assert not (tmp_path / "outside").exists()
