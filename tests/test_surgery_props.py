"""Property tests: any surgery command, any flags, on generated and real sessions,
keeps the contract (tests/invariants.py).

The real and generated sessions shipped in tests/data run in any clone; a
sample of ../shared/corpus joins them when it is present."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from txdb.errors import SurgeryError
from txdb.surgery import ops
from txdb.surgery import pending as pend
from txdb.surgery.engine import run_surgery
from txdb.transcript import Transcript

from invariants import contract_violations
from sessions import corpus_files, is_main_session, shipped_files

DATA = Path(__file__).parent / "data"

LOCAL = sorted(str(p) for p in (DATA / "cli").rglob("*.jsonl")) + sorted(
    str(p) for p in (DATA / "surgery").glob("*.jsonl"))


def _session_files() -> list[str]:
    """Real and generated sessions: those shipped in tests/data (any clone),
    then a sample of ../shared/corpus when it is here."""
    out = [str(p) for p in shipped_files("generated") + shipped_files("real")]
    gen = sorted((p for p in corpus_files("generated") if is_main_session(p)), key=lambda p: p.stat().st_size)[:1]
    real = [p for p in corpus_files("real") if p.stat().st_size < 700_000 and "entireio-cli/37" not in str(p)]
    return out + [str(p) for p in gen + real[:10]]


def _op(name: str, params: dict):
    rng = params.get("range")
    if name == "strip-tools":
        return lambda t, o: ops.strip_tools(
            t, tools=params.get("tools"), only_inputs=params.get("only_inputs", False),
            only_results=params.get("only_results", False), keep_last_lines=params.get("keep_last_lines"),
            positions=rng)
    if name == "strip-thinking":
        return lambda t, o: ops.strip_thinking(t, positions=rng)
    if name == "strip-all":
        return lambda t, o: ops.strip_all(t, keep_last_lines=params.get("keep_last_lines"), positions=rng)
    if name == "strip-attachments":
        return lambda t, o: ops.strip_attachments(
            t, types=params.get("types"), keep_recent=params.get("keep_recent", 1),
            include_free=params.get("include_free", False), positions=rng,
            drop_all=bool(params.get("types")) and params.get("drop_all", False))
    raise AssertionError(name)


commands = st.sampled_from(["strip-tools", "strip-thinking", "strip-all", "strip-attachments"])
params = st.fixed_dictionaries({}, optional={
    "range": st.tuples(st.integers(0, 60), st.integers(0, 400)).map(lambda p: (min(p), max(p))),
    "tools": st.sampled_from([["Bash"], ["Read", "Write"], ["mcp__*"], ["Edit"]]),
    "only_inputs": st.booleans(),
    "only_results": st.booleans(),
    "keep_last_lines": st.integers(0, 5),
    "types": st.sampled_from([["task_reminder"], ["hook_success", "date"], ["skill_listing"], ["environment"]]),
    "keep_recent": st.integers(0, 3),
    "include_free": st.booleans(),
    "drop_all": st.booleans(),
})
flags = st.fixed_dictionaries({
    "usage_reset": st.booleans(),
    "keep_dropped_thinking": st.booleans(),
    "fork": st.sampled_from([False, False, False, True]),
    "passes": st.integers(1, 2),
})


def _check_one(tmp: Path, src: str, cmd: str, prm: dict, flg: dict) -> None:
    if prm.get("only_inputs") and prm.get("only_results"):
        prm = dict(prm, only_results=False)
    work = tmp / Path(src).parent.name
    work.mkdir(parents=True, exist_ok=True)
    f = work / Path(src).name
    shutil.copyfile(src, f)
    f.chmod(0o640)
    before = f.read_bytes()
    if flg["fork"] and Path(src).parent.name == "subagents":
        with pytest.raises(SurgeryError, match="subagent transcript"):  # claude -r could not resume it
            run_surgery(f, cmd, _op(cmd, prm), fork=True)
        assert sorted(p.name for p in work.iterdir()) == [f.name]
        return
    for i in range(flg["passes"]):
        rep = run_surgery(f, cmd, _op(cmd, prm), fork=flg["fork"], usage_reset=flg["usage_reset"],
                          keep_dropped_thinking=flg["keep_dropped_thinking"])
        assert f.read_bytes() == before, "the original was written"
        if flg["fork"]:
            assert rep.written
            after = Path(rep.target).read_bytes()
            assert contract_violations(before, after, fork=True) == []
            Path(rep.target).unlink()
            return
    p = pend.pending_path(f)
    if not p.exists():
        return
    after = p.read_bytes()
    problems = contract_violations(before, after)
    assert problems == [], problems
    # apply swaps in exactly the pending bytes
    pend.apply(f, settle=0.0)
    assert f.read_bytes() == after
    assert (f.stat().st_mode & 0o777) == 0o640  # the original's mode, kept


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(src=st.sampled_from(LOCAL), cmd=commands, prm=params, flg=flags)
def test_contract_on_local_fixtures(tmp_path_factory, src, cmd, prm, flg):
    _check_one(tmp_path_factory.mktemp("p"), src, cmd, prm, flg)


CORPUS_FILES = _session_files()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(src=st.sampled_from(CORPUS_FILES or ["-"]), cmd=commands, prm=params, flg=flags)
def test_contract_on_corpus(tmp_path_factory, src, cmd, prm, flg):
    _check_one(tmp_path_factory.mktemp("c"), src, cmd, prm, flg)


@pytest.mark.parametrize("src", LOCAL + CORPUS_FILES)
def test_strip_all_default_on_every_file(tmp_path, src):
    _check_one(tmp_path, src, "strip-all", {}, {"usage_reset": True, "keep_dropped_thinking": False,
                                               "fork": False, "passes": 1})


@pytest.mark.parametrize("src", LOCAL + CORPUS_FILES)
def test_load_is_lossless(src):
    data = Path(src).read_bytes()
    assert Transcript.from_bytes(data).to_bytes() == data
