"""The swap journal: apply's record of a swap is on disk before the swap, so
a catalog that cannot be written (a full disk) or a process killed right
after the rename never leaves a swapped session undo cannot find; and undo
restores only the backup the apply kept."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from sessions import conversation, write
from txdb.cli import cli
from txdb.surgery import pending as pend

SID = "44444444-0000-0000-0000-000000000001"
OTHER = "44444444-0000-0000-0000-000000000002"


@pytest.fixture
def env(tmp_path, monkeypatch):
    monkeypatch.setenv("TXDB_DB", str(tmp_path / "catalog.db"))
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "claude"))
    proj = tmp_path / "claude" / "projects" / "-home-me-app"
    write(proj / f"{SID}.jsonl", conversation(8, session=SID))
    write(proj / f"{OTHER}.jsonl", conversation(5, session=OTHER))
    return proj


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def _log(*extra) -> list[dict]:
    r = run("query", "select id, command, arguments, backup_path from surgeries order by id", "--json", *extra)
    assert r.exit_code == 0, r.output
    return json.loads(r.output)


def _tree(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


@pytest.fixture
def full_disk(tmp_path):
    """A 4 MB tmpfs for the catalog and a filler that takes every byte left
    (real ENOSPC, no mock); skips where mounting is not permitted."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    p = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mnt)], capture_output=True)
    if p.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {p.stderr.decode().strip()}")
    filler = mnt / "filler"

    def fill():
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            while os.write(fd, b"\0" * 4096):
                pass
        except OSError:
            pass
        finally:
            os.close(fd)

    try:
        yield mnt, fill, lambda: filler.unlink()
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def test_apply_on_a_full_catalog_disk_is_applied_with_a_warning_and_undo_finds_it(env, full_disk, monkeypatch):
    mnt, fill, free = full_disk
    monkeypatch.setenv("TXDB_DB", str(mnt / "catalog.db"))
    f = env / f"{SID}.jsonl"
    original = f.read_bytes()
    assert run("refresh").exit_code == 0
    assert run("strip-all", f).exit_code == 0
    stripped = pend.pending_path(f).read_bytes()
    fill()
    r = run("apply", f)
    assert r.exit_code == 0, r.output + r.stderr
    assert f.read_bytes() == stripped                              # the swap is done
    assert f"Backup: {f}.bak" in r.stdout                          # and its backup shown
    assert r.stderr.startswith("Warning: applied; the catalog could not be updated: ")
    assert "disk is full" in r.stderr and "Error" not in r.stderr
    assert not pend.pending_path(f).exists()
    r = run("undo", f)                                             # the catalog still full: the journal has it
    assert r.exit_code == 0, r.output + r.stderr
    assert f.read_bytes() == original and "Undone: strip-all" in r.stdout
    assert r.stderr.startswith("Warning: undone; the catalog could not be updated: ")
    free()
    r = run("undo", f)                                             # room again: the log catches up, then the redo
    assert r.exit_code == 0, r.output + r.stderr
    assert f.read_bytes() == stripped
    log = _log()
    assert [x["command"] for x in log] == ["strip-all", "undo", "undo"]
    assert log[0]["backup_path"] == f"{f}.bak"
    assert json.loads(log[2]["arguments"])["undid"] == [log[1]["id"]]


def test_a_swap_whose_log_row_was_never_written_is_undone_from_the_journal(env):
    """The state a kill -9 right after apply's rename leaves: session swapped,
    pending copy gone, no row in the catalog, the journal beside it."""
    f = env / f"{SID}.jsonl"
    original = f.read_bytes()
    assert run("strip-all", f).exit_code == 0
    assert pend.apply(f, settle=0).applied                          # the swap alone, no catalog
    assert _log() == [] and not pend.pending_path(f).exists()
    assert Path(f"{f}.swaps.json").is_file()
    r = run("undo", f, "--dry-run")
    assert r.exit_code == 0, r.output + r.stderr
    assert "undo would restore" in r.stdout and "strip-all" in r.stdout
    r = run("undo", f)
    assert r.exit_code == 0, r.output + r.stderr
    assert f.read_bytes() == original
    assert [x["command"] for x in _log()] == ["strip-all", "undo"]  # the apply is logged from the journal


def test_the_next_refresh_logs_a_swap_the_catalog_missed(env):
    """Issue 17 item 3: the next refresh catches up, not only the next apply
    or undo: a swap with no log row is logged once, from its journal."""
    f = env / f"{SID}.jsonl"
    assert run("refresh").exit_code == 0
    assert run("strip-all", f).exit_code == 0
    assert pend.apply(f, settle=0).applied                          # the swap alone, no catalog
    assert _log() == []
    r = run("refresh")
    assert r.exit_code == 0, r.output
    assert "1 surgeries logged from swap journals" in r.output
    [row] = _log()
    assert row["command"] == "strip-all" and row["backup_path"].endswith(".bak")
    r = run("refresh")
    assert "logged from swap journals" not in r.output and len(_log()) == 1  # once


def test_a_pending_copy_left_by_an_apply_killed_before_removing_it_does_not_block_undo(env):
    f = env / f"{SID}.jsonl"
    original = f.read_bytes()
    assert run("strip-all", f).exit_code == 0
    kept = {p: p.read_bytes() for p in (pend.pending_path(f), pend.meta_path(f))}
    assert pend.apply(f, settle=0).applied
    for p, data in kept.items():                                   # killed before the copy was removed
        p.write_bytes(data)
    r = run("undo", f)
    assert r.exit_code == 0, r.output + r.stderr
    assert f.read_bytes() == original and not pend.pending_path(f).exists()


def test_the_journal_is_never_catalogued(env):
    f = env / f"{SID}.jsonl"
    assert run("strip-all", f, "--apply").exit_code == 0
    assert Path(f"{f}.swaps.json").is_file()
    assert run("refresh").exit_code == 0
    r = run("query", "select path from files", "--json")
    assert not [x for x in json.loads(r.output) if "swaps" in x["path"]]


def _applied(env) -> tuple[Path, Path, bytes, bytes]:
    f = env / f"{SID}.jsonl"
    original = f.read_bytes()
    assert run("strip-all", f, "--apply").exit_code == 0
    return f, Path(f"{f}.bak"), original, f.read_bytes()


@pytest.mark.parametrize("damage", ["emptied", "half", "another session", "an edited line"])
def test_undo_refuses_a_backup_that_is_not_the_file_apply_kept(env, damage):
    f, bak, original, stripped = _applied(env)
    lines = original.splitlines(keepends=True)
    bak.unlink()  # a new file, not the link to the original
    bak.write_bytes({"emptied": b"", "half": b"".join(lines[: len(lines) // 2]),
                     "another session": (env / f"{OTHER}.jsonl").read_bytes(),
                     "an edited line": original.replace(b"prompt 3", b"prompt three", 1)}[damage])
    before = _tree(env)
    r = run("undo", f)
    assert r.exit_code == 1 and r.stdout == ""
    err = r.stderr.strip()
    assert err.startswith(f"Error: the backup {bak.name} is not the file surgery #1 (strip-all, ")
    assert "\n" not in err and "--force" in err
    if damage == "emptied":
        assert "it is empty (0 lines, 0 bytes" in err
    else:
        assert f"{len(lines):,} lines, {len(original):,} bytes" in err     # what it was at apply
    assert _tree(env) == before


def test_undo_force_shows_verify_s_verdict_then_restores(env):
    f, bak, original, stripped = _applied(env)
    lines = original.splitlines(keepends=True)
    half = b"".join(lines[:8])
    bak.unlink()
    bak.write_bytes(half)
    r = run("undo", f, "--force", "--dry-run")
    assert r.exit_code == 0, r.output + r.stderr
    assert r.stdout.startswith("--force: the backup ") and f"\nverify {bak}: OK (8 records" in r.stdout
    assert f.read_bytes() == stripped
    r = run("undo", f, "--force")
    assert r.exit_code == 0, r.output + r.stderr
    assert "verify " in r.stdout and f.read_bytes() == half
    forced = json.loads(_log()[-1]["arguments"])["forced"]
    assert forced.startswith(f"the backup {bak.name} is not the file")


def test_a_planted_journal_of_thousands_of_entries_costs_one_estimate_not_one_each(env, monkeypatch):
    """Round 4 attack: 20,000 well-formed entries (15 MB, under the journal's
    size limit) made refresh and undo run for minutes, one session refresh
    and one estimate per entry. The entries the catalog lacks are logged in
    one transaction with one estimate."""
    from txdb.catalog import estimate

    f = env / f"{SID}.jsonl"
    assert run("strip-all", f, "--apply").exit_code == 0
    j = Path(f"{f}.swaps.json")
    doc = json.loads(j.read_text())
    doc["swaps"] = [dict(doc["swaps"][-1], id=f"{i:032x}") for i in range(500)]
    j.write_text(json.dumps(doc))
    calls = []
    real = estimate.store_session_estimate
    monkeypatch.setattr(estimate, "store_session_estimate", lambda conn, fid: calls.append(fid) or real(conn, fid))
    r = run("refresh")
    assert r.exit_code == 0, r.output
    assert "500 surgeries logged from swap journals" in r.output
    assert len(calls) <= 3, len(calls)
    assert len(_log()) == 501
