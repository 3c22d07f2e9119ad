"""Writing many sidecar files (issue 19, speed): each one durable before it is
named, at about the cost of writing them unsynced. Real files in tmp_path."""

from __future__ import annotations

import os
import stat
import time
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


def _unsynced(folder: Path, sides: list[sc.Sidecar]) -> None:
    """The floor: the same files, temp file + link as ``write`` does, no fsync."""
    folder.mkdir(parents=True)
    for side in sides:
        tmp = folder / f".{side.path.name}.tmp"
        with open(tmp, "wb") as fh:
            fh.write(side.data)
        os.link(tmp, folder / side.path.name)
        os.unlink(tmp)


def test_many_sidecars_cost_about_what_writing_them_unsynced_costs(tmp_path):
    """compact-range writes one file per record (thousands on a big session):
    fsynced one by one they took several times the writing itself. Paired
    runs, best ratio of three, so a busy machine slows both alike."""
    ratios = []
    for run in range(3):
        sdir = tmp_path / f"s{run}" / "sess"
        sides = _plans(sdir)
        t0 = time.perf_counter()
        _unsynced(tmp_path / f"floor{run}", sides)
        floor = time.perf_counter() - t0
        t0 = time.perf_counter()
        created = sc.write(sdir, sides)
        took = time.perf_counter() - t0
        assert len(created) == N
        ratios.append(took / floor)
    assert min(ratios) < 5, ratios  # one fsync after another: 16x to 75x here


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
