"""Copy-first and apply: refusals change no file, a live writer is detected,
the tail is discarded and counted, a killed apply leaves a whole file."""

from __future__ import annotations

import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import orjson
import pytest

from sessions import edit_pending_copy
from txdb.errors import SurgeryError
from txdb.surgery import ops
from txdb.surgery import pending as pend
from txdb.surgery.engine import PassOptions, run_surgery

DATA = Path(__file__).parent / "data"
TOOLS = next((DATA / "cli" / "-tmp-txdb-cli-fixtures-tools-demo").glob("*.jsonl"))
EDGE = DATA / "surgery" / "edge.jsonl"
ROOT = Path(__file__).resolve().parents[1]


def _copy(tmp_path: Path, src: Path = TOOLS) -> Path:
    d = tmp_path / "proj"
    d.mkdir(exist_ok=True)
    f = d / src.name
    shutil.copyfile(src, f)
    return f


def _strip(f: Path):
    return run_surgery(f, "strip-all", lambda t, o: ops.strip_all(t))


def _state(folder: Path) -> dict[str, bytes]:
    """Every file below ``folder`` (the sidecars of a session's folder too) and its bytes."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _line(n: int) -> bytes:
    return orjson.dumps({"type": "queue-operation", "operation": "enqueue", "content": f"tail {n}"}) + b"\n"


def test_mutation_writes_only_pending_and_sidecar(tmp_path):
    f = _copy(tmp_path)
    before = f.read_bytes()
    rep = _strip(f)
    assert rep.written and rep.snapshot_created
    assert f.read_bytes() == before
    names = sorted(p.name for p in f.parent.iterdir())
    assert names == sorted([f.name, f.name + ".pending", f.name + ".pending.json"])
    assert (pend.pending_path(f).stat().st_mode & 0o777) == 0o600


def test_second_pass_reuses_pending(tmp_path):
    f = _copy(tmp_path)
    run_surgery(f, "strip-tools", lambda t, o: ops.strip_tools(t, only_results=True))
    first = pend.pending_path(f).read_bytes()
    run_surgery(f, "strip-thinking", lambda t, o: ops.strip_thinking(t))
    second = pend.pending_path(f).read_bytes()
    assert second != first
    assert b"[stripped by txdb" in second  # the first pass survived
    assert b'"type":"thinking"' not in second


def test_dry_run_writes_nothing(tmp_path):
    f = _copy(tmp_path)
    state = _state(f.parent)
    rep = run_surgery(f, "strip-all", lambda t, o: ops.strip_all(t), PassOptions(dry_run=True))
    assert rep.changed_lines > 0 and not rep.written
    assert _state(f.parent) == state
    _strip(f)
    state = _state(f.parent)
    r = pend.apply(f, dry_run=True, settle=0.0)
    assert not r.applied
    assert _state(f.parent) == state


def test_apply_swaps_and_backs_up_enumerated(tmp_path):
    f = _copy(tmp_path)
    original = f.read_bytes()
    _strip(f)
    new = pend.pending_path(f).read_bytes()
    r = pend.apply(str(pend.pending_path(f)), settle=0.0)  # either path is accepted
    assert r.applied and f.read_bytes() == new
    assert Path(r.backup).name == f.name + ".bak"
    assert Path(r.backup).read_bytes() == original
    assert not pend.pending_path(f).exists() and not pend.meta_path(f).exists()
    # a second surgery + apply makes .bak.1, never reusing .bak
    run_surgery(f, "strip-attachments", lambda t, o: ops.strip_attachments(t, include_free=True, keep_recent=0))
    r2 = pend.apply(f, settle=0.0)
    assert Path(r2.backup).name == f.name + ".bak.1"
    assert Path(r2.backup).read_bytes() == new
    assert (f.parent / (f.name + ".bak")).read_bytes() == original
    # --no-backup
    run_surgery(f, "strip-attachments", lambda t, o: ops.strip_attachments(t, types=["skill_listing"], drop_all=True))
    r3 = pend.apply(f, settle=0.0, backup=False)
    assert r3.backup is None
    assert not (f.parent / (f.name + ".bak.2")).exists()


def test_apply_refuses_rewritten_original(tmp_path):
    f = _copy(tmp_path)
    _strip(f)
    data = f.read_bytes()
    f.write_bytes(data.replace(b'"type":"user"', b'"type":"user" ', 1))
    state = _state(f.parent)
    with pytest.raises(SurgeryError, match="rewritten since the snapshot"):
        pend.apply(f, settle=0.0)
    assert _state(f.parent) == state


def test_apply_refuses_pending_that_loses_the_chain(tmp_path):
    f = _copy(tmp_path)
    _strip(f)
    p = pend.pending_path(f)
    lines = p.read_bytes().split(b"\n")
    # break the chain: the leaf's parent no longer exists
    for i in range(len(lines) - 1, -1, -1):
        if b'"parentUuid":"' in lines[i] and b'"type":"assistant"' in lines[i]:
            o = orjson.loads(lines[i])
            o["parentUuid"] = "00000000-dead-beef-0000-000000000000"
            o["timestamp"] = "2000-01-01T00:00:00.000Z"  # nothing written just before: resume cannot bridge it
            lines[i] = orjson.dumps(o)
            break
    p.write_bytes(b"\n".join(lines))
    state = _state(f.parent)
    with pytest.raises(SurgeryError, match=r"would lose 25 of the 26 records .* from chain position 0 \(line 3\)"):
        pend.apply(f, settle=0.0)
    assert _state(f.parent) == state


def test_apply_refuses_pending_that_fails_verify(tmp_path):
    f = _copy(tmp_path)
    _strip(f)
    p = pend.pending_path(f)
    lines = p.read_bytes().split(b"\n")
    lines.insert(3, b'{"type":"user","message":')  # an unparseable line the original did not have
    edit_pending_copy(f, b"\n".join(lines))
    state = _state(f.parent)
    with pytest.raises(SurgeryError, match="fails verify"):
        pend.apply(f, settle=0.0)
    assert _state(f.parent) == state


def test_verify_failure_already_in_original_does_not_block(tmp_path):
    f = _copy(tmp_path, EDGE)
    # A glued line: verify fails on the original already.
    lines = f.read_bytes().split(b"\n")
    lines[2:4] = [lines[2] + lines[3]]  # glue a message onto the record before it: resume drops it
    f.write_bytes(b"\n".join(lines))
    from txdb.model.verify import verify_file
    assert not verify_file(f).ok
    rep = run_surgery(f, "strip-tools", lambda t, o: ops.strip_tools(t))
    assert rep.written
    r = pend.apply(f, settle=0.0)
    assert r.applied


def test_apply_refuses_missing_pending_or_sidecar(tmp_path):
    f = _copy(tmp_path)
    with pytest.raises(SurgeryError, match="no pending copy"):
        pend.apply(f, settle=0.0)
    _strip(f)
    pend.meta_path(f).unlink()
    state = _state(f.parent)
    with pytest.raises(SurgeryError, match="snapshot record"):
        pend.apply(f, settle=0.0)
    assert _state(f.parent) == state


def test_snapshot_leaves_out_unfinished_line_and_refresh(tmp_path):
    f = _copy(tmp_path)
    with open(f, "ab") as fh:
        fh.write(b'{"type":"user","message":{"role":"us')  # the CLI mid-write
    s = pend.snapshot(f)
    assert s.created and s.left_out_bytes > 0
    assert pend.pending_path(f).read_bytes() == TOOLS.read_bytes()
    assert not pend.snapshot(f).created
    assert pend.snapshot(f, refresh=True).created


class Writer(threading.Thread):
    """A live CLI: appends one line every 100 ms."""

    def __init__(self, path: Path):
        super().__init__(daemon=True)
        self.path = path
        self.stop = threading.Event()
        self.count = 0

    def run(self):
        while not self.stop.is_set():
            with open(self.path, "ab") as fh:
                fh.write(_line(self.count))
            self.count += 1
            time.sleep(0.1)


class Reader(threading.Thread):
    """Samples the session file while apply runs: every sample must be whole."""

    def __init__(self, path: Path, old: bytes, new: bytes):
        super().__init__(daemon=True)
        self.path, self.old, self.new = path, old, new
        self.stop = threading.Event()
        self.bad: list[int] = []

    def run(self):
        while not self.stop.is_set():
            data = self.path.read_bytes()
            if not (data == self.new or data.startswith(self.old)):
                self.bad.append(len(data))


def test_live_writer_refused_then_tail_discarded(tmp_path):
    f = _copy(tmp_path)
    old = f.read_bytes()
    _strip(f)
    new = pend.pending_path(f).read_bytes()
    w = Writer(f)
    w.start()
    try:
        time.sleep(0.05)
        for _ in range(2):
            state_pending = pend.pending_path(f).read_bytes()
            with pytest.raises(SurgeryError, match="being written"):
                pend.apply(f)
            assert pend.pending_path(f).read_bytes() == state_pending
            assert f.read_bytes().startswith(old)
            assert not list(f.parent.glob("*.bak*"))
    finally:
        w.stop.set()
        w.join()
    appended = w.count
    assert appended >= 4
    r = Reader(f, old, new)
    r.start()
    try:
        rep = pend.apply(f)
    finally:
        r.stop.set()
        r.join()
    assert r.bad == []
    assert rep.applied and rep.discarded_lines == appended
    assert f.read_bytes() == new
    # the backup holds everything, the discarded tail included
    assert Path(rep.backup).read_bytes() == old + b"".join(_line(i) for i in range(appended))


def test_snapshot_during_live_writes_is_never_torn(tmp_path):
    f = _copy(tmp_path)
    w = Writer(f)
    w.start()
    try:
        for _ in range(5):
            s = pend.snapshot(f, refresh=True)
            data = pend.pending_path(f).read_bytes()
            assert data.endswith(b"\n") and len(data) == s.size
            assert f.read_bytes().startswith(data)
            time.sleep(0.03)
    finally:
        w.stop.set()
        w.join()


_APPLY_SCRIPT = """
import os, signal, sys
from txdb.surgery import pending
if len(sys.argv) > 2:  # kill this process at that step (the test-only seam)
    def hook(step, at=sys.argv[2]):
        if step == at:
            os.kill(os.getpid(), signal.SIGKILL)
    pending._step_hook = hook
pending.apply(sys.argv[1], settle=0.0)
"""


def _apply_proc(f: Path, kill_at: str | None = None) -> subprocess.Popen:
    args = [sys.executable, "-c", _APPLY_SCRIPT, str(f)] + ([kill_at] if kill_at else [])
    return subprocess.Popen(args, cwd=str(ROOT))


def _temps(folder: Path) -> list[str]:
    return [x.name for x in folder.iterdir() if x.name.endswith(".txdb-tmp")]


@pytest.mark.parametrize("step", ["checked", "backup", "temp", "renaming", "swapped"])
def test_killed_at_each_step_leaves_old_or_new(tmp_path, step):
    f = _copy(tmp_path)
    old = f.read_bytes()
    _strip(f)
    new = pend.pending_path(f).read_bytes()
    p = _apply_proc(f, step)
    assert p.wait(timeout=60) == -signal.SIGKILL
    data = f.read_bytes()
    assert data == (new if step == "swapped" else old)
    left = _temps(f.parent)
    assert bool(left) == (step in ("temp", "renaming"))  # killed between the temp write and the rename
    if step != "swapped":
        # the surgery can simply be applied again, and it removes the dead run's temp file
        pend.apply(f, settle=0.0)
        assert f.read_bytes() == new
        assert _temps(f.parent) == []


def test_killed_at_random_moments_leaves_old_or_new(tmp_path):
    rnd = random.Random(1234)
    outcomes = set()
    for i in range(8):
        d = tmp_path / f"r{i}"
        d.mkdir()
        f = _copy(d)
        old = f.read_bytes()
        _strip(f)
        new = pend.pending_path(f).read_bytes()
        p = _apply_proc(f)
        time.sleep(rnd.uniform(0.0, 0.4))
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=60)
        data = f.read_bytes()
        assert data in (old, new)
        outcomes.add(data == new)
        leftovers = [x for x in f.parent.iterdir() if x.name.endswith(".txdb-tmp")]
        for x in leftovers:  # a temp file may be left; never the session itself
            assert x.name.startswith(".")


_PASS_SCRIPT = """
import os, signal, sys
from txdb.surgery import ops, pending
from txdb.surgery.engine import run_surgery
def hook(step):  # the test-only seam: die between recording the pass and writing its copy
    if step == "pass recorded":
        os.kill(os.getpid(), signal.SIGKILL)
pending._step_hook = hook
run_surgery(sys.argv[1], "strip-attachments", lambda t, o: ops.strip_attachments(t, include_free=True))
"""


def test_a_pass_killed_before_its_copy_is_written_leaves_a_copy_that_applies(tmp_path):
    """The pass is recorded first: killed before the copy is written, the
    record names removals the copy still has (accepted), never the reverse
    (a copy with removals no pass explains, which apply refused forever)."""
    f = _copy(tmp_path, EDGE)
    assert _strip(f).written                                   # pass 1: a pending copy
    first = pend.pending_path(f).read_bytes()
    p = subprocess.Popen([sys.executable, "-c", _PASS_SCRIPT, str(f)], cwd=str(ROOT))
    assert p.wait(timeout=60) == -signal.SIGKILL
    assert pend.pending_path(f).read_bytes() == first          # the copy is pass 1's
    assert [e["command"] for e in pend.read_meta(f)["passes"]] == ["strip-all", "strip-attachments"]
    # The pass can be run again and the result applies.
    rep = run_surgery(f, "strip-attachments", lambda t, o: ops.strip_attachments(t, include_free=True))
    assert rep.written and len(pend.pending_path(f).read_bytes().splitlines()) < len(first.splitlines())
    final = pend.pending_path(f).read_bytes()
    assert pend.apply(f, settle=0.0).applied
    assert f.read_bytes() == final


def test_a_killed_pass_state_applies_as_is(tmp_path):
    f = _copy(tmp_path, EDGE)
    _strip(f)
    first = pend.pending_path(f).read_bytes()
    p = subprocess.Popen([sys.executable, "-c", _PASS_SCRIPT, str(f)], cwd=str(ROOT))
    assert p.wait(timeout=60) == -signal.SIGKILL
    assert pend.apply(f, settle=0.0).applied                   # the recorded-but-unwritten pass is harmless
    assert f.read_bytes() == first


def test_a_pending_copy_that_cannot_be_written_leaves_its_record_as_it_was(tmp_path):
    f = _copy(tmp_path, EDGE)
    _strip(f)
    pfile, record = pend.pending_path(f), pend.meta_path(f).read_bytes()
    first = pfile.read_bytes()

    def op(t, o):
        # The copy's name becomes a folder the new copy cannot replace.
        pfile.unlink()
        pfile.mkdir()
        (pfile / "x").write_bytes(b"")
        return ops.strip_attachments(t, include_free=True)

    with pytest.raises(OSError):
        run_surgery(f, "strip-attachments", op)
    assert pend.meta_path(f).read_bytes() == record            # no pass recorded for a copy never written
    shutil.rmtree(pfile)
    pfile.write_bytes(first)
    assert pend.apply(f, settle=0.0).applied and f.read_bytes() == first


def test_an_unreadable_snapshot_record_beside_a_pending_copy_is_refused(tmp_path):
    """A new snapshot would overwrite the copy and lose its earlier passes."""
    f = _copy(tmp_path)
    run_surgery(f, "strip-tools", lambda t, o: ops.strip_tools(t, only_results=True))
    pend.meta_path(f).write_bytes(b'{"size": "not a number"')
    state = _state(f.parent)
    msg = (f"the snapshot record {f.name}.pending.json of the pending copy {f.name}.pending is not one txdb "
           f"wrote (not JSON): run `txdb snapshot --refresh {f}` to start again from the session")
    for attempt in (lambda: run_surgery(f, "strip-thinking", lambda t, o: ops.strip_thinking(t)),
                    lambda: pend.snapshot(f), lambda: pend.apply(f, settle=0.0)):
        with pytest.raises(SurgeryError) as e:
            attempt()
        assert str(e.value) == msg
        assert _state(f.parent) == state
    assert pend.snapshot(f, refresh=True).created              # the way out it names
    assert pend.pending_path(f).read_bytes() == f.read_bytes()


def test_a_rewrite_after_the_snapshot_read_is_refused_even_with_its_mtime_put_back(tmp_path, monkeypatch):
    """check_descends trusts the snapshot's own read only while the file's stat
    identity holds (mtime and ctime: a write with its mtime set back still moves ctime)."""
    import os

    monkeypatch.setattr(pend, "QUIET_NS", 0)  # the file just written counts as quiet: the stat path is taken
    f = tmp_path / "11111111-1111-4111-8111-111111111111.jsonl"
    f.write_bytes(b'{"type":"user","uuid":"a","message":{"role":"user","content":"hello"}}\n')
    old = os.stat(f).st_mtime_ns - 10_000_000_000
    os.utime(f, ns=(old, old))
    _data, meta = pend.take_snapshot(f)
    assert pend._READ_AS[str(f)][0] is not None
    pend.check_descends(f, meta)  # untouched: accepted
    time.sleep(0.05)  # past the clock's granularity, as QUIET_NS ensures in use
    with open(f, "r+b") as fh:  # same size, one byte changed, in place
        fh.seek(52)
        fh.write(b"J")
    os.utime(f, ns=(old, old))
    with pytest.raises(SurgeryError, match="rewritten since the snapshot"):
        pend.check_descends(f, meta)
