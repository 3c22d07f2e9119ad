"""Cost in USD: each API message once (billed_usage), priced by the price
library (genai-prices) through the catalog's `prices` table, in plain SQL
views, re-priced when the library changes, and `txdb cost`."""

from __future__ import annotations

import json
import shutil
from datetime import datetime
from pathlib import Path

import pytest
from genai_prices import Usage, calc_price

from conftest import run
from sessions import DATA
from txdb.catalog import cost, db
from txdb.catalog.ingest.store import refresh

SID = "c0570000-0000-4000-8000-000000000001"


def _tag(session: str) -> str:
    """Another session's API messages have their own ids (an id is one API
    call whichever file holds it)."""
    return "" if session == SID else f"_{session[-4:]}"


def _msg(i: int, model: str, when: str, inp: int, out: int, read: int = 0, write: int = 0, write_1h: int = 0,
         session: str = SID) -> list[dict]:
    """A prompt and one API message with these figures (the 1-hour part of
    the cache write in usage.cache_creation, as the API reports it)."""
    usage = {"input_tokens": inp, "output_tokens": out, "cache_read_input_tokens": read,
             "cache_creation_input_tokens": write,
             "cache_creation": {"ephemeral_5m_input_tokens": write - write_1h, "ephemeral_1h_input_tokens": write_1h}}
    return [
        {"type": "user", "uuid": f"u{i}", "parentUuid": f"a{i - 1}" if i else None, "sessionId": session,
         "timestamp": when, "message": {"role": "user", "content": f"question {i}"}},
        {"type": "assistant", "uuid": f"a{i}", "parentUuid": f"u{i}", "sessionId": session,
         "requestId": f"req_{i}{_tag(session)}", "timestamp": when,
         "message": {"id": f"msg_{i}{_tag(session)}", "role": "assistant", "model": model,
                     "content": [{"type": "text", "text": "ok"}], "usage": usage}},
    ]


def _write(projects: Path, *msgs: list[dict], session: str = SID, project: str = "-home-me-app") -> Path:
    folder = projects / project
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{session}.jsonl"
    with open(path, "a") as fh:
        for m in msgs:
            for o in m:
                fh.write(json.dumps(o, separators=(",", ":")) + "\n")
    return path


def _library_price(model, when, inp, out, read=0, write=0, write_1h=0) -> float:
    """What genai-prices itself charges for one message (its own usage
    semantics: input_tokens counts every input token, cached or not)."""
    usage = Usage(input_tokens=inp + read + write, output_tokens=out, cache_read_tokens=read,
                  cache_write_tokens=write, cache_write_5m_tokens=write - write_1h, cache_write_1h_tokens=write_1h)
    at = datetime.fromisoformat(when.replace("Z", "+00:00"))
    return float(calc_price(usage, model, provider_id="anthropic", genai_request_timestamp=at).total_price)


# (model, timestamp, input, output, cache read, cache write, of which 1 hour)
MESSAGES = [
    ("claude-sonnet-4-5-20250929", "2026-01-05T10:30:00.000Z", 12, 800, 40_000, 3_000, 0),
    ("claude-sonnet-4-5-20250929", "2026-01-05T11:00:00.000Z", 8, 500, 43_000, 2_000, 1_500),  # 1-hour writes
    ("claude-sonnet-4-5-20250929", "2026-01-06T09:00:00.000Z", 5, 900, 230_000, 1_000, 0),  # over 200k: long tier
    ("claude-opus-4-6", "2026-03-01T09:00:00.000Z", 5, 700, 250_000, 500, 0),  # tiered then ...
    ("claude-opus-4-6", "2026-03-20T09:00:00.000Z", 5, 700, 250_000, 500, 0),  # ... flat from 2026-03-13
    ("claude-haiku-4-5-20251001", "2026-03-20T09:05:00.000Z", 100, 50, 0, 0, 0),
]


@pytest.fixture
def priced(tmp_path):
    projects = tmp_path / "projects"
    _write(projects, *(_msg(i, *m) for i, m in enumerate(MESSAGES)))
    conn = db.connect(tmp_path / "c.db")
    refresh(conn, [projects])
    return conn, projects, tmp_path / "c.db"


def test_each_message_costs_what_the_price_library_charges(priced):
    """Cache reads, 5-minute and 1-hour cache writes, the long-context tier
    and a dated price change: the SQL view's figure is the library's own."""
    conn, _, _ = priced
    got = dict(conn.execute("SELECT message_id, cost_usd FROM billed_cost"))
    for i, m in enumerate(MESSAGES):
        assert got[f"msg_{i}"] == pytest.approx(_library_price(*m), rel=1e-9, abs=1e-12), m
    # The tiers and the 1-hour rate are real differences, not rounding.
    assert got["msg_3"] > 1.5 * got["msg_4"]  # same tokens, priced before and after opus-4-6 went flat
    total = sum(_library_price(*m) for m in MESSAGES)
    for view in ("usage_by_day", "usage_by_model", "session_usage", "usage_blocks", "session_costs"):
        assert conn.execute(f"SELECT sum(cost_usd) FROM {view}").fetchone()[0] == pytest.approx(total, rel=1e-6), view
    day = conn.execute("SELECT cost_usd FROM usage_by_day WHERE day = '2026-01-05'").fetchone()[0]
    assert day == pytest.approx(_library_price(*MESSAGES[0]) + _library_price(*MESSAGES[1]), rel=1e-6)


def test_an_unknown_model_is_unpriced_never_free(tmp_path):
    projects = tmp_path / "projects"
    _write(projects, _msg(0, "claude-sonnet-4-5-20250929", "2026-01-05T10:00:00.000Z", 10, 100, 1000, 0),
           _msg(1, "qwen3:8b", "2026-01-05T10:05:00.000Z", 2_000, 400))
    conn = db.connect(tmp_path / "c.db")
    refresh(conn, [projects])
    assert conn.execute("SELECT cost_usd FROM billed_cost WHERE model = 'qwen3:8b'").fetchone() == (None,)
    assert conn.execute("SELECT cost_usd, unpriced_messages FROM usage_by_model WHERE model = 'qwen3:8b'"
                        ).fetchone() == (None, 1)
    # A day with both: the priced part, and the count of what it leaves out.
    day = conn.execute("SELECT cost_usd, unpriced_messages FROM usage_by_day").fetchall()
    assert len(day) == 2 and all(c is None or c > 0 for c, _ in day)
    report = json.loads(run("cost", "--db", str(tmp_path / "c.db"), "--by", "day", "--json", ok=True).output)
    assert report["rows"][0]["unpriced_messages"] == 1 and report["rows"][0]["cost_usd"] > 0
    assert report["unpriced_models"] == [{"model": "qwen3:8b", "api_messages": 1, "total_tokens": 2_400,
                                          "resembles": None, "why": "not a model the price library knows"}]


def test_a_range_of_unpriced_messages_only_is_unpriced_and_an_empty_one_free(tmp_path):
    projects = tmp_path / "projects"
    _write(projects, _msg(0, "qwen3:8b", "2026-01-05T10:00:00.000Z", 2_000, 400),
           _msg(1, "claude-sonnet-4-5-20250929", "2026-01-07T10:00:00.000Z", 10, 100))
    db_path = str(tmp_path / "c.db")
    run("refresh", "--db", db_path, "--root", projects, ok=True)
    for by in ("day", "session", "project", "model", "block"):
        only = ("--by", by, "--since", "2026-01-05", "--until", "2026-01-05")
        rep = json.loads(run("cost", "--db", db_path, "--json", *only, ok=True).output)
        assert rep["total"]["cost_usd"] is None and rep["total"]["unpriced_messages"] == 1, by
        assert "Total: unpriced over 1 API messages" in run("cost", "--db", db_path, "--table", *only, ok=True).output
        none = ("--by", by, "--since", "2026-01-06", "--until", "2026-01-06")
        rep = json.loads(run("cost", "--db", db_path, "--json", *none, ok=True).output)
        assert rep["total"]["cost_usd"] == 0 and rep["total"]["api_messages"] == 0, by
        out = run("cost", "--db", db_path, "--table", *none, ok=True).output
        assert "Total: $0.00 over 0 API messages" in out and "unpriced" not in out, by


def test_a_new_library_version_reprices_every_figure_without_a_reingest(priced):
    """Cost is computed from stored tokens: when the installed library is not
    the one the prices came from, the next open copies its prices again and
    every view follows; no session file is read again."""
    conn, _, path = priced
    right = conn.execute("SELECT sum(cost_usd) FROM usage_by_model").fetchone()[0]
    files = conn.execute("SELECT id, refreshed_at, cursor FROM files").fetchall()
    conn.execute("UPDATE prices SET library_version = '0.0.1', input_mtok = input_mtok * 1000, "
                 "cache_read_mtok = cache_read_mtok * 1000")
    assert conn.execute("SELECT sum(cost_usd) FROM usage_by_model").fetchone()[0] > 10 * right  # views read the table
    conn.close()
    conn = db.connect(path)
    assert {r[0] for r in conn.execute("SELECT library_version FROM prices")} == {cost.installed_version()}
    assert conn.execute("SELECT sum(cost_usd) FROM usage_by_model").fetchone()[0] == pytest.approx(right, rel=1e-12)
    assert conn.execute("SELECT id, refreshed_at, cursor FROM files").fetchall() == files


def test_a_model_new_to_the_catalog_is_priced_by_the_refresh_that_brings_it(priced):
    conn, projects, _ = priced
    other = "c0570000-0000-4000-8000-000000000002"
    _write(projects, _msg(0, "claude-opus-4-5-20251101", "2026-02-01T08:00:00.000Z", 10, 100, 5000, 200,
                          session=other), session=other)
    refresh(conn, [projects])
    got = conn.execute("SELECT cost_usd FROM billed_cost WHERE model = 'claude-opus-4-5-20251101'").fetchone()[0]
    assert got == pytest.approx(_library_price("claude-opus-4-5-20251101", "2026-02-01T08:00:00.000Z",
                                               10, 100, 5000, 200), rel=1e-9)


def test_usage_blocks_are_ccusages_five_hour_blocks(tmp_path):
    """A block starts at its first message's hour and holds what follows
    within 5 hours of that start; the next message starts the next one."""
    projects = tmp_path / "projects"
    times = ["2026-01-05T10:30:00.000Z", "2026-01-05T12:00:00.000Z", "2026-01-05T15:00:00.000Z",
             "2026-01-05T15:20:00.000Z", "2026-01-06T02:10:00.000Z"]
    _write(projects, *(_msg(i, "claude-haiku-4-5-20251001", t, 100, 10) for i, t in enumerate(times)))
    conn = db.connect(tmp_path / "c.db")
    refresh(conn, [projects])
    blocks = conn.execute("SELECT block_start, block_end, api_messages, first_timestamp, is_active "
                          "FROM usage_blocks ORDER BY block_start").fetchall()
    assert blocks == [
        ("2026-01-05T10:00:00.000Z", "2026-01-05T15:00:00.000Z", 3, times[0], 0),
        ("2026-01-05T15:00:00.000Z", "2026-01-05T20:00:00.000Z", 1, times[3], 0),
        ("2026-01-06T02:00:00.000Z", "2026-01-06T07:00:00.000Z", 1, times[4], 0),
    ]


def test_cost_report_groups_filters_and_names_its_prices(priced):
    conn, _, path = priced
    db_ = ["--db", str(path)]
    by = {}
    for group in ("day", "week", "month", "project", "model", "session"):
        by[group] = json.loads(run("cost", *db_, "--by", group, "--json", ok=True).output)
    total = conn.execute("SELECT sum(cost_usd) FROM billed_cost").fetchone()[0]
    for group, rep in by.items():
        assert sum(r["cost_usd"] for r in rep["rows"]) == pytest.approx(total, rel=1e-6), group
        assert rep["total"]["cost_usd"] == pytest.approx(total, rel=1e-6)
        assert rep["prices"] == {"library": "genai-prices", "version": cost.installed_version(),
                                 "data_date": cost.data_date()}
    assert [r["day"] for r in by["day"]["rows"]] == ["2026-01-05", "2026-01-06", "2026-03-01", "2026-03-20"]
    assert [r["week"] for r in by["week"]["rows"]] == ["2026-01-05", "2026-02-23", "2026-03-16"]  # Mondays
    assert [r["month"] for r in by["month"]["rows"]] == ["2026-01", "2026-03"]
    assert [r["project"] for r in by["project"]["rows"]] == ["-home-me-app"]
    since = json.loads(run("cost", *db_, "--since", "20260310", "--json", ok=True).output)
    assert [r["day"] for r in since["rows"]] == ["2026-03-20"]
    assert since["total"]["api_messages"] == 2
    r = run("cost", *db_, "--since", "March")
    assert r.exit_code == 2 and "Error: Invalid value for '--since'" in r.output and "Traceback" not in r.output


def test_sessions_sort_by_cost(tmp_path):
    projects = tmp_path / "projects"
    cheap, dear = "c0570000-0000-4000-8000-00000000000a", "c0570000-0000-4000-8000-00000000000b"
    _write(projects, _msg(0, "claude-haiku-4-5-20251001", "2026-01-05T10:00:00.000Z", 10, 10, session=cheap),
           session=cheap)
    _write(projects, _msg(0, "claude-opus-4-1-20250805", "2026-01-04T10:00:00.000Z", 10, 900, 9000, session=dear),
           session=dear)
    run("refresh", "--db", str(tmp_path / "c.db"), "--root", str(projects), ok=True)
    rows = json.loads(run("sessions", "--db", str(tmp_path / "c.db"), "--sort", "cost", "--json", ok=True).output)
    assert [r["session_id"] for r in rows] == [dear, cheap]
    assert rows[0]["cost_usd"] > rows[1]["cost_usd"] > 0


def test_the_clis_own_figure_sits_beside_the_computed_one(tmp_path):
    """cost-state's totalCostUSD (the CLI's running total, carried across
    --resume) equals the computed cost of a CLI-made session; a compacted
    one is higher: the CLI counts the summarisation request, which the
    transcript does not hold."""
    projects = tmp_path / "projects"
    shutil.copytree(DATA / "generated", projects)
    run("refresh", "--db", str(tmp_path / "c.db"), "--root", str(projects), ok=True)
    rows = {r["session"]: r for r in json.loads(
        run("cost", "--db", str(tmp_path / "c.db"), "--by", "session", "--json", ok=True).output)["rows"]}
    plain = rows["5a73f7d9-de47-4921-a60f-d1c8c68135c5"]
    assert plain["cli_cost_usd"] == pytest.approx(plain["cost_usd"], abs=1e-6)
    compacted = rows["b88a7a83-a643-4c78-b0b0-bae40b5e91ae"]
    assert compacted["cli_cost_usd"] > compacted["cost_usd"] * 1.2
    # Its runs (one cost-state line each, as each `claude -p --resume` ends)
    # keep the first run's startTime and a total that only grows.
    states = [json.loads(line) for line in next(projects.rglob("b88a7a83-*.jsonl")).read_text().splitlines()
              if '"type":"cost-state"' in line]
    assert len(states) > 3 and len({s["startTime"] for s in states}) == 1
    totals = [s["totalCostUSD"] for s in states]
    assert totals == sorted(totals) and totals[-1] == compacted["cli_cost_usd"]


@pytest.fixture(scope="module")
def beside_ccusage(tmp_path_factory):
    """The corpus in Claude Code's layout, ccusage's command, and a catalog of it."""
    from test_ccusage_agreement import CORPUS, ccusage_command, lay_out

    if not CORPUS.is_dir():
        pytest.skip("../shared/corpus is absent (only present on the developers' machines)")
    cmd = ccusage_command()
    tmp = tmp_path_factory.mktemp("ccusage-cost")
    projects = tmp / "cfg" / "projects"
    lay_out([CORPUS / "real", CORPUS / "generated"], projects)
    conn = db.connect(tmp / "c.db")
    refresh(conn, [projects])
    yield tmp, cmd, conn
    conn.close()


def test_daily_cost_agrees_with_ccusage_where_the_tokens_agree(beside_ccusage):
    """`ccusage daily --offline` per (day, model), against usage_by_day:
    wherever both count the same four token figures, the costs agree within
    1%. Where ccusage's offline prices lack a model it reports $0; txdb
    prices it from genai-prices, or calls it unpriced (never $0)."""
    from test_ccusage_agreement import CCUSAGE_FIELDS, run_ccusage

    tmp, cmd, conn = beside_ccusage
    daily = run_ccusage(cmd, tmp, "daily")
    ours = {(d, m): (tuple(r[:4]), r[4]) for d, m, *r in conn.execute(
        "SELECT day, model, input_tokens, output_tokens, cache_creation_input_tokens, cache_read_input_tokens, "
        "cost_usd FROM usage_by_day")}
    agree, free = [], []
    for d in daily["daily"]:
        for m in d["modelBreakdowns"]:
            key = (d["period"], m["modelName"])
            tokens, our_cost = ours.get(key, (None, None))
            if tokens != tuple(m[k] for k in CCUSAGE_FIELDS) or not any(tokens):
                continue
            if m["cost"] == 0:
                free.append((key, our_cost))
                continue
            agree.append(key)
            assert our_cost == pytest.approx(m["cost"], rel=0.01), (key, our_cost, m["cost"])
    assert len(agree) >= 30
    # What ccusage calls free: a model its offline prices lack; here priced by the library or unpriced.
    assert free and all(c is None or c > 0 for _, c in free), free
    unknown = {m for (_, m), c in free if c is None}
    assert unknown <= {r[0] for r in conn.execute("SELECT model FROM prices WHERE priced_as IS NULL")}


def test_usage_blocks_are_the_blocks_ccusage_shows(beside_ccusage):
    """`ccusage blocks --offline`: the same block starts and ends; where a
    block's tokens agree, its cost agrees within 1% (ccusage pricing it)."""
    from test_ccusage_agreement import run_ccusage

    tmp, cmd, conn = beside_ccusage
    theirs = {b["startTime"]: b for b in run_ccusage(cmd, tmp, "blocks")["blocks"] if not b.get("isGap")}
    ours = {r[0]: r for r in conn.execute(
        "SELECT block_start, block_end, input_tokens, output_tokens, cache_creation_input_tokens, "
        "cache_read_input_tokens, cost_usd FROM usage_blocks")}
    assert sorted(ours) == sorted(theirs) and len(ours) > 20
    agree = 0
    for start, (_, end, *tokens, our_cost) in ours.items():
        b = theirs[start]
        assert end == b["endTime"]
        t = b["tokenCounts"]
        if tuple(tokens) == (t["inputTokens"], t["outputTokens"], t["cacheCreationInputTokens"],
                             t["cacheReadInputTokens"]) and b["costUSD"] > 0:
            agree += 1
            assert our_cost == pytest.approx(b["costUSD"], rel=0.01), start
    assert agree > 30


def test_the_datasette_front_page_names_the_price_library_and_its_date(priced):
    import asyncio

    from txdb.web.metadata import make_datasette

    conn, _, path = priced
    conn.close()

    async def front():
        ds = make_datasette(path)
        await ds.invoke_startup()
        r = await ds.client.get("/")
        return r.status_code, r.text

    status, html = asyncio.run(front())
    assert status == 200
    assert f"genai-prices {cost.installed_version()}, prices dated up to {cost.data_date()}" in html


def test_cost_by_session_names_the_sessions_txdb_sessions_lists_with_their_titles(tmp_path):
    """Lines carrying another sessionId (a session continued from another)
    count under the session `txdb sessions` lists, titled; a cost under a
    cent shows 4 significant digits, never $0.00; the sessions table shows
    dollars to the cent while JSON keeps the full figure; --csv and --nl
    print the rows."""
    projects = tmp_path / "projects"
    dear, cheap, other = ("c0570000-0000-4000-8000-0000000000d1", "c0570000-0000-4000-8000-0000000000c1",
                          "c0570000-0000-4000-8000-0000000000e1")
    first = _msg(0, "claude-opus-4-1-20250805", "2026-01-04T10:00:00.000Z", 10, 900, 9000, session=dear)
    later = _msg(1, "claude-opus-4-1-20250805", "2026-01-04T11:00:00.000Z", 10, 500, 9000, session=other)
    _write(projects, first, later, session=dear)
    _write(projects, _msg(0, "claude-haiku-4-5-20251001", "2026-01-05T10:00:00.000Z", 100, 300, session=cheap),
           session=cheap)
    db_ = ["--db", str(tmp_path / "c.db")]
    run("refresh", *db_, "--root", str(projects), ok=True)
    listed = {r["session_id"]: r for r in json.loads(run("sessions", *db_, "--json", ok=True).output)}
    assert set(listed) == {dear, cheap}
    rep = json.loads(run("cost", *db_, "--by", "session", "--json", ok=True).output)
    rows = {r["session"]: r for r in rep["rows"]}
    assert set(rows) == {dear, cheap}
    assert rows[dear]["api_messages"] == 2 and rows[dear]["title"] == "question 0"
    assert rows[dear]["cost_usd"] == pytest.approx(listed[dear]["cost_usd"])
    small = rows[cheap]["cost_usd"]
    assert 0 < small < 0.01
    table = run("cost", *db_, "--by", "session", "--table", ok=True).output
    import re
    shown = re.findall(r"\$(0\.00\d+)", table)
    assert shown and float(shown[0]) == pytest.approx(small, rel=1e-3)  # 4 significant digits
    assert len(shown[0].lstrip("0.")) == 4 and "$0.00 " not in table
    assert "question 0" in table and other not in table
    sessions_table = run("sessions", *db_, "--table", ok=True).output
    assert f"${listed[dear]['cost_usd']:,.2f}" in sessions_table
    assert str(listed[dear]["cost_usd"]) not in sessions_table  # the full figure stays in JSON
    csv_lines = run("cost", *db_, "--by", "session", "--csv", ok=True).output.splitlines()
    assert csv_lines[0].startswith("session,") and len(csv_lines) == 3
    nl = [json.loads(line) for line in run("cost", *db_, "--by", "session", "--nl", ok=True).output.splitlines()]
    assert {r["session"] for r in nl} == {dear, cheap}

