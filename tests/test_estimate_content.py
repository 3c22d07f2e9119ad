"""The estimate follows the content (issue 27): whatever history the catalog
saw of a file (another tool's edit, a surgery, an undo and its redo, a
restore), its figure is the one a fresh catalog of the same bytes gives,
and recorded turns the content cannot explain do not calibrate.
tests/test_estimate_realcli.py holds the figures against what the CLI sends."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sessions import session_path  # noqa: E402

from txdb.catalog import db, estimate  # noqa: E402
from txdb.cli import cli  # noqa: E402

SESSION = "generated/-home-user-src-demo-14/5a73f7d9-de47-4921-a60f-d1c8c68135c5.jsonl"  # shipped


def run(*args):
    r = CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return r


def _copy(tmp_path: Path, rel: str = SESSION) -> Path:
    src = session_path(rel)
    if not src.is_file():
        pytest.skip("session missing")
    proj = tmp_path / "projects" / src.parent.name
    proj.mkdir(parents=True)
    shutil.copyfile(src, proj / src.name)
    return proj / src.name


def _estimate(dbp: Path, f: Path) -> dict:
    """The stored estimate after `txdb refresh` (which also logs the swaps a
    journal holds and the catalog lacks: a fresh catalog's surgery rows)."""
    run("refresh", "--root", f.parent.parent, "--db", dbp)
    conn = db.connect(dbp)
    fid = conn.execute("SELECT id FROM files WHERE path = ? AND gone = 0", (str(f),)).fetchone()[0]
    e = estimate.session_estimate(conn, fid)
    stored = conn.execute("SELECT est_context_tokens FROM sessions WHERE file_id = ?", (fid,)).fetchone()[0]
    conn.close()
    assert stored == e["calibrated"]
    return e


def _fresh(tmp_path: Path, f: Path, name: str) -> dict:
    """The estimate of the session as its folder holds it (its bytes and
    txdb's swap journal beside it), in a catalog made from nothing."""
    (tmp_path / "fresh").mkdir(exist_ok=True)
    return _estimate(tmp_path / "fresh" / f"{name}.db", f)


def _bare(tmp_path: Path, f: Path, name: str) -> dict:
    """The estimate of ``f``'s bytes alone, copied to another folder (a
    journal there would name another session: disregarded)."""
    where = tmp_path / "bare" / name / "projects" / f.parent.name
    where.mkdir(parents=True)
    shutil.copyfile(f, where / f.name)
    return _estimate(tmp_path / "bare" / name / "c.db", where / f.name)


def cut_tool_results(f: Path) -> int:
    """What an in-place pruner or a hand edit leaves: every tool result's
    content replaced by a note, the recorded usage as it was."""
    out, n = [], 0
    for raw in f.read_bytes().splitlines():
        d = orjson.loads(raw)
        content = (d.get("message") or {}).get("content") if isinstance(d.get("message"), dict) else None
        if d.get("type") == "user" and isinstance(content, list):
            for b in content:
                if isinstance(b, dict) and b.get("type") == "tool_result":
                    b["content"] = "[output removed]"
                    n += 1
        out.append(json.dumps(d, ensure_ascii=False, separators=(",", ":")).encode())
    f.write_bytes(b"\n".join(out) + b"\n")
    return n


def test_a_foreign_edit_is_estimated_as_a_fresh_catalog_of_its_bytes(tmp_path):
    f = _copy(tmp_path)
    dbp = tmp_path / "c.db"
    before = _estimate(dbp, f)
    assert before["rejected_count"] == 0 and before["turns_used"] == estimate.MAX_TURNS - 5
    assert cut_tool_results(f) > 10
    after = _estimate(dbp, f)
    assert after == _fresh(tmp_path, f, "edited") == _bare(tmp_path, f, "edited")
    # the turns recorded over results no longer there calibrate nothing: the
    # figure is the first turn's plus what the file holds since, not the old one
    assert after["rejected_count"] >= 30 and after["calibrated"] < 0.5 * before["calibrated"]
    assert after["calibrated"] >= estimate.EMPTY_SESSION_OVERHEAD + estimate.FACTOR_RANGE[0] * after["raw"]
    text = run("analyze", f, "--db", dbp).output
    assert "Turns left out of the fit" in text and "content cut since" in text


def test_rescue_undo_and_redo_are_estimated_as_a_fresh_catalog(tmp_path):
    """After rescue --apply, undo, and undo again (the redo), the catalog's
    figure is a fresh catalog's of the session as its folder holds it at
    each step (the redo once read 579,513 for a 97k file: its surgery row
    carried no fit and the stale turns calibrated again)."""
    f = _copy(tmp_path)
    dbp = tmp_path / "c.db"
    before = _estimate(dbp, f)
    rep = json.loads(run("rescue", f, "--db", dbp, "--target", before["calibrated"] // 2, "--apply", "--json").output)
    rescued = _estimate(dbp, f)
    assert rescued == _fresh(tmp_path, f, "rescued")
    assert rescued["calibrated"] == rep["surgery"]["tokens_after"] <= before["calibrated"] // 2
    run("undo", f, "--db", dbp)
    assert _estimate(dbp, f) == before == _fresh(tmp_path, f, "undone")
    run("undo", f, "--db", dbp)
    redone = _estimate(dbp, f)
    assert redone == _fresh(tmp_path, f, "redone")
    # the undo that redoes it logs the factor the rescue priced the file at
    assert redone == rescued and redone["factor_logged"]
    # the same bytes elsewhere, without the journal: priced from their own figures
    bare = _bare(tmp_path, f, "redone")
    assert not bare["factor_logged"] and bare["raw"] == rescued["raw"]


def test_a_restored_session_is_estimated_as_a_fresh_catalog(tmp_path):
    f = _copy(tmp_path)
    dbp = tmp_path / "c.db"
    _estimate(dbp, f)
    run("strip-all", f, "--db", dbp, "--apply")
    stripped = _estimate(dbp, f)
    f.unlink()
    run("refresh", "--root", f.parent.parent, "--db", dbp)
    run("restore", f.stem, "--db", dbp, "--root", f.parent.parent)
    assert f.is_file()
    assert _estimate(dbp, f) == stripped == _fresh(tmp_path, f, "restored")


def test_the_fit_is_bounded():
    """No negative overhead, a factor in range: a fit of turns whose slope is
    steeper than their level (d3f32579: 2.07 x chars/4 - 59,895) goes through
    the overhead floor instead, and no prediction reads under the floor plus
    the lowest factor's content (d3f32579 read 47,413 after a rescue, under
    its own chars/4 of 51,956)."""
    pairs = [(e, -59_895 + 2.07 * e, 0) for e in range(60_000, 340_000, 10_000)]
    f, kept, rejected = estimate.calibrate(pairs, 0)
    assert len(kept) == len(pairs) and not rejected
    assert f.overhead >= estimate.EMPTY_SESSION_OVERHEAD
    assert estimate.FACTOR_RANGE[0] <= f.factor <= estimate.FACTOR_RANGE[1]
    assert estimate.predict(f, 51_956) >= estimate.EMPTY_SESSION_OVERHEAD + estimate.FACTOR_RANGE[0] * 51_956
    assert estimate.predict(f, pairs[-1][0]) == round(pairs[-1][1])  # the anchor holds


def test_turns_the_content_cannot_explain_are_left_out():
    """Recorded figures far under what the content costs (a session built by
    concatenation: each pass records its own small context) or jumping above
    what the content added (results cut since) are rejected; a reset last
    turn under stale ones makes them give way."""
    rising = [(10_000 + 2_000 * k, 20_000 + 2_000 * k) for k in range(10)]
    # concatenated: the recorded context starts over while the chain grows
    built = rising + [(100_000 + 2_000 * k, 20_000 + 2_000 * k) for k in range(10)]
    kept, rejected = estimate.select_turns(built)
    assert kept == list(range(10)) and all("under what its prefix costs" in rejected[i] for i in range(10, 20))
    # results cut in place: the recorded figures jump over content that is no longer there
    cut = rising[:3] + [(e - 15_000, r + 40_000) for e, r in rising[3:]]
    kept, rejected = estimate.select_turns(cut)
    assert kept == [0, 1, 2] and all("content cut since" in rejected[i] for i in range(3, 10))
    # a strip's reset last turn: the stale turns before it give way to it
    stale = rising[:4] + [(e - 8_000, r) for e, r in rising[4:9]] + [(rising[9][0] - 8_000, rising[9][1] - 8_000)]
    kept, rejected = estimate.select_turns(stale)
    assert kept == [0, 1, 2, 3, 9], (kept, rejected)
