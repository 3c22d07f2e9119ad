"""Shared fixtures: real files in tmp_path, real SQLite, never mocks of either."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import settings

from sessions import CORPUS, DATA
from txdb.catalog import db
from txdb.cli import cli
from txdb.catalog.ingest.store import refresh

# A property holds or it does not, however long one example takes on a
# loaded machine: no per-example deadline (its 200 ms default failed a
# property test at random when the suite shared two cores).
settings.register_profile("txdb", deadline=None)
settings.load_profile("txdb")

# Some tests start subprocesses from several threads at once (the real-CLI
# acceptance pool). With vfork, CPython 3.11 can fail such a spawn with
# "[Errno 14] Bad address" while another thread changes memory the vforked
# child still shares; plain fork has no such window.
subprocess._USE_VFORK = False

# Tables are cut to $COLUMNS; pytest-xdist's workers inherit COLUMNS=80 from
# execnet, so without this a table test passes alone and fails in parallel.
# Tests that want a width set it themselves.
os.environ.pop("COLUMNS", None)
os.environ.pop("LINES", None)

TESTS = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config, items):
    """The cross-release acceptance (``realcli_matrix``) runs only when ``-m``
    names it: it installs two more CLI releases and doubles the run. The
    real-CLI modules run last, so the quick tests show progress at once."""
    if "realcli_matrix" not in (config.option.markexpr or ""):
        dropped = [i for i in items if i.get_closest_marker("realcli_matrix")]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
            items[:] = [i for i in items if not i.get_closest_marker("realcli_matrix")]
    items.sort(key=lambda i: i.path.name.endswith("_realcli.py"))  # stable: each module stays whole


def pytest_collection_finish(session):
    """Say what the real-CLI tests will download before any runs (in one
    process; under xdist the controller says it, see below)."""
    if hasattr(session.config, "workerinput") or not any(i.get_closest_marker("realcli") for i in session.items):
        return
    from realcli import ALSO_USED, CLAUDE_CODE_VERSION

    want = {CLAUDE_CODE_VERSION}
    for i in session.items:
        params = getattr(getattr(i, "callspec", None), "params", {})
        if i.get_closest_marker("realcli") and isinstance(params.get("cli"), str):
            want.add(params["cli"])
        want.update(ALSO_USED.get(i.path.name, ()))
    _announce_downloads(session.config, want)


_announced = False


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node, ids):
    """The controller collects nothing itself: it reads the releases the
    real-CLI tests want from the first worker's test ids."""
    global _announced
    if _announced:
        return
    _announced = True
    from realcli import ALSO_USED, CLAUDE_CODE_VERSION, CLI_RELEASES

    real = [i for i in ids if "_realcli.py::" in i]
    if real:
        want = {CLAUDE_CODE_VERSION} | {v for v in CLI_RELEASES if any(v in i for i in real)}
        want.update(v for i in real for v in ALSO_USED.get(i.split("::")[0].rsplit("/", 1)[-1], ()))
        _announce_downloads(node.config, want)


def _announce_downloads(config, want: set[str]) -> None:
    import sys as _sys

    _sys.path.insert(0, str(TESTS))
    from realcli import install

    missing = sorted(v for v in want if install.find_binary(install.install_dir(v)) is None)
    tr = config.pluginmanager.get_plugin("terminalreporter")
    if tr is None:
        return
    capture = config.pluginmanager.get_plugin("capturemanager")

    def say(msg: str) -> None:
        if capture is None:
            tr.write_line(msg)
            return
        with capture.global_and_fixture_disabled():
            tr.write_line(msg)

    install.notify = say
    if missing:
        say(f"realcli: Claude Code {', '.join(missing)} not in {install.cache_root()}: the real-CLI tests, "
            f"which run last, install {'it' if len(missing) == 1 else 'them'} with npm "
            f"(200-400 MB each, once)")


@pytest.fixture(autouse=True)
def _sigint_live():
    """Ctrl-C reaches the txdb processes a test starts: a run launched in the
    background (`&`, nohup) inherits SIGINT ignored, and so would they; a
    command run in-process after Ctrl-C ignores it too (cli/main.py)."""
    import signal as _signal

    if _signal.getsignal(_signal.SIGINT) is _signal.SIG_IGN:
        _signal.signal(_signal.SIGINT, _signal.default_int_handler)
    yield


@pytest.fixture(autouse=True)
def _recursion_limit_kept():
    """A test that raises the recursion limit must put it back: left raised, it
    lets a later test on the same worker parse what must fail to parse."""
    import sys as _sys

    before = _sys.getrecursionlimit()
    yield
    assert _sys.getrecursionlimit() == before, "the test left the recursion limit changed"


def copy_fixture_sessions(root: Path) -> Path:
    """Copy tests/data/projects (real MIT-licensed sessions) and the CLI-made
    sessions of tests/data/cli to ``root``, laid out as ~/.claude/projects."""
    shutil.copytree(DATA / "projects", root, ignore=shutil.ignore_patterns("README.md"))
    cli = DATA / "cli"
    if cli.is_dir():
        for d in cli.iterdir():
            if d.is_dir():
                shutil.copytree(d, root / d.name)
    return root


@pytest.fixture(scope="module")
def shipped_catalog(tmp_path_factory) -> Path:
    """One catalog of the shipped sessions per test module (made by `txdb
    refresh`), for modules that only read it."""
    tmp = tmp_path_factory.mktemp("shipped")
    root = copy_fixture_sessions(tmp / "projects")
    path = tmp / "c.db"
    run("refresh", "--root", root, "--db", path, ok=True)
    return path


@pytest.fixture
def projects(tmp_path) -> Path:
    return copy_fixture_sessions(tmp_path / "projects")


@pytest.fixture
def db_path(tmp_path) -> Path:
    return tmp_path / "catalog.db"


@pytest.fixture
def conn(db_path):
    c = db.connect(db_path)
    yield c
    c.close()


@pytest.fixture
def catalog(conn, projects):
    """A catalog refreshed from the fixture projects."""
    refresh(conn, [projects])
    return conn


@pytest.fixture
def corpus() -> Path:
    if not CORPUS.is_dir():
        pytest.skip("../shared/corpus is absent (only present on the developers' machines)")
    return CORPUS


def fail_nth_write(monkeypatch, n: int):
    """Make the n-th batch of rows the catalog writes fail as a full or
    broken disk would; returns a function that puts the writer back."""
    import sqlite3

    from txdb.catalog.ingest import store

    real = store._write_rows
    calls = {"n": 0}

    def failing(c, *batch):
        calls["n"] += 1
        if calls["n"] == n:
            raise sqlite3.OperationalError("disk I/O error")
        return real(c, *batch)

    monkeypatch.setattr(store, "_write_rows", failing)
    return lambda: monkeypatch.setattr(store, "_write_rows", real)


rows = db.rows


def run(*args, ok: bool = False):
    """``txdb ARGS`` in this process (click's CliRunner; a traceback is
    raised, not hidden in the result); ``ok``: assert it exited 0."""
    r = CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)
    if ok:
        assert r.exit_code == 0, r.output
    return r
