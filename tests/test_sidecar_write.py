"""Writing many sidecar files in batches (issue 19, speed): each one whole,
private and durable before it is named; a refusal takes back every batch.
Real files in tmp_path. (The time it takes is measured by bench/, never here.)"""
from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from txdb.errors import SurgeryError
from txdb import sidecar as sc

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

    from txdb import durability

    started: list[str] = []
    real_start = threading.Thread.start

    def start(self):
        started.append(self.name)
        real_start(self)
    monkeypatch.setattr(threading.Thread, "start", start)
    monkeypatch.setattr(durability, "_jobs", None)  # as in a fresh process
    for run in range(2):
        sdir = tmp_path / f"sess{run}"
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

    from txdb import durability

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
