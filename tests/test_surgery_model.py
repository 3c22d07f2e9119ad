"""How surgery holds a session: its bytes, not its parsed objects.

A pass must fit a long session in memory: the file's bytes once (shared by
the original and the working copy), the changed records' new bytes, and a
few fields per record; never a dict per record, nor the whole result joined
in memory before it is written.
"""

from __future__ import annotations

import tracemalloc

import orjson
import pytest
from sessions import assistant, user, write

from txdb.errors import SurgeryError
from txdb.surgery import ops
from txdb.surgery import pending as pend
from txdb.surgery.engine import PassOptions, run_surgery
from txdb.model.transcript import Transcript


def _tool_session(path, turns: int):
    """A session shaped like a real one: many small fields per line, tool
    calls with their inputs and results, thinking blocks."""
    objs = [user("start")]
    parent = objs[0]["uuid"]
    for i in range(turns):
        tid = f"toolu_{i:06d}"
        a = assistant([
            {"type": "thinking", "thinking": f"step {i} " * 40, "signature": "sig" * 30},
            {"type": "tool_use", "id": tid, "name": "Read",
             "input": {"file_path": f"/home/me/app/src/mod{i}.py", "limit": 400, "offset": i,
                       "notes": [{"k": j, "v": f"value {j}"} for j in range(30)]}},
        ], parent)
        objs.append(a)
        r = user([{"type": "tool_result", "tool_use_id": tid,
                   "content": [{"type": "text", "text": f"line {j}: x = {j}\n"} for j in range(60)]}],
                 a["uuid"], toolUseResult={"stdout": "ok", "lines": list(range(40))})
        objs.append(r)
        parent = r["uuid"]
    objs.append(assistant("done", parent))
    return write(path, objs)


def test_strip_all_holds_a_session_in_about_its_own_size(tmp_path):
    small = _tool_session(tmp_path / "warm" / "s.jsonl", 3)
    run_surgery(small, "strip-all", lambda t, o: ops.strip_all(t), PassOptions(dry_run=True))  # imports, caches
    f = _tool_session(tmp_path / "p" / "s.jsonl", 600)
    size = f.stat().st_size
    tracemalloc.start()
    try:
        rep = run_surgery(f, "strip-all", lambda t, o: ops.strip_all(t))
        _cur, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert rep.written and rep.result["tools"]["results"] == 600
    # Before, every record was held as a dict twice (original and copy),
    # and the result joined and parsed again: 17x this file.
    assert peak < 3 * size, f"peak {peak:,} bytes for a {size:,}-byte session"


def test_untouched_lines_are_copied_from_the_file_and_only_changed_ones_parsed(tmp_path):
    f = _tool_session(tmp_path / "p" / "s.jsonl", 20)
    data = f.read_bytes()
    t = Transcript.from_bytes(data, f)
    original = t.copy()
    ops.strip_tools(t, only_results=True)
    out = t.to_bytes()
    before, after = data.splitlines(), out.splitlines()
    assert len(before) == len(after)
    changed = [i for i, (a, b) in enumerate(zip(before, after)) if a != b]
    # The 20 tool results and nothing else; the original copy is untouched.
    assert len(changed) == 20
    assert all(orjson.loads(after[i])["message"]["content"][0]["type"] == "tool_result" for i in changed)
    assert original.to_bytes() == data
    assert not any(r.dirty for r in original.records)


def test_a_line_nested_deeper_than_orjson_reads_survives_surgery(tmp_path):
    """A valid line nested past orjson's limit: never a crash, kept byte for byte."""
    f = _tool_session(tmp_path / "p" / "s.jsonl", 5)
    deep = b'{"type":"x-deep","v":' + b"[" * 3000 + b"]" * 3000 + b"}\n"
    data = f.read_bytes()
    cut = data.index(b"\n") + 1
    f.write_bytes(data[:cut] + deep + data[cut:])
    rep = run_surgery(f, "strip-all", lambda t, o: ops.strip_all(t))
    assert rep.written
    out = pend.pending_path(f).read_bytes()
    assert deep in out


@pytest.mark.parametrize("how", ["truncated", "rewritten"])
def test_an_original_changed_while_the_pass_works_is_refused(tmp_path, how):
    """The snapshot check before the first pending copy is written reads the
    original in chunks now: a shorter or rewritten original still refuses."""
    f = _tool_session(tmp_path / "p" / "s.jsonl", 30)
    data = f.read_bytes()

    def op(t, _original):
        out = ops.strip_all(t)
        if how == "truncated":
            f.write_bytes(data[: len(data) // 2])
        else:
            f.write_bytes(data.replace(b'"type":"user"', b'"type":"user" ', 1))
        return out

    with pytest.raises(SurgeryError, match="rewritten since the snapshot"):
        run_surgery(f, "strip-all", op)
    assert not pend.pending_path(f).exists() and not pend.meta_path(f).exists()
