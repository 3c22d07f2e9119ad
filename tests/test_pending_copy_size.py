"""A pending copy is checked against its record before a byte of it is read.

Anyone who can write a session's folder can put any file at
``<session>.jsonl.pending``: a sparse 2 GiB file made every command that
reads the copy (apply, apply --all-pending, a pass reusing it, rescue
--apply, verify) read it whole, for up to a minute and gigabytes of RAM.
The record beside it now holds the copy's size, and every such command
compares the open file's size with it (and with the most any pass makes of
the snapshot, for a record of an earlier release or a forged one) first:
one ``Error:`` line naming the file and how to start again, nothing read,
nothing changed."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import orjson
import pytest

from test_own_files_hostile import _make, run
from txdb.surgery import pending as pend

# Sparse (no disk): over every bound for this session, and far over what its commands need in RAM.
PLANT = (256 << 20) + 1
MAX_RSS_KB = 160 << 10  # a run that read the plant holds it (at least 256 MiB); these commands need ~40 MB
TIMEOUT = 120

# Runs one command in a fresh process and says what it did and its peak memory.
DRIVER = textwrap.dedent('''
    import json, resource, sys, time, traceback
    from click.testing import CliRunner
    from txdb.cli import cli
    t0 = time.monotonic()
    r = CliRunner().invoke(cli, json.loads(sys.argv[1]))
    exc = None
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        exc = "".join(traceback.format_exception(r.exception))
    print(json.dumps({"rc": r.exit_code, "stdout": r.stdout, "stderr": r.stderr, "exception": exc,
                      "seconds": time.monotonic() - t0,
                      "maxrss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
''')

COMMANDS = {
    "apply": ["apply", "{s}"],
    "apply --all-pending": ["apply", "--all-pending"],
    "rescue --apply": ["rescue", "{s}", "--target", "21000", "--apply"],
    "persist-tools": ["persist-tools", "{s}", "--min-chars", "50"],
    "verify the copy": ["verify", "{s}.pending"],
    "snapshot": ["snapshot", "{s}"],
    "analyze": ["analyze", "{s}"],  # reads a session through its pending copy
}


# A process's peak RSS counts the pages of the process that forked it until
# it execs (Linux keeps the larger), and a test worker may have grown past
# the bound: the driver is started from this small process instead.
LAUNCHER = "import subprocess, sys; sys.exit(subprocess.run(sys.argv[1:]).returncode)"


def _drive(argv: list[str]) -> dict:
    p = subprocess.run([sys.executable, "-c", LAUNCHER, sys.executable, "-c", DRIVER, json.dumps(argv)],
                       capture_output=True, text=True, timeout=TIMEOUT)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def _old_format(meta: Path) -> None:
    """The record as a release before copy sizes wrote it."""
    doc = orjson.loads(meta.read_bytes())
    doc.pop("copy_size", None)
    for p in doc.get("passes") or []:
        p.pop("copy_size", None)
    meta.write_bytes(orjson.dumps(doc))


def _forged(meta: Path) -> None:
    """The record claims the planted size for the copy."""
    doc = orjson.loads(meta.read_bytes())
    doc["copy_size"] = PLANT
    for p in doc.get("passes") or []:
        p["copy_size"] = PLANT
    meta.write_bytes(orjson.dumps(doc))


RECORDS = {"as written": lambda meta: None, "earlier release": _old_format, "forged": _forged}


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    base = tmp_path_factory.mktemp("copy-size")
    f = _make(base / "live", pending=True)
    shutil.copytree(base / "live", base / "tpl", symlinks=True)
    return base, f


@pytest.mark.parametrize("record", RECORDS)
@pytest.mark.parametrize("label", COMMANDS)
def test_a_huge_sparse_copy_is_refused_before_a_byte_of_it_is_read(template, label, record):
    base, f = template
    live = base / "live"
    shutil.rmtree(live)
    shutil.copytree(base / "tpl", live, symlinks=True)
    pfile, meta = Path(f"{f}.pending"), Path(f"{f}.pending.json")
    RECORDS[record](meta)
    pfile.unlink()
    with open(pfile, "wb") as fh:
        fh.truncate(PLANT)
    before, record_before = f.read_bytes(), meta.read_bytes()
    r = _drive([a.format(s=f) for a in COMMANDS[label]] + ["--db", str(live / "c.db")])
    where = f"{label} over a {PLANT:,}-byte copy ({record} record)"
    assert r["exception"] is None and "Traceback" not in r["stderr"], f"{where}: {r['exception']}"
    assert r["rc"] == 1, f"{where} was not refused: {r}"
    said = [ln for ln in r["stderr"].splitlines() if ln.startswith(("Error: ", "Refused: "))]
    assert len(said) == 1, f"{where}: {r['stderr']}"
    assert pfile.name in said[0] and "snapshot --refresh" in said[0], f"{where}: {said[0]}"
    assert f"{PLANT:,} bytes" in said[0], f"{where}: {said[0]}"
    assert r["maxrss_kb"] < MAX_RSS_KB, f"{where} read the copy: {r['maxrss_kb']:,} kB at its peak"
    assert f.read_bytes() == before and meta.read_bytes() == record_before
    assert pfile.stat().st_size == PLANT and not Path(f"{f}.bak.1").exists()


def test_the_record_holds_the_size_of_the_copy_each_pass_wrote(tmp_path):
    f = _make(tmp_path, pending=False)
    db = tmp_path / "c.db"
    assert run("snapshot", f, "--db", db).exit_code == 0
    doc = orjson.loads(Path(f"{f}.pending.json").read_bytes())
    assert doc["copy_size"] == doc["size"] == Path(f"{f}.pending").stat().st_size
    passes = (["compact-range", f, "--from", "1", "--to", "2", "--summary", "two passes"],
              ["compact-range", f, "--pos", "1", "--summary", "the second pass, with a longer summary"])
    sizes = []
    for n, args in enumerate(passes, 1):
        r = run(*args, "--db", db)
        assert r.exit_code == 0, r.output
        doc = orjson.loads(Path(f"{f}.pending.json").read_bytes())
        assert len(doc["passes"]) == n
        assert doc["passes"][-1]["copy_size"] == Path(f"{f}.pending").stat().st_size
        sizes.append(doc["passes"][-1]["copy_size"])
    assert sizes[0] < sizes[1]
    assert run("apply", f, "--db", db).exit_code == 0


def test_a_copy_cut_at_a_line_end_is_refused_by_its_size(tmp_path):
    f = _make(tmp_path, pending=True)
    pfile = Path(f"{f}.pending")
    data = pfile.read_bytes()
    pfile.write_bytes(data[: data.rstrip(b"\n").rfind(b"\n") + 1])  # whole lines, the last one gone
    before = f.read_bytes()
    r = run("apply", f, "--db", tmp_path / "c.db")
    assert r.exit_code == 1
    assert f"its record says {len(data):,}:" in r.stderr and "snapshot --refresh" in r.stderr, r.stderr
    assert f.read_bytes() == before


def test_a_copy_under_a_record_of_an_earlier_release_still_applies(tmp_path):
    f = _make(tmp_path, pending=True)
    new = Path(f"{f}.pending").read_bytes()
    _old_format(Path(f"{f}.pending.json"))
    r = run("apply", f, "--db", tmp_path / "c.db")
    assert r.exit_code == 0, r.output
    assert f.read_bytes() == new


def test_a_pass_never_writes_a_copy_over_the_bound(tmp_path):
    """What apply refuses no pass writes: the bound is the pass's too."""
    f = _make(tmp_path, pending=False)
    limit = pend.copy_limit(f.stat().st_size)
    assert limit < PLANT
    before = sorted(os.listdir(f.parent))
    summary = tmp_path / "summary.txt"
    summary.write_text("x" * (limit + 1))
    r = run("compact-range", f, "--from", "2", "--to", "4", "--summary", summary.read_text(), "--db", tmp_path / "c.db")
    assert r.exit_code == 1 and "Error: " in r.stderr, r.output
    assert sorted(os.listdir(f.parent)) == before
