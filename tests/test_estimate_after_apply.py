"""Issue 19: after an apply, until a turn is recorded, the catalog's estimate
(`sessions`' est_context_tokens) is the one the plan showed (tokens_after):
the fit the pass used, logged on its surgeries row, applied to the new chain."""
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
from txdb.catalog import db, estimate  # noqa: E402
from txdb.cli import cli  # noqa: E402
from txdb.catalog.ingest.store import refresh  # noqa: E402
from txdb.model.records import now_timestamp  # noqa: E402

CASES = [
    ("persist-tools", "real/marot-spotter/4d5611e5-241a-462a-8d15-5122611a9569.jsonl"),
    ("strip-all", "real/4thehalibit-omarchy-backup/-home-vwestberg-Claude/"
                  "1fb5e404-604d-4a2b-baf1-3beb42a67371.jsonl"),
    ("strip-all", "generated/-home-user-src-demo-1/91f27d20-32b7-42f9-8096-f776eb39baf6.jsonl"),
    ("persist-tools", "generated/-home-user-src-demo-1/91f27d20-32b7-42f9-8096-f776eb39baf6.jsonl"),
]


def run(*args):
    r = CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return r


def _copy(tmp_path: Path, rel: str) -> Path:
    src = session_path(rel)
    if not src.is_file():
        pytest.skip("corpus session missing")
    proj = tmp_path / "cfg" / "projects" / src.parent.name
    proj.mkdir(parents=True)
    shutil.copyfile(src, proj / src.name)
    side = src.with_suffix("")
    if side.is_dir():
        shutil.copytree(side, proj / side.name)
    return proj / src.name


def _estimate(conn, f: Path) -> tuple[int, str]:
    return conn.execute("SELECT s.est_context_tokens, s.est_method FROM sessions s JOIN files fi "
                        "ON fi.id = s.file_id WHERE fi.path = ?", (str(f),)).fetchone()


@pytest.mark.parametrize("command,rel", CASES, ids=[f"{c}-{r.split('/')[-1][:8]}" for c, r in CASES])
def test_sessions_shows_the_plans_estimate_after_apply(tmp_path, command, rel):
    f = _copy(tmp_path, rel)
    dbp = tmp_path / "catalog.db"
    run("refresh", "--root", f.parent.parent, "--db", dbp)
    conn = db.connect(dbp)
    before, _ = _estimate(conn, f)
    run(command, f, "--db", dbp)
    run("apply", f, "--db", dbp)
    planned_before, planned = conn.execute(
        "SELECT tokens_before, tokens_after FROM surgeries ORDER BY id DESC LIMIT 1").fetchone()
    assert planned_before == before  # the plan started from the figure `sessions` showed
    assert planned < before
    shown, method = _estimate(conn, f)
    assert shown == planned and method in ("lsq", "anchor")  # the file's own figures: its reset last turn the anchor
    # `txdb sessions` prints that figure
    listed = orjson.loads(run("sessions", "--db", dbp).output)
    assert [r["est_context_tokens"] for r in listed if r["path"] == str(f)] == [planned]
    assert "Turns left out of the fit" in run("analyze", f, "--db", dbp).output
    # a turn recorded after the surgery measured the new chain: it calibrates again
    lines = [orjson.loads(r) for r in f.read_bytes().splitlines()]
    parent = next(d for d in reversed(lines) if d.get("type") in ("user", "assistant") and d.get("uuid"))
    new = {"type": "assistant", "uuid": "new-turn-0001", "parentUuid": parent["uuid"], "isSidechain": False,
           "sessionId": parent.get("sessionId"), "timestamp": now_timestamp(),
           "message": {"id": "msg_new_turn", "role": "assistant", "model": "claude-sonnet-4-5",
                       "content": [{"type": "text", "text": "ok"}],
                       "usage": {"input_tokens": 3, "cache_read_input_tokens": planned + 1_000,
                                 "cache_creation_input_tokens": 10, "output_tokens": 2}}}
    with open(f, "ab") as fh:
        fh.write(orjson.dumps(new) + b"\n")
    refresh(conn, [f.parent.parent])
    shown, method = _estimate(conn, f)
    # anchored on it: its recorded figure plus the few tokens of the turn itself
    assert method != "logged" and abs(shown - (planned + 1_013)) <= 0.01 * planned


def _figures(f: Path, dbp: Path) -> dict:
    """The estimate of ``f`` as analyze, sessions and a rescue plan print it."""
    a = orjson.loads(run("analyze", f, "--json", "--db", dbp).output)["estimate"]["calibrated"]
    rows = orjson.loads(run("sessions", "--json", "--db", dbp).output)
    s = next(r["est_context_tokens"] for r in rows if r["path"] == str(f))
    plan = orjson.loads(run("rescue", f, "--dry-run", "--json", "--target", 1_000_000, "--db", dbp).output)
    return {"analyze": a, "sessions": s, "rescue": plan["result"]["tokens_start"], "plan": plan["tokens_before"]}


def test_rescue_analyze_and_sessions_say_one_estimate_before_and_after(tmp_path):
    """Issue 19 (a new user's item 4): rescue's start was 635,265 where analyze
    said 635,290 (the engine priced task_reminders on no model, refresh on the
    session's, which has no task tools); after apply the plan's 47,697 was
    46,594 in analyze, and a second `rescue --dry-run` said 52,934 (refitted
    on the few turns the rescue left unstale, not the logged fit)."""
    f = _copy(tmp_path, "real/hannibal8856-claude_backup/-home-moxa-sdc1-home-moxa-mds4xgl3-buildroot-dl/"
                        "d8fbf478-f4fe-4f9b-b738-eb5019b102dd.jsonl")
    dbp = tmp_path / "catalog.db"
    run("refresh", "--root", f.parent.parent, "--db", dbp)
    before = _figures(f, dbp)
    assert len(set(before.values())) == 1, before
    rep = orjson.loads(run("rescue", f, "--target", 50_000, "--apply", "--json", "--db", dbp).output)
    planned = rep["surgery"]["tokens_after"]
    assert planned < 50_000 < before["analyze"]
    after = _figures(f, dbp)
    assert set(after.values()) == {planned}, (planned, after)
    # and so the rescue, run again, has nothing to do
    again = orjson.loads(run("rescue", f, "--dry-run", "--json", "--target", 50_000, "--db", dbp).output)
    assert again["changed_lines"] == 0 and again["tokens_after"] == planned


def test_analyzes_calibration_line_reads_as_arithmetic_and_names_no_unknown_system_prompt(tmp_path):
    """A new user's item 17: analyze printed `1.9463 x chars/4 + -43,252`
    and `system prompt 0` for every session whose file records none (the
    overhead stands for it): a negative overhead reads `- 43,252`, and a
    system prompt is named only with the figure a snapshot gave."""
    real = _copy(tmp_path / "a", "real/hannibal8856-claude_backup/-home-moxa-sdc1-home-moxa-mds4xgl3-buildroot-dl/"
                                  "d8fbf478-f4fe-4f9b-b738-eb5019b102dd.jsonl")
    made = Path(__file__).parent / "data/generated/-home-user-src-demo-9/b88a7a83-a643-4c78-b0b0-bae40b5e91ae.jsonl"
    proj = tmp_path / "b" / "cfg" / "projects" / made.parent.name
    proj.mkdir(parents=True)
    shutil.copyfile(made, proj / made.name)
    seen = []
    for f in (real, proj / made.name):
        dbp = f.parent.parent.parent / "catalog.db"
        run("refresh", "--root", f.parent.parent, "--db", dbp)
        rep = orjson.loads(run("analyze", f, "--json", "--db", dbp).output)
        e, sp = rep["estimate"], rep["session"]["system_prompt_tokens"]
        seen.append((e["overhead"], sp))
        text = run("analyze", f, "--db", dbp).output
        line = next(ln for ln in text.splitlines() if ln.startswith("Estimated context:"))
        sign = "-" if e["overhead"] < 0 else "+"
        assert f"x chars/4 {sign} {abs(e['overhead']):,})" in line and "+ -" not in line, line
        raw = next(ln for ln in text.splitlines() if ln.startswith("Raw chars/4:"))
        if sp:
            assert f"system prompt {sp:,})" in raw, raw
        else:
            assert "system prompt 0" not in raw and "records no system prompt" in raw, raw
    # the overhead is bounded below (it once read -43,252); the CLI-made one records a snapshot
    assert seen[0][0] >= estimate.EMPTY_SESSION_OVERHEAD and seen[0][1] == 0 and seen[1][1] > 0, seen


def test_a_grown_files_attachments_are_priced_on_the_sessions_model(tmp_path):
    """A task_reminder costs nothing on a model without the task tools
    (policy.has_task_tools). Refresh priced a grown file's new lines on no
    model until their first assistant turn (115 tokens for an empty
    reminder), so the catalog's estimate of a live session depended on when
    it was read, and differed from a surgery's (which prices every
    attachment on the session's model): one rule, records.session_model."""
    from sessions import append, assistant, attachment, user, write
    from txdb.surgery.usage import context_estimator
    from txdb.model.transcript import Transcript

    sid = "66666666-0000-0000-0000-000000000001"
    proj = tmp_path / "cfg" / "projects" / "-p"
    usage = {"input_tokens": 10, "cache_read_input_tokens": 5_000, "output_tokens": 5}
    u = user("first", session=sid)
    a = assistant("ok", u["uuid"], session=sid, model="claude-opus-5", usage=usage)
    f = write(proj / f"{sid}.jsonl", [u, a])
    dbp = tmp_path / "catalog.db"
    run("refresh", "--root", proj.parent, "--db", dbp)
    u2 = user("second", a["uuid"], session=sid)
    r = attachment({"type": "task_reminder", "content": [], "itemCount": 0}, u2["uuid"], session=sid)
    append(f, u2, r, assistant("ok again", r["uuid"], session=sid, model="claude-opus-5", usage=usage))
    run("refresh", "--root", proj.parent, "--db", dbp)  # read from its cursor
    conn = db.connect(dbp)
    grown = conn.execute("SELECT tokens FROM records WHERE uuid = ?", (r["uuid"],)).fetchone()[0]
    est = _estimate(conn, f)[0]
    conn.close()
    run("refresh", "--root", proj.parent, "--db", tmp_path / "fresh.db")
    conn = db.connect(tmp_path / "fresh.db")
    assert conn.execute("SELECT tokens FROM records WHERE uuid = ?", (r["uuid"],)).fetchone()[0] == grown == 0
    assert _estimate(conn, f)[0] == est
    conn.close()
    t = Transcript.load(f)
    assert context_estimator(t)(t) == est  # what a surgery's plan starts from
    # a pass sizes the records from the load's parse (ops.measure), before the
    # session's model is known: the reminder is priced on it all the same
    from txdb.surgery import ops
    measured = Transcript.load(f, measure=ops.measure)
    assert ops.chain_prefix_estimates(measured) == ops.chain_prefix_estimates(t)
    reminder = next(rec for rec in measured.records if rec.uuid == r["uuid"])
    assert ops.record_estimate(reminder) == grown
    assert context_estimator(measured)(measured) == est


def _pasted_session(tmp_path: Path) -> Path:
    """A real session (its usage billed by the API at ~1.45 tokens per
    chars/4 token) with a 1 MB prompt pasted after its last turn: a tail of
    ~250k raw tokens no turn measured."""
    src = session_path("real/hannibal8856-claude_backup/-home-moxa-sdc1-home-moxa-mds4xgl3-buildroot-dl/"
                       "9f11783a-9bf6-44b6-bc6e-65aadfb575ee.jsonl")
    if not src.is_file():
        pytest.skip("corpus session missing")
    f = tmp_path / "projects" / "-home-me-app" / src.name
    f.parent.mkdir(parents=True)
    data = src.read_bytes()
    last = [orjson.loads(x) for x in data.splitlines() if b'"uuid"' in x][-1]["uuid"]
    paste = {"parentUuid": last, "isSidechain": False, "userType": "external", "cwd": "/x", "sessionId": src.stem,
             "version": "2.1.328", "type": "user", "message": {"role": "user", "content": "x" * 1_000_000},
             "uuid": "dddddddd-0000-0000-0000-000000000002", "timestamp": "2026-07-30T10:00:00.000Z"}
    f.write_bytes(data + orjson.dumps(paste) + b"\n")
    return f


def _figures_line(output: str) -> tuple[int, int]:
    line = next(x for x in output.splitlines() if x.startswith("Estimated context: "))
    before, after = line.split(": ", 1)[1].split(" tokens", 1)[0].split(" -> ")
    return int(before.replace(",", "")), int(after.replace(",", ""))


def test_a_pass_that_only_shrinks_never_says_it_makes_the_context_larger(tmp_path):
    """Round 4 attack: a real session with a 1 MB pasted prompt after its
    last turn: strip-tools cleared 84 lines (the file 85 KB smaller, nothing
    added) and said the context grows by ~54,000 tokens: the result's 30
    stale turns bent its own fit (1.45 -> 1.78), which priced the unmeasured
    tail. The result is priced at the original's factor: the saving is what
    the strip removed at that factor, and `sessions` shows that figure after
    apply, in this catalog and in a fresh one (the row rebuilt from the
    swap journal), until anything else changes the file."""
    f = _pasted_session(tmp_path)
    path = tmp_path / "c.db"
    run("refresh", "--db", path, "--root", tmp_path / "projects")
    conn = db.connect(path)
    fid = conn.execute("SELECT id FROM files WHERE path = ?", (str(f),)).fetchone()[0]
    before = estimate.session_estimate(conn, fid)
    conn.close()
    r = run("strip-tools", f, "--db", path)
    assert len(f.with_name(f.name + ".pending").read_bytes()) < len(f.read_bytes())
    assert "makes the context larger" not in r.output
    shown_before, shown_after = _figures_line(r.output)
    assert shown_before == before["calibrated"]
    run("apply", f, "--db", path)
    run("refresh", "--db", path, "--root", tmp_path / "projects")
    conn = db.connect(path)
    after = estimate.session_estimate(conn, fid)
    assert after["factor_logged"] and _estimate(conn, f)[0] == after["calibrated"] == shown_after
    assert f"the factor the surgery that wrote this file logged: {before['factor']:g} x chars/4" in run(
        "analyze", f, "--db", path).output
    # the saving is the raw tokens the strip took off, at the original's factor
    removed = before["raw"] - after["raw"]
    assert removed > 15_000
    assert abs((shown_before - shown_after) - before["factor"] * removed) <= 0.005 * removed
    conn.close()
    run("refresh", "--db", tmp_path / "fresh.db", "--root", tmp_path / "projects")
    fresh = db.connect(tmp_path / "fresh.db")
    assert _estimate(fresh, f)[0] == shown_after
    fresh.close()
    # Another writer changes the file: its own figures again, as a fresh catalog of its bytes reads them.
    with open(f, "ab") as fh:
        fh.write(b'{"type":"summary","summary":"hand edit","leafUuid":"x"}\n')
    run("refresh", "--db", path, "--root", tmp_path / "projects")
    conn = db.connect(path)
    edited = estimate.session_estimate(conn, fid)
    assert not edited["factor_logged"]
    shutil.copytree(tmp_path / "projects", tmp_path / "bare" / "projects")
    (tmp_path / "bare" / "projects" / "-home-me-app" / (f.name + ".swaps.json")).unlink()
    run("refresh", "--db", tmp_path / "bare.db", "--root", tmp_path / "bare" / "projects")
    bare = db.connect(tmp_path / "bare.db")
    assert _estimate(bare, tmp_path / "bare" / "projects" / "-home-me-app" / f.name)[0] == edited["calibrated"]


@pytest.mark.parametrize("factor,priced", [(1.3, 1.3), (1e9, estimate.FACTOR_RANGE[1]), (-4.0, estimate.FACTOR_RANGE[0]),
                                           (float("inf"), None), (float("nan"), None), (None, None), (True, None)])
def test_a_logged_factor_is_held_to_the_plausible_range(factor, priced):
    """A journal may be forged: a factor out of range prices at its bound,
    one that is not a number leaves the session's own fit."""
    own = estimate.Fit(overhead=10_000.0, factor=1.1, method="lsq", anchor_estimate=5_000.0, anchor_recorded=15_500.0)
    f = estimate.at_factor(own, factor)
    assert f.factor == (own.factor if priced is None else priced)
    assert estimate.predict(f, 5_000.0) == 15_500  # through the session's own anchor
