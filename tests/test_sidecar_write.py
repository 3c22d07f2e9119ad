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
