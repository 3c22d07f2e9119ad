"""Nothing lost, judged at the moment of the write: the chain gate of
run_surgery and apply, a cut-short pending copy, a line appended during the
swap, a symlinked session, another user's session, a dead run's temp file,
a subagent fork."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from sessions import edit_pending_copy
from txdb.cli import cli
from txdb.errors import SurgeryError
from txdb.surgery import ops
from txdb.surgery import pending as pend
from txdb.surgery.engine import PassOptions, run_surgery
from txdb.model.transcript import Transcript

DATA = Path(__file__).parent / "data"
CLI_FIXTURES = sorted(p for p in (DATA / "cli").glob("*/*.jsonl"))
TOOLS = next((DATA / "cli" / "-tmp-txdb-cli-fixtures-tools-demo").glob("*.jsonl"))
SUBAGENT_DIR = DATA / "cli" / "-tmp-txdb-cli-fixtures-subagent-demo"
CORPUS = Path(__file__).resolve().parents[1].parent / "shared" / "corpus" / "real"
D8 = next(iter(CORPUS.glob("hannibal8856-claude_backup/*/d8fbf478-*.jsonl")), None) if CORPUS.is_dir() else None
needs_d8 = pytest.mark.skipif(D8 is None, reason="the shared corpus (d8fbf478) is not here")


def _copy(folder: Path, src: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    f = folder / src.name
    shutil.copyfile(src, f)
    return f


def _state(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def _chain_uuids(data: bytes) -> list[str]:
    return [r.uuid for r in Transcript.from_bytes(data).chain]


def _break_parent(p: Path, line_no: int) -> None:
    lines = p.read_bytes().split(b"\n")
    o = orjson.loads(lines[line_no - 1])
    o["parentUuid"] = "00000000-dead-beef-0000-000000000000"
    # Older than every record: resume cannot bridge the gap (it links an orphan
    # only to a record written at most 5 s before it).
    o["timestamp"] = "2000-01-01T00:00:00.000Z"
    lines[line_no - 1] = orjson.dumps(o)
    p.write_bytes(b"\n".join(lines))


def _strip_attachments(f: Path):
    return run_surgery(f, "strip-attachments",
                       lambda t, o: ops.strip_attachments(t, include_free=True, keep_recent=0))


def _breaker(line_index: int = 1):
    """An op gone wrong: it points one chain record's parent nowhere."""
    def op(t, _original):
        rec = t.chain[line_index]
        rec.obj["parentUuid"] = "00000000-dead-beef-0000-000000000000"
        rec.obj["timestamp"] = "2000-01-01T00:00:00.000Z"  # too old for resume to bridge
        t.touch(rec)
        return {}
    return op


# -- item 1: the gate -------------------------------------------------------

@needs_d8
def test_real_session_with_a_hand_broken_parent_is_refused(tmp_path):
    f = _copy(tmp_path / "p", D8)
    pend.snapshot(f)
    _break_parent(pend.pending_path(f), 989)
    state = _state(f.parent)
    for dry in (True, False):
        with pytest.raises(SurgeryError) as e:
            pend.apply(f, dry_run=dry, settle=0.0)
        assert "would lose 1,198 of the 1,294 records" in str(e.value)
        assert "from chain position 96 (line 155)" in str(e.value)
        assert _state(f.parent) == state


@needs_d8
def test_real_session_naive_deletion_is_refused(tmp_path):
    # The spec's "naive deletion": one mid-file attachment line deleted, its children orphaned.
    f = _copy(tmp_path / "p", D8)
    pend.snapshot(f)
    p = pend.pending_path(f)
    lines = p.read_bytes().split(b"\n")
    assert orjson.loads(lines[1044])["type"] == "attachment"
    del lines[1044]
    edit_pending_copy(f, b"\n".join(lines))
    with pytest.raises(SurgeryError, match=r"would lose [\d,]+ of the 1,294 records"):
        pend.apply(f, settle=0.0)
    assert f.read_bytes() == D8.read_bytes()


@needs_d8
def test_real_strip_attachments_records_its_removals_and_applies_whole(tmp_path):
    f = _copy(tmp_path / "p", D8)
    before = f.read_bytes()
    rep = _strip_attachments(f)
    removed = set(pend.read_meta(f)["passes"][0]["removed"])
    assert rep.result["removed"] == len(removed) > 300
    a = pend.apply(f, settle=0.0)
    assert a.applied
    kept = [u for u in _chain_uuids(before) if u not in removed]
    after = _chain_uuids(f.read_bytes())
    assert [u for u in after if u in set(kept)] == kept  # every other record, in order
    assert len(after) > 900


@needs_d8
def test_cli_apply_and_all_pending_refuse_a_broken_copy(tmp_path, monkeypatch):
    monkeypatch.setenv("TXDB_DB", str(tmp_path / "catalog.db"))
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "claude"))
    f = _copy(tmp_path / "claude" / "projects" / D8.parent.name, D8)
    runner = CliRunner()
    assert runner.invoke(cli, ["refresh"]).exit_code == 0
    assert runner.invoke(cli, ["snapshot", f.stem]).exit_code == 0
    _break_parent(pend.pending_path(f), 989)
    state = _state(f.parent)
    for args in (["apply", f.stem], ["apply", f.stem, "--dry-run"], ["apply", "--all-pending"]):
        r = runner.invoke(cli, args)
        assert r.exit_code == 1, (args, r.output)
        assert "would lose 1,198 of the 1,294 records" in r.output
        assert "Traceback" not in r.output
        assert _state(f.parent) == state


@pytest.mark.parametrize("src", CLI_FIXTURES, ids=lambda p: p.parent.name)
def test_cli_fixtures_strip_and_apply_keep_the_chain(tmp_path, src):
    f = _copy(tmp_path / "p", src)
    before = f.read_bytes()
    run_surgery(f, "strip-all", lambda t, o: ops.strip_all(t))
    _strip_attachments(f)
    removed = set()
    for p in (pend.read_meta(f) or {}).get("passes") or []:
        removed |= set(p["removed"])
    if pend.pending_path(f).exists():
        assert pend.apply(f, settle=0.0).applied
    kept = [u for u in _chain_uuids(before) if u not in removed]
    assert [u for u in _chain_uuids(f.read_bytes()) if u in set(kept)] == kept


@pytest.mark.parametrize("src", CLI_FIXTURES, ids=lambda p: p.parent.name)
def test_cli_fixtures_broken_copy_refused(tmp_path, src):
    f = _copy(tmp_path / "p", src)
    pend.snapshot(f)
    t = Transcript.load(pend.pending_path(f))
    _break_parent(pend.pending_path(f), t.lines[t.chain[len(t.chain) // 2].line].number)
    with pytest.raises(SurgeryError, match="would lose"):
        pend.apply(f, settle=0.0)
    assert f.read_bytes() == src.read_bytes()


def test_run_surgery_refuses_a_result_that_loses_the_chain(tmp_path):
    f = _copy(tmp_path / "p", TOOLS)
    state = _state(f.parent)
    for options in (PassOptions(), PassOptions(dry_run=True), PassOptions(fork=True)):
        with pytest.raises(SurgeryError, match=r"would lose 1 of the \d+ records .* chain position 0 \(line \d+\)"):
            run_surgery(f, "strip-all", _breaker(1), options)
        assert _state(f.parent) == state  # no pending copy, no sidecar, no fork
    # on a later pass the existing pending copy stays as it was
    run_surgery(f, "strip-all", lambda t, o: ops.strip_all(t))
    state = _state(f.parent)
    with pytest.raises(SurgeryError, match="would lose"):
        run_surgery(f, "strip-thinking", _breaker(2))
    assert _state(f.parent) == state


def test_an_unclaimed_removal_is_refused(tmp_path):
    # The sidecar says what the passes removed; a record gone without a pass saying so is lost.
    f = _copy(tmp_path / "p", TOOLS)
    run_surgery(f, "strip-all", lambda t, o: ops.strip_all(t))
    p = pend.pending_path(f)
    t = Transcript.load(p)
    t.remove([t.chain[3]])
    edit_pending_copy(f, t.to_bytes())  # children re-parented, chain whole, but no pass recorded the removal
    with pytest.raises(SurgeryError, match="would lose 1 of"):
        pend.apply(f, settle=0.0)


# -- item 2: a cut-short or empty pending copy -------------------------------

@pytest.mark.parametrize("src", [TOOLS] + ([D8] if D8 else []), ids=lambda p: p.stem[:8])
def test_truncated_or_emptied_pending_copy_refused(tmp_path, src):
    f = _copy(tmp_path / "p", src)
    run_surgery(f, "strip-all", lambda t, o: ops.strip_all(t))
    p = pend.pending_path(f)
    full = p.read_bytes()
    half = full[: len(full) // 2]
    assert not half.endswith(b"\n")
    cases = {
        "half": (half, "ends in an unfinished line"),
        "empty": (b"", "would lose"),
        "whole lines": (full[: full.rfind(b"\n", 0, len(full) // 2) + 1], "would lose"),
    }
    for name, (data, msg) in cases.items():
        edit_pending_copy(f, data)
        state = _state(f.parent)
        for dry in (True, False):
            with pytest.raises(SurgeryError, match=msg):
                pend.apply(f, dry_run=dry, settle=0.0)
            assert _state(f.parent) == state, name


# -- item 3: a line appended during the swap --------------------------------

def _appender(f: Path, n: int, gap: float = 0.02) -> threading.Thread:
    def run():
        for i in range(n):
            with open(f, "ab") as fh:
                fh.write(orjson.dumps({"type": "queue-operation", "operation": "enqueue",
                                       "content": f"late {i}"}) + b"\n")
            time.sleep(gap)
    th = threading.Thread(target=run, daemon=True)
    th.start()
    return th


@pytest.mark.parametrize("backup", [True, False])
def test_line_appended_while_the_temp_file_is_written_is_refused(tmp_path, monkeypatch, backup):
    f = _copy(tmp_path / "p", TOOLS)
    run_surgery(f, "strip-all", lambda t, o: ops.strip_all(t))
    old = f.read_bytes()
    others = {n: b for n, b in _state(f.parent).items() if n != f.name}

    def hook(step):
        if step == "temp":  # a live CLI writes while the new file is being written
            _appender(f, 3).join()
    monkeypatch.setattr(pend, "_step_hook", hook)
    with pytest.raises(SurgeryError, match="changed while apply was writing the new file"):
        pend.apply(f, settle=0.0, backup=backup)
    data = f.read_bytes()
    assert data.startswith(old) and data.count(b"late ") == 3  # nothing of it lost
    assert {n: b for n, b in _state(f.parent).items() if n != f.name} == others  # no .bak, no temp file


def test_line_appended_at_the_rename_is_counted_and_kept_in_the_backup(tmp_path, monkeypatch):
    f = _copy(tmp_path / "p", TOOLS)
    run_surgery(f, "strip-all", lambda t, o: ops.strip_all(t))
    new = pend.pending_path(f).read_bytes()
    _appender(f, 2, 0).join()  # after the snapshot, before apply: discarded and counted
    old = f.read_bytes()

    def hook(step):
        if step == "renaming":  # past the last check: the line lands in the old inode
            _appender(f, 1).join()
    monkeypatch.setattr(pend, "_step_hook", hook)
    rep = pend.apply(f, settle=0.0)
    assert rep.applied and f.read_bytes() == new
    assert rep.discarded_lines == 3
    late = Path(rep.backup).read_bytes()
    assert late.startswith(old) and late.count(b"late ") == 3
    assert rep.discarded_bytes == len(late) - len(TOOLS.read_bytes())


# -- item 5: a symlinked session ---------------------------------------------

def _tree(root: Path) -> dict[str, bytes | str]:
    return {str(p.relative_to(root)): (os.readlink(p) if p.is_symlink() else p.read_bytes() if p.is_file() else "")
            for p in sorted(root.rglob("*"))}


def test_a_session_linked_from_another_folder_is_refused_by_every_mutating_command(tmp_path, monkeypatch):
    """txdb writes only inside a session's own folder: a link planted in the
    projects tree to a file elsewhere never makes it write beside the
    target. Every mutating command refuses the link in one line naming the
    target; read-only ones read through it; naming the target works there."""
    monkeypatch.setenv("TXDB_DB", str(tmp_path / "catalog.db"))
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "claude"))
    store = tmp_path / "store"
    target = _copy(store, TOOLS)
    proj = tmp_path / "claude" / "projects" / "-tmp-linked"
    proj.mkdir(parents=True)
    link = proj / TOOLS.name
    link.symlink_to(target)
    runner = CliRunner()
    assert runner.invoke(cli, ["refresh"]).exit_code == 0
    before = _tree(tmp_path / "store"), _tree(proj)
    for args in (["strip-tools", link, "--apply"], ["strip-all", link.stem], ["snapshot", link], ["apply", link],
                 ["undo", link], ["rescue", link, "--apply"], ["persist-tools", link, "--apply"],
                 ["strip-tools", "--where", "1 = 1", "--apply"]):
        r = runner.invoke(cli, [str(a) for a in args])
        assert r.exit_code != 0, (args, r.output)
        why = (f"{link} is a symlink to {target}, in another folder: txdb writes only in a session's own folder, "
               f"never through a link out of it; name {target} to work on it there")
        if args[1] == "--where":  # its target refused in the plan's one line for it
            assert f"Refused: {link}: {why}" in r.output.splitlines(), r.output
        else:
            assert [line for line in r.output.splitlines() if line.startswith("Error:")] == [f"Error: {why}"], \
                (args, r.output)
        assert (_tree(tmp_path / "store"), _tree(proj)) == before, args  # nothing written anywhere
    for args in (["verify", link], ["analyze", link.stem], ["show-tool", link], ["list-images", link]):
        r = runner.invoke(cli, [str(a) for a in args])  # read through the link
        assert r.exit_code == 0 and "Error:" not in r.output, (args, r.output)
    # Named by its own path, the target is worked on in its own folder.
    r = runner.invoke(cli, ["strip-all", str(target), "--apply"])
    assert r.exit_code == 0, r.output
    assert (store / (target.name + ".bak")).is_file() and link.is_symlink() and os.readlink(link) == str(target)
    assert sorted(p.name for p in proj.iterdir()) == [link.name]


def test_a_link_within_its_own_folder_is_operated_on_through_the_link(tmp_path):
    folder = tmp_path / "p"
    target = _copy(folder, TOOLS)
    link = folder / "linked-00000000-0000-4000-8000-000000000000.jsonl"
    link.symlink_to(target.name)
    old = target.read_bytes()
    r = CliRunner().invoke(cli, ["strip-all", str(link), "--apply", "--db", str(tmp_path / "c.db")])
    assert r.exit_code == 0, r.output
    assert link.is_symlink() and target.read_bytes() != old
    assert (folder / (target.name + ".bak")).read_bytes() == old


# -- item 6: another user's session ------------------------------------------

@pytest.mark.skipif(os.geteuid() != 0, reason="only root can hand a file to another user")
def test_session_of_another_user_keeps_owner_and_mode(tmp_path):
    f = _copy(tmp_path / "p", TOOLS)
    os.chown(f, 1234, 1235)
    f.chmod(0o640)
    run_surgery(f, "strip-all", lambda t, o: ops.strip_all(t))
    for p in (pend.pending_path(f), pend.meta_path(f)):
        assert (p.stat().st_uid, p.stat().st_gid) == (1234, 1235)
    rep = pend.apply(f, settle=0.0)
    for p in (f, Path(rep.backup)):
        st = p.stat()
        assert (st.st_uid, st.st_gid, st.st_mode & 0o7777) == (1234, 1235, 0o640), p
    fork = run_surgery(f, "fork", lambda t, o: {}, PassOptions(fork=True))
    assert (Path(fork.target).stat().st_uid, Path(fork.target).stat().st_gid) == (1234, 1235)


# -- a killed run's temp file; a subagent fork -------------------------------

def test_next_run_removes_only_dead_runs_temp_files(tmp_path):
    f = _copy(tmp_path / "p", TOOLS)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    d = f.parent
    stale = d / f".{f.name}.{dead.pid}.k2j4h_x1.txdb-tmp"
    live = d / f".{f.name}.{os.getppid()}.q9w8e7r6.txdb-tmp"  # a running process's
    foreign = [d / f".{f.name}.{dead.pid}.notes", d / "keep.txdb-tmp", d / f".{f.name}.txdb-tmp"]
    for p in [stale, live, *foreign]:
        p.write_bytes(b"x")
    run_surgery(f, "strip-all", lambda t, o: ops.strip_all(t), PassOptions(dry_run=True))
    assert stale.exists()  # a dry run writes (and removes) nothing
    run_surgery(f, "strip-all", lambda t, o: ops.strip_all(t))
    assert not stale.exists()
    assert live.exists() and all(p.exists() for p in foreign)
    stale.write_bytes(b"x")
    pend.apply(f, settle=0.0)
    assert not stale.exists() and live.exists()


def test_fork_of_a_subagent_transcript_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("TXDB_DB", str(tmp_path / "catalog.db"))
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "claude"))
    proj = tmp_path / "claude" / "projects" / SUBAGENT_DIR.name
    shutil.copytree(SUBAGENT_DIR, proj)
    agent = next(proj.glob("*/subagents/agent-*.jsonl"))
    parent_id = agent.parent.parent.name
    state = {p: p.read_bytes() for p in proj.rglob("*") if p.is_file()}
    for args in (["fork", str(agent)], ["strip-all", str(agent), "--fork"]):
        r = CliRunner().invoke(cli, args)
        assert r.exit_code == 1, r.output
        lines = [ln for ln in r.output.splitlines() if ln.strip()]
        assert len(lines) == 1 and lines[0].startswith("Error: ")
        assert "subagent transcript" in lines[0] and f"fork its parent session {parent_id}" in lines[0]
        assert {p: p.read_bytes() for p in proj.rglob("*") if p.is_file()} == state


# -- judged by the real CLI ---------------------------------------------------

@needs_d8
@pytest.mark.realcli
def test_real_cli_refused_apply_resumes_as_before_and_strip_resumes_whole(tmp_path):
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from realcli.oracle import resume

    def sent(r):
        assert r.loaded and not r.compacted, r.summary()
        return [m["role"] for m in r.user_assistant_messages()]

    base = sent(resume(D8, "ping", workdir=tmp_path / "r0"))
    f = _copy(tmp_path / "broken", D8)
    pend.snapshot(f)
    _break_parent(pend.pending_path(f), 989)
    would = _copy(tmp_path / "would", pend.pending_path(f))
    would = would.rename(would.with_name(f.name))
    assert len(sent(resume(would, "ping", workdir=tmp_path / "r1"))) < len(base) // 10  # what apply refused
    with pytest.raises(SurgeryError, match="would lose"):
        pend.apply(f, settle=0.0)
    assert sent(resume(f, "ping", workdir=tmp_path / "r2")) == base
    s = _copy(tmp_path / "strip", D8)
    _strip_attachments(s)
    assert pend.apply(s, settle=0.0).applied
    assert sent(resume(s, "ping", workdir=tmp_path / "r3")) == base  # every message still sent
