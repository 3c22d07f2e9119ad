"""Writing many sidecar files in batches (issue 19, speed): each one whole,
private and durable before it is named; a refusal takes back every batch;
no write ever goes through a link (B3).
Real files in tmp_path. (The time it takes is measured by bench/, never here.)"""
from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import orjson
import pytest

from conftest import run
from sessions import conversation, write as write_session
from txdb.model.durability import TEMP_SUFFIX
from txdb.errors import SurgeryError
from txdb.model import sidecar as sc

N = 600  # more than two batches


def _plans(sdir: Path, n: int = N) -> list[sc.Sidecar]:
    planned: dict[Path, bytes] = {}
    out = []
    for i in range(n):
        side = sc.plan(sdir, sc.relative_path("message", f"uuid-{i:05d}"), (f'{{"n":{i},"text":"' + "x" * 2000
                                                                              + '"}').encode(), planned)
        planned[side.path] = side.data
        out.append(side)
    return out


def test_every_sidecar_is_whole_private_and_no_temp_is_left(tmp_path):
    sdir = tmp_path / "sess"
    sides = _plans(sdir)
    created = sc.write(sdir, sides)
    assert created == [s.path for s in sides]
    folder = sdir / "persisted" / "message"
    assert sorted(os.listdir(folder)) == sorted(s.path.name for s in sides)  # no temp file
    for s in sides:
        assert s.path.read_bytes() == s.data
        assert stat.S_IMODE(s.path.stat().st_mode) == sc.FILE_MODE
    # written again: every file reused, nothing created
    again = _plans(sdir)
    assert all(s.reused for s in again) and sc.write(sdir, again) == []


def test_a_refusal_in_a_later_batch_takes_back_the_earlier_batches(tmp_path):
    """A file that appears with other bytes under a planned name (after the plan,
    before the write) refuses the whole write: the files of the batches already
    linked are removed, nothing else in the folder is touched."""
    sdir = tmp_path / "sess"
    sides = _plans(sdir)
    folder = sdir / "persisted" / "message"
    folder.mkdir(parents=True)
    late = sides[sc.WRITE_BATCH + 10].path
    late.write_bytes(b"someone else's")
    with pytest.raises(SurgeryError, match="appeared with other content"):
        sc.write(sdir, sides)
    assert os.listdir(folder) == [late.name]
    assert late.read_bytes() == b"someone else's"


def test_many_batches_start_the_fsync_threads_once(tmp_path, monkeypatch):
    """Thousands of sidecars (compact-range over a long chain) are written in
    batches; the threads that fsync a batch together serve every batch and
    every later pass of the process, so a pass starts at most FSYNC_THREADS
    threads however many batches it has (each one started per batch was a
    fifth of compact-range's time on a 1,760-record range)."""
    import threading

    from txdb.model import durability

    started: list[str] = []
    real_start = threading.Thread.start

    def start(self):
        started.append(self.name)
        real_start(self)
    monkeypatch.setattr(threading.Thread, "start", start)
    monkeypatch.setattr(durability, "_jobs", None)  # as in a fresh process
    for n in range(2):
        sdir = tmp_path / f"sess{n}"
        sides = _plans(sdir, 3 * sc.WRITE_BATCH + 5)
        assert sc.write(sdir, sides) == [s.path for s in sides]
        assert all(s.path.read_bytes() == s.data for s in sides)
    assert 0 < len(started) <= durability.FSYNC_THREADS


def test_a_pass_checks_each_folder_for_links_once(tmp_path, monkeypatch):
    """Planning a thousand files in one folder checks that folder (and the ones
    above it up to the session folder) for symlinks once, not once per file;
    a symlinked folder is refused all the same (tests/test_persist.py)."""
    checks: list[Path] = []
    real = sc._no_links

    def counted(sdir, folder):
        checks.append(folder)
        return real(sdir, folder)
    monkeypatch.setattr(sc, "_no_links", counted)
    w = sc.Writes()
    w.plan_files(tmp_path / "sess")
    for i in range(1000):
        w.add(w.plan(sc.relative_path("message", f"uuid-{i:05d}"), b"{}"))
    assert len(checks) == 1
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (tmp_path / "sess" / "persisted").mkdir(parents=True)
    (tmp_path / "sess" / "persisted" / "thinking").symlink_to(outside)
    with pytest.raises(SurgeryError, match="is a symlink"):
        w.plan(sc.relative_path("thinking", "uuid-1"), b"x")


def test_a_pass_opens_only_the_names_its_folder_holds(tmp_path, monkeypatch):
    """Planning a thousand records' files (compact-range) lists each folder
    once and opens only the names already in it: a free name is not looked
    up one by one. A name that is there is still read: the same bytes are
    reused, other bytes get the content-addressed name beside it."""
    sdir = tmp_path / "sess"
    folder = sdir / "persisted" / "message"
    folder.mkdir(parents=True)
    (folder / "uuid-00001.json").write_bytes(b"{}")  # the same bytes: reused
    (folder / "uuid-00002.json").write_bytes(b"other")  # other bytes: another name
    opened: list[str] = []
    real = sc.open_regular

    def counted(path, *a, **k):
        opened.append(Path(path).name)
        return real(path, *a, **k)
    monkeypatch.setattr(sc, "open_regular", counted)
    w = sc.Writes()
    w.plan_files(sdir)
    sides = [w.plan(sc.relative_path("message", f"uuid-{i:05d}"), b"{}") for i in range(1000)]
    assert sorted(opened) == ["uuid-00001.json", "uuid-00002.json"]
    assert sides[1].reused and sides[1].path == folder / "uuid-00001.json"
    assert not sides[2].reused and sides[2].path.name.startswith("uuid-00002.") and sides[2].path.parent == folder
    assert [s.path.name for s in sides[3:5]] == ["uuid-00003.json", "uuid-00004.json"]
    # a file that appears after the folder was listed is never replaced (write's link)
    late = sides[7].path
    late.write_bytes(b"someone else's")
    with pytest.raises(SurgeryError, match="appeared with other content"):
        sc.write(sdir, [s for s in sides if not s.reused and s.path.name != "uuid-00002.json"])
    assert late.read_bytes() == b"someone else's"
    assert sorted(os.listdir(folder)) == ["uuid-00001.json", "uuid-00002.json", "uuid-00007.json"]


def test_a_small_batch_starts_no_more_fsync_threads_than_it_has_files(tmp_path, monkeypatch):
    """persist-tools often writes two or three files: their fsyncs start as
    many threads as files (up to FSYNC_THREADS), not the whole pool."""
    import threading

    from txdb.model import durability

    started: list[str] = []
    real_start = threading.Thread.start

    def start(self):
        started.append(self.name)
        real_start(self)
    monkeypatch.setattr(threading.Thread, "start", start)
    monkeypatch.setattr(durability, "_jobs", None, raising=False)  # as in a fresh process
    monkeypatch.setattr(durability, "_pool", None, raising=False)
    sdir = tmp_path / "sess"
    sides = _plans(sdir, 3)
    assert sc.write(sdir, sides) == [s.path for s in sides]
    assert all(s.path.read_bytes() == s.data for s in sides)
    assert len(started) == 3


# -- no write follows a link (issue B3: a folder swapped for a symlink mid-write) --

SID = "55555555-0000-0000-0000-000000000001"
_SWAP: dict = {}  # what the audit hook does in the running test (nothing otherwise)


def _audit(event: str, args) -> None:
    """Swap the folder for a symlink at the ``open`` of the Nth temp file of
    the real write (an event the os module raises before it acts): the first
    (before any file is made), or the first of the second batch (the first
    batch linked). Audit hooks cannot be removed: outside these tests it
    does nothing."""
    if _SWAP.get("at") is None or event != "open":
        return
    nameless = isinstance(args[2], int) and getattr(os, "O_TMPFILE", 0) \
        and args[2] & os.O_TMPFILE == os.O_TMPFILE  # a file made with no name (durability.nameless_file_at)
    if not (str(args[0]).endswith(TEMP_SUFFIX) or nameless):
        return
    _SWAP["temps"] = _SWAP.get("temps", 0) + 1
    if _SWAP["temps"] < _SWAP["at"]:
        return
    _SWAP["at"] = None
    folder: Path = _SWAP["folder"]
    os.rename(folder, folder.with_name(folder.name + ".moved"))
    os.symlink(_SWAP["outside"], folder)


sys.addaudithook(_audit)


@pytest.fixture
def big(tmp_path, monkeypatch):
    """A 400-record session (a range of 390 is two batches) and an empty
    folder outside the session's."""
    monkeypatch.setenv("TXDB_DB", str(tmp_path / "catalog.db"))
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "claude"))
    proj = tmp_path / "claude" / "projects" / "-home-me-app"
    f = proj / f"{SID}.jsonl"
    write_session(f, conversation(100, session=SID))
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    yield f, outside
    _SWAP.clear()


def _one_error(r) -> str:
    out = r.output.strip()
    assert r.exit_code != 0, out
    assert "Traceback" not in out
    lines = [ln for ln in out.splitlines() if ln.startswith("Error:")]
    assert len(lines) == 1, out
    return lines[0]


@pytest.mark.parametrize("when", [1, sc.WRITE_BATCH + 1])
def test_a_folder_swapped_for_a_symlink_during_the_write_gets_nothing_outside(big, when):
    """The folder is swapped for a symlink to a folder outside the session's
    after the plan and the link check: before the first file is made, and
    after the first batch is linked (as a racer did, B3). No file lands outside, the pass fails
    with one Error line, no pending copy is written, the session is as it
    was, and the files written before the swap are taken back."""
    f, outside = big
    before = f.read_bytes()
    folder = f.parent / SID / "persisted" / "message"
    folder.mkdir(parents=True)
    _SWAP.update(at=when, folder=folder, outside=outside)
    err = _one_error(run("compact-range", f, "--from", 1, "--to", 390, "--no-usage-reset"))
    assert _SWAP["at"] is None, "the swap did not happen"
    assert os.listdir(outside) == []
    assert "was moved or replaced" in err and str(folder) in err
    assert not Path(str(f) + ".pending").exists()
    assert f.read_bytes() == before
    assert os.listdir(folder.with_name("message.moved")) == []  # taken back where they were written


@pytest.mark.parametrize("to", ["the same bytes", "nothing"])
def test_a_symlink_at_a_sidecar_name_is_never_reused_nor_followed(big, to):
    """A symlink at a record's file name, to a file outside holding that
    record's very bytes (or a dangling one), is not the record's sidecar: the
    record is written to a file of its own in the folder (its
    content-addressed name), the survivor lists only regular files inside
    the folder, the link and its target are left as they were."""
    f, outside = big
    lines = f.read_bytes().splitlines()
    uuid1 = orjson.loads(lines[1])["uuid"]
    folder = f.parent / SID / "persisted" / "message"
    folder.mkdir(parents=True)
    if to == "the same bytes":
        (outside / "same.json").write_bytes(lines[1])
    (folder / f"{uuid1}.json").symlink_to(outside / "same.json")
    r = run("compact-range", f, "--from", 1, "--to", 10, "--no-usage-reset")
    assert r.exit_code == 0, r.output
    pending = Path(str(f) + ".pending")
    survivor = orjson.loads(pending.read_bytes().splitlines()[1])
    names = survivor["persistedRange"]["files"]
    assert len(names) == 10 and f"{uuid1}.json" not in names
    for name, line in zip(names, lines[1:11]):
        p = folder / name
        assert not p.is_symlink() and p.is_file() and p.read_bytes() == line
    assert os.readlink(folder / f"{uuid1}.json") == str(outside / "same.json")
    assert os.listdir(outside) == (["same.json"] if to == "the same bytes" else [])
    assert run("verify", pending).exit_code == 0


def test_a_pass_that_reuses_every_file_still_writes_only_through_the_folder(tmp_path):
    """Every file already there (a second pass): the folder swapped for a link
    to copies outside after the plan refuses the write, naming the link; no
    marker may name a file that lives outside the session's folder."""
    sdir = tmp_path / "sess"
    sc.write(sdir, _plans(sdir, 10))
    again = _plans(sdir, 10)
    assert all(s.reused for s in again)
    folder = sdir / "persisted" / "message"
    folder.rename(tmp_path / "elsewhere")
    folder.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(SurgeryError, match=f"{folder} is a symlink"):
        sc.write(sdir, again)


def test_a_symlink_that_appears_at_a_name_after_the_plan_is_named_and_refused(tmp_path):
    """A link put at a planned name between the plan and the write (to the
    same bytes outside) refuses the write, naming the link; the files this
    write made are taken back."""
    sdir = tmp_path / "sess"
    sides = _plans(sdir, 10)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "x").write_bytes(sides[5].data)
    sides[5].path.parent.mkdir(parents=True)
    sides[5].path.symlink_to(outside / "x")
    with pytest.raises(SurgeryError, match=f"{sides[5].path} appeared while writing and is a symlink"):
        sc.write(sdir, sides)
    assert os.listdir(sides[5].path.parent) == [sides[5].path.name]


def test_a_pass_of_another_command_cleans_what_a_killed_pass_left(tmp_path):
    """A killed compact-range left temp files in persisted/message; persist-tools
    (which writes in tool-results) used to leave them there for good."""
    import subprocess
    import sys as _sys
    from conftest import run
    from sessions import assistant, user, write as write_session
    objs, parent = [], None
    for i in range(4):
        u = user(f"q{i}", parent)
        use = {"type": "tool_use", "id": f"toolu_{i:04d}", "name": "Read", "input": {"file_path": f"/f{i}"}}
        a = assistant([use], u["uuid"])
        r = user([{"type": "tool_result", "tool_use_id": f"toolu_{i:04d}", "content": "z" * 9_000}], a["uuid"])
        objs += [u, a, r]
        parent = r["uuid"]
    f = write_session(tmp_path / "p" / "5e55e55e-0000-4000-8000-000000000002.jsonl", objs + [assistant("ok", parent)])
    left = f.with_suffix("") / "persisted" / "message"
    left.mkdir(parents=True)
    dead = subprocess.run([_sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()  # a pid whose process is gone
    temp = left / f".rec-7.json.{dead}.abc123.txdb-tmp"
    temp.write_bytes(b"half a record")
    keep = left / ".not-ours.tmp"
    keep.write_bytes(b"someone else's")
    r = run("persist-tools", f, "--keep-recent", "0", "--db", tmp_path / "c.db")
    assert r.exit_code == 0, r.output
    assert not temp.exists() and keep.exists()


def _streamed(sdir: Path, pieces: list[bytes], fail_after: int | None = None, sha: str | None = None) -> sc.Sidecar:
    import hashlib

    whole = b"".join(pieces)

    def chunks():
        for i, piece in enumerate(pieces):
            if fail_after is not None and i == fail_after:
                raise OSError("the catalog went away")
            yield piece

    return sc.Sidecar(path=sdir / "s.jsonl", data=b"", reused=False, chunks=chunks, size=len(whole),
                      sha256=sha or hashlib.sha256(whole).hexdigest())


def test_a_streamed_file_is_written_whole_and_a_failing_or_wrong_stream_leaves_nothing(tmp_path):
    # restore's streamed write hashes and writes on a thread while the next pieces are made
    sdir = tmp_path / "sess"
    sdir.mkdir()
    pieces = [bytes([65 + i % 26]) * (300_000 + i) for i in range(40)]
    assert sc.write(sdir, [_streamed(sdir, pieces)]) == [sdir / "s.jsonl"]
    assert (sdir / "s.jsonl").read_bytes() == b"".join(pieces)
    (sdir / "s.jsonl").unlink()
    with pytest.raises(SurgeryError, match="went away"):
        sc.write(sdir, [_streamed(sdir, pieces, fail_after=17)])
    assert os.listdir(sdir) == []  # no temp file, nothing named
    with pytest.raises(SurgeryError, match="do not match"):
        sc.write(sdir, [_streamed(sdir, pieces, sha="0" * 64)])
    assert os.listdir(sdir) == []
