"""Thinking the API does not count is not in the estimate.

On Sonnet 4 and 4.5 (and Haiku up to 4.5, Opus up to 4.5) the thinking a
request carries back adds nothing to the context the API records: a fit of
each recorded turn against its thinking and the rest apart gives about 0
tokens a token for thinking there, and its size on Sonnet 4.6, Opus 4.7 and
Opus 5 (docs/performance.md). Counted anyway, the thinking added between a
fit and a later turn was predicted as context the API never billed, and
strip-thinking promised a saving the gauge would not show
(``estimate.counts_thinking``, applied by ``estimate.unsent_thinking``).

The truth here is the API's own record: real corpus sessions (copies), each
turn's recorded context predicted from a fit on the turns before it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from txdb.catalog import db, estimate
from txdb.catalog.ingest.store import refresh

CORPUS = Path(__file__).resolve().parents[1].parent / "shared" / "corpus"
TXDB = str(Path(sys.executable).parent / "txdb")
SONNET_4 = "real/daaain-claude-code-log/-Users-dain-workspace-claude-code-log-sample/fe869ecb-c176-478f-9734-7e4b8ef12cff.jsonl"
SONNET_4_5 = ("real/bradymholt-dotfiles/-Users-bholt-dev-scratch-ynab-recurring-charges-finder/"
              "63b159ef-a6e5-4d4d-b078-bc1e65f38e74.jsonl")
SONNET_4_6 = "real/4thehalibit-omarchy-backup/-home-vwestberg-Claude/1fb5e404-604d-4a2b-baf1-3beb42a67371.jsonl"


def _copy(rel: str, tmp_path: Path) -> Path:
    src = CORPUS / rel
    if not src.is_file():
        pytest.skip("../shared/corpus is absent (only present on the developers' machines)")
    proj = tmp_path / "projects" / src.parent.name
    proj.mkdir(parents=True)
    dest = proj / src.name
    shutil.copyfile(src, dest)
    return dest


@pytest.mark.parametrize("rel, model", [(SONNET_4, "claude-sonnet-4-20250514"),
                                        (SONNET_4_5, "claude-sonnet-4-5-20250929")], ids=["sonnet-4", "sonnet-4-5"])
def test_a_later_turn_is_predicted_as_the_api_recorded_it(tmp_path, rel, model):
    """Fitted on the turns up to ten turns before, each of the last 20
    turns' requests is predicted within 3% of the context the API recorded
    for it on average (counting the thinking added in between: +5.5% on the
    Sonnet 4 session)."""
    _copy(rel, tmp_path)
    conn = db.connect(tmp_path / "c.db")
    refresh(conn, [tmp_path / "projects"])
    (fid,) = conn.execute("SELECT id FROM files").fetchone()
    assert estimate.catalog_current_model(conn, fid) == model
    assert estimate.catalog_thinking(conn, fid)  # the session holds thinking
    pairs = estimate.catalog_pairs(conn, fid)
    assert len(pairs) >= 30
    errors = []
    for k in range(len(pairs) - 20, len(pairs)):
        f = estimate.fit(pairs[:k - 9])
        errors.append(estimate.predict(f, pairs[k][0], pairs[k][2]) / pairs[k][1] - 1)
    conn.close()
    mean = sum(errors) / len(errors)
    assert abs(mean) < 0.03, [round(e, 3) for e in errors]


def _strip_thinking(path: Path, tmp_path: Path) -> dict:
    p = subprocess.run([TXDB, "strip-thinking", str(path), "--db", str(tmp_path / "c.db"), "--json"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def test_strip_thinking_promises_no_saving_where_the_api_does_not_count_thinking(tmp_path):
    """On Sonnet 4.5 the plan's predicted context stays where it was (it
    said 9,501 tokens saved, 16%: thinking the recorded usage never held);
    on Sonnet 4.6, which counts thinking, the saving stays."""
    rep = _strip_thinking(_copy(SONNET_4_5, tmp_path / "a"), tmp_path / "a")
    assert rep["changed_lines"] > 0
    assert abs(rep["tokens_before"] - rep["tokens_after"]) <= 0.005 * rep["tokens_before"], rep
    counted = _strip_thinking(_copy(SONNET_4_6, tmp_path / "b"), tmp_path / "b")
    assert counted["tokens_before"] - counted["tokens_after"] > 0.3 * counted["tokens_before"]


def test_strip_thinkings_plan_says_why_nothing_is_saved_and_its_json_agrees(tmp_path):
    """A new user's item 8: on Opus 4.5 `strip-thinking --dry-run` printed
    125,937 -> 125,937 with no reason while its --json said tokens_saved
    43,805. The saving is the plan's before - after, in the text and the
    JSON alike, and the plan says why it is nothing; where thinking counts
    (Sonnet 4.6) the saving stays, with no such line."""
    for rel, counts in ((SONNET_4_5, False), (SONNET_4_6, True)):
        f = _copy(rel, tmp_path / rel[:12])
        args = [TXDB, "strip-thinking", str(f), "--db", str(tmp_path / rel[:12] / "c.db"), "--dry-run"]
        text = subprocess.run(args, cwd=tmp_path, capture_output=True, text=True, timeout=300)
        rep = json.loads(subprocess.run(args + ["--json"], cwd=tmp_path, capture_output=True, text=True,
                                        timeout=300).stdout)
        saved = rep["result"]["tokens_saved"]
        said = "the API does not count thinking on claude-sonnet-4-5-20250929"
        if counts:
            assert saved > 0.3 * rep["tokens_before"] and said not in text.stdout
        else:
            assert rep["result"]["blocks"] > 0 and saved == 0, rep["result"]
            assert rep["tokens_before"] == rep["tokens_after"]
            assert said in text.stdout, text.stdout


@pytest.mark.parametrize("model, counted", [
    ("claude-sonnet-4-5-20250929", False), ("claude-sonnet-4-20250514", False),
    ("claude-opus-4-5-20251101", False), ("claude-opus-4-1-20250805", False),
    ("claude-haiku-4-5-20251001", False), ("claude-3-7-sonnet-20250219", False), ("claude-2.1", False),
    ("anthropic.claude-sonnet-4-5-20250929-v1:0", False), ("claude-sonnet-4-5@20250929", False),
    ("claude-sonnet-4-6", True), ("claude-opus-4-6[1m]", True), ("claude-opus-4-7", True),
    ("claude-opus-5", True), ("claude-opus-5-5", True), ("claude-test", True), (None, True),
])
def test_which_models_count_thinking(model, counted):
    assert estimate.counts_thinking(model) is counted


def test_an_opus_4_5_session_is_shown_near_its_gauge(tmp_path):
    """b3edadab (Opus 4.5, tests/data) read 25,263 against the 22,454 its last
    turn recorded (+12.5%): its last reply's thinking, 3,031 tokens of
    signature, priced as context the API does not count on that model. Now
    the estimate is the gauge plus that reply's text."""
    src = Path(__file__).resolve().parent / "data" / "projects" / "-Users-user-project"
    proj = tmp_path / "projects" / src.name
    shutil.copytree(src, proj)
    conn = db.connect(tmp_path / "c.db")
    refresh(conn, [tmp_path / "projects"])
    (fid,) = conn.execute("SELECT f.id FROM files f JOIN sessions s ON s.file_id = f.id "
                          "WHERE s.session_id = 'b3edadab-bca0-4054-9b41-f7ffa6941260'").fetchone()
    rep = estimate.session_estimate(conn, fid)
    conn.close()
    assert rep["recorded_last"] == 22_454
    assert rep["recorded_last"] <= rep["calibrated"] <= 1.05 * rep["recorded_last"], rep


def test_rescue_measures_as_the_plan_and_moves_no_thinking_that_counts_for_nothing(tmp_path):
    """rescue measured its steps on the chain with all its thinking (70,104
    where the plan's estimate says 58,207 on this Sonnet 4.5 session), and
    its persist-thinkings step moved 48 blocks the API never counted,
    leaving markers that do count (+7,886)."""
    path = _copy(SONNET_4_5, tmp_path)
    p = subprocess.run([TXDB, "rescue", str(path), "--db", str(tmp_path / "c.db"), "--target", "30000",
                        "--dry-run", "--json"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    rep = json.loads(p.stdout)
    res = rep["result"]
    assert res["tokens_start"] == rep["tokens_before"]
    assert res["reached"] and rep["tokens_after"] <= 30_000
    assert "persist-thinkings" not in [s["step"] for s in res["steps"]], res["steps"]
    before = [s["tokens_after"] for s in res["steps"]]
    assert before == sorted(before, reverse=True)  # every step lowers the estimate


def test_analyze_says_how_much_thinking_it_left_out(tmp_path):
    """The raw line showed the chain's 41,255 (41,787 since each block's
    envelope is its kind's and each message has its wrapper) beside an estimate fitted on
    32,149 of it, with nothing to say why."""
    path = _copy(SONNET_4_5, tmp_path)
    p = subprocess.run([TXDB, "analyze", str(path), "--db", str(tmp_path / "c.db")],
                       cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    line = next(x for x in p.stdout.splitlines() if x.startswith("Raw chars/4:"))
    assert "chain 41,787" in line and "9,106 of it thinking the request does not count" in line, line


def test_the_breakdown_gives_thinking_that_does_not_count_no_share():
    """The session page's table scaled the thinking row like any other: on
    a Sonnet 4.5 session, 19% of a context the API never filled with it."""
    from txdb.catalog.estimate import FITTED, scale_breakdown

    rows = [{"category": "tool_result", "items": 44, "tokens": 17_104},
            {"category": "thinking", "items": 48, "tokens": 8_530},
            {"category": "envelope", "items": 150, "tokens": 2_616}]
    out = {r["category"]: r for r in scale_breakdown(rows, 50_000, 1.3, unsent=8_530 + 48 * 12)}
    assert out["thinking"]["tokens"] == 0 and out["thinking"]["raw_tokens"] == 8_530
    assert out["tool_result"]["tokens"] == round(1.3 * 17_104)
    assert out["envelope"]["tokens"] == round(1.3 * (2_616 - 48 * 12))
    assert sum(r["tokens"] for r in out.values()) == 50_000 and out[FITTED]["tokens"] > 0


def test_the_session_page_gives_thinking_that_does_not_count_no_share(tmp_path):
    from txdb.web.session import load_session

    _copy(SONNET_4_5, tmp_path)
    conn = db.connect(tmp_path / "c.db")
    refresh(conn, [tmp_path / "projects"])
    (fid,) = conn.execute("SELECT id FROM files").fetchone()
    page = load_session(conn, fid, 0, 50)
    conn.close()
    rows = {r["category"]: r for r in page["by_type"]}
    assert rows["thinking"]["raw_tokens"] > 8_000 and rows["thinking"]["tokens"] == 0, rows["thinking"]
    assert page["breakdown_tokens"] == 58_175  # the headline estimate (58,200 sent: bench_truth)
