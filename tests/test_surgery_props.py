"""Property tests: any surgery command, any flags, on generated and real sessions,
keeps the contract (tests/invariants.py).

The real and generated sessions shipped in tests/data run in any clone; a
sample of ../shared/corpus joins them when it is present."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from txdb.errors import SurgeryError
from txdb.surgery import ops
from txdb.surgery import pending as pend
from txdb.surgery.engine import PassOptions, run_surgery
from txdb.model.transcript import Transcript

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
            run_surgery(f, cmd, _op(cmd, prm), PassOptions(fork=True))
        assert sorted(p.name for p in work.iterdir()) == [f.name]
        return
    for i in range(flg["passes"]):
        rep = run_surgery(f, cmd, _op(cmd, prm), PassOptions(fork=flg["fork"], usage_reset=flg["usage_reset"],
                                                             keep_dropped_thinking=flg["keep_dropped_thinking"]))
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


# The commands that write beside the session or rewrite the chain: persist
# (persist-tools), compact-range, replace-images and compact (a new session).

def _tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _transcripts(folder: Path, src: Path, which: str) -> Path:
    """A folder of image transcripts for replace-images: for every image of
    ``src``, every other one, or none."""
    from txdb.surgery.images import list_images

    folder.mkdir(parents=True, exist_ok=True)
    shas = sorted({im.sha256 for im in list_images(Transcript.load(src)) if im.sha256})
    chosen = shas if which == "all" else shas[::2] if which == "half" else []
    for sha in chosen:
        (folder / f"{sha}.txt").write_text(f"A screenshot ({sha[:8]}): a terminal with a stack trace.")
    return folder


def _writing_op(name: str, prm: dict, transcripts: Path):
    from txdb.surgery.compact import compact_before
    from txdb.surgery.compact_range import CompactRangeOp
    from txdb.surgery.images import replace_images
    from txdb.surgery.persist import PersistOp, Selection
    from txdb.surgery.usage import context_estimator

    rng = prm.get("range")
    if name == "persist-tools":
        return PersistOp(Selection(kinds=("tool",), tools=prm.get("tools"), positions=rng,
                                   keep_recent=prm.get("keep_recent", 0), min_chars=prm.get("min_chars", 0)))
    if name == "compact-range":
        return CompactRangeOp(*(rng or (1, 4)), prm.get("summary"))
    if name == "replace-images":
        return lambda t, o: replace_images(t, transcripts, drop_missing=prm.get("drop_missing", False),
                                           positions=rng)
    if name == "compact":
        return lambda t, o: compact_before(t, prm.get("before", 3), source=str(o.path),
                                           pre_tokens=context_estimator(o)(o))
    raise AssertionError(name)


writing_commands = st.sampled_from(["persist-tools", "compact-range", "replace-images", "compact"])
writing_params = st.fixed_dictionaries({}, optional={
    # Short ranges: a long one mostly holds the leaf or cuts a tool call (refused).
    "range": st.tuples(st.integers(0, 40), st.integers(0, 3)).map(lambda p: (p[0], p[0] + p[1])),
    "tools": st.sampled_from([["Bash"], ["Read", "Write"], ["mcp__*"], ["*"]]),
    "keep_recent": st.integers(0, 2),
    "min_chars": st.sampled_from([0, 0, 200]),
    "summary": st.sampled_from(["Set up the project", "Ünïcode summary: a → b"]),
    "drop_missing": st.booleans(),
    "transcribe": st.sampled_from(["all", "half", "none"]),
    "before": st.integers(0, 80),
})


def _check_writing(tmp: Path, src: str, cmd: str, prm: dict, flg: dict) -> None:
    """The contract for a command that writes files: a refusal leaves the
    folder exactly as it was; a pass writes only the pending copy (or the
    new session) and files inside the session's own folder; the original is
    never written; the result keeps the contract and applies byte for byte."""
    def session_dir(path: Path) -> Path:  # stated here, not read from the code under test
        return path.parent.parent if path.parent.name == "subagents" else path.parent / path.name[:-len(".jsonl")]

    root = tmp / "p"  # everything under it is watched: only the session's folder may change
    work = root / Path(src).parent.name
    work.mkdir(parents=True, exist_ok=True)
    f = work / Path(src).name
    shutil.copyfile(src, f)
    before = f.read_bytes()
    transcripts = _transcripts(tmp / "transcripts", f, prm.get("transcribe", "all"))
    fork = cmd == "compact" or flg["fork"]
    own = session_dir(f)
    for _ in range(flg["passes"]):
        was = _tree(root)
        try:
            rep = run_surgery(f, cmd, _writing_op(cmd, prm, transcripts), PassOptions(
                fork=fork, usage_reset=flg["usage_reset"], keep_dropped_thinking=flg["keep_dropped_thinking"],
                positions=prm.get("range") if cmd == "compact-range" else None))
        except SurgeryError:
            assert _tree(root) == was, "a refusal changed files"
            event(f"{cmd}: refused")
            return
        now = _tree(root)
        assert f.read_bytes() == before, "the original was written"
        allowed = {str(pend.pending_path(f).relative_to(root)), str(pend.meta_path(f).relative_to(root))}
        if rep.written and rep.fork_session_id:
            allowed.add(str(Path(rep.target).relative_to(root)))
        for name, data in now.items():
            if was.get(name) != data:
                assert name in allowed or (root / name).is_relative_to(own) or (
                    fork and (root / name).is_relative_to(session_dir(work / f"{rep.fork_session_id}.jsonl"))), \
                    f"{cmd} wrote {name} outside the session's own folder"
        for name in was:
            assert name in now, f"{cmd} removed {name}"
        event(f"{cmd}: {'written' if rep.written else 'nothing to do'}")
        if fork:
            if rep.written:
                problems = contract_violations(before, Path(rep.target).read_bytes(), fork=True,
                                               compacted=cmd == "compact")
                assert problems == [], problems
            return
    p = pend.pending_path(f)
    if not p.exists():
        return
    after = p.read_bytes()
    problems = contract_violations(before, after)
    assert problems == [], problems
    pend.apply(f, settle=0.0)
    assert f.read_bytes() == after


SHIPPED = LOCAL + [p for p in CORPUS_FILES if p.startswith(str(DATA))]
WITH_IMAGES = [p for p in SHIPPED if b'"type":"image"' in Path(p).read_bytes()]


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), cmd=writing_commands, prm=writing_params, flg=flags)
def test_contract_of_the_writing_commands(tmp_path_factory, data, cmd, prm, flg):
    src = data.draw(st.sampled_from(WITH_IMAGES if cmd == "replace-images" else SHIPPED), label="src")
    _check_writing(tmp_path_factory.mktemp("w"), src, cmd, prm, flg)
