"""Issue 19: persist-tools says how many of the results it moved are on the
active chain (the others shrink the file, not the context), and
--keep-recent leaves the newest results on the active chain that would move."""
from __future__ import annotations

import shutil
import sys
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

TESTS = Path(__file__).resolve().parent
sys.path.insert(0, str(TESTS))
from sessions import session_path  # noqa: E402
from txdb.catalog import db  # noqa: E402
from txdb.cli import cli  # noqa: E402

# 4d5611e5 holds branches off its active chain with tool results of their own
SESSION = "real/marot-spotter/4d5611e5-241a-462a-8d15-5122611a9569.jsonl"


def run(*args):
    r = CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return r.output


@pytest.fixture
def session(tmp_path):
    src = session_path(SESSION)
    if not src.is_file():
        pytest.skip("corpus session missing")
    proj = tmp_path / "projects" / src.parent.name
    proj.mkdir(parents=True)
    shutil.copyfile(src, proj / src.name)
    shutil.copytree(src.with_suffix(""), proj / src.stem)
    dbp = tmp_path / "c.db"
    run("refresh", "--root", tmp_path / "projects", "--db", dbp)
    return proj / src.name, dbp


def _moved(f: Path, dbp: Path, *extra) -> list[dict]:
    return orjson.loads(run("persist-tools", f, "--db", dbp, "--dry-run", "--json", *extra))["result"]["files"]


def test_the_report_counts_the_results_on_the_active_chain(session):
    f, dbp = session
    moved = _moved(f, dbp)
    conn = db.connect(dbp)
    chain = {u for (u,) in conn.execute("SELECT uuid FROM active_chain")}
    on = [m for m in moved if m["uuid"] in chain]
    # the positions the report gives are the active chain's, nothing else has one
    assert all(m["pos"] is not None for m in on) and all(m["pos"] is None for m in moved if m not in on)
    assert 0 < len(on) < len(moved)
    text = run("persist-tools", f, "--db", dbp, "--dry-run").splitlines()[0]
    assert f"persisted {len(moved)} tool results ({len(on)} on the active chain)" in text
    assert f"the other {len(moved) - len(on)} are off it: they shrink the file, not the context" in text


def test_keep_recent_leaves_the_newest_results_on_the_active_chain(session):
    f, dbp = session
    every = _moved(f, dbp)
    kept = _moved(f, dbp, "--keep-recent", "3")
    newest = sorted((m for m in every if m["pos"] is not None), key=lambda m: m["pos"])[-3:]
    assert [m for m in every if m not in newest] == kept
