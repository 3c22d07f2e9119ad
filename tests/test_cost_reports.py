"""`txdb cost`'s reports on copies of real sessions: --until, --timezone
(days in the user's zone), --order, --breakdown, sessions and projects by
cost or last activity, 5-hour blocks with --token-limit, each with --json,
and the library calls a status line makes (one session, today)."""

from __future__ import annotations

import datetime as dt
import json
import shutil
from collections import Counter
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from conftest import run
from sessions import DATA
from txdb.catalog import cost, db

REAL = [DATA / "real", DATA / "projects", DATA / "cli", DATA / "generated"]


@pytest.fixture(scope="module")
def catalog(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("reports")
    projects = tmp / "projects"
    for root in REAL:
        for folder in root.iterdir():
            if folder.is_dir():
                shutil.copytree(folder, projects / f"{root.name}{folder.name}")
    db_path = tmp / "c.db"
    run("refresh", "--db", db_path, "--root", projects, ok=True)
    conn = db.connect(db_path)
    stamps = [r[0] for r in conn.execute("SELECT timestamp FROM billed_cost WHERE invalid IS NULL "
                                         "AND timestamp IS NOT NULL")]
    assert len(stamps) > 50
    yield db_path, conn, stamps
    conn.close()


def _cost(db_path, *args) -> dict:
    r = run("cost", "--db", db_path, "--json", *args)
    assert r.exit_code == 0, r.output
    return json.loads(r.output)


def _local_days(stamps, zone) -> Counter:
    return Counter(dt.datetime.fromisoformat(s.replace("Z", "+00:00")).astimezone(zone).date().isoformat()
                   for s in stamps)


@pytest.mark.parametrize("tz", ["UTC", "Asia/Tokyo", "America/Los_Angeles", "Europe/Paris"])
def test_days_are_counted_in_the_users_zone(catalog, tz):
    db_path, _, stamps = catalog
    rep = _cost(db_path, "--timezone", tz)
    assert rep["timezone"] == tz
    assert {r["day"]: r["api_messages"] for r in rep["rows"]} == dict(_local_days(stamps, ZoneInfo(tz)))
    assert rep["total"]["api_messages"] == len(stamps)
    months = Counter()
    for day, n in _local_days(stamps, ZoneInfo(tz)).items():
        months[day[:7]] += n
    assert {r["month"]: r["api_messages"] for r in _cost(db_path, "--by", "month", "--timezone", tz)["rows"]} \
        == dict(months)


def test_since_and_until_bound_the_days_inclusive_in_the_zone(catalog):
    db_path, _, stamps = catalog
    tz = "Asia/Tokyo"
    days = _local_days(stamps, ZoneInfo(tz))
    ordered = sorted(days)
    lo, hi = ordered[1], ordered[-2]
    rep = _cost(db_path, "--since", lo, "--until", hi, "--timezone", tz)
    assert [r["day"] for r in rep["rows"]] == [d for d in ordered if lo <= d <= hi]
    assert rep["total"]["api_messages"] == sum(n for d, n in days.items() if lo <= d <= hi)
    assert (rep["since"], rep["until"]) == (lo, hi)
    one = _cost(db_path, "--since", hi, "--until", hi, "--timezone", tz)
    assert [r["day"] for r in one["rows"]] == [hi]


def test_order_turns_the_rows(catalog):
    db_path, *_ = catalog
    for by in ("day", "month", "week", "block", "model"):
        asc = [json.dumps(r, sort_keys=True) for r in _cost(db_path, "--by", by)["rows"]]
        desc = [json.dumps(r, sort_keys=True) for r in _cost(db_path, "--by", by, "--order", "desc")["rows"]]
        assert len(asc) > 1 and desc == asc[::-1], by


def test_breakdown_lists_the_models_inside_each_row(catalog):
    db_path, *_ = catalog
    for by in ("day", "session", "project"):
        rep = _cost(db_path, "--by", by, "--breakdown")
        multi = 0
        for r in rep["rows"]:
            assert sum(m["api_messages"] for m in r["models"]) == r["api_messages"]
            assert sum(m["total_tokens"] for m in r["models"]) == r["total_tokens"]
            priced = [m["cost_usd"] for m in r["models"] if m["cost_usd"] is not None]
            if r["cost_usd"] is not None:
                assert sum(priced) == pytest.approx(r["cost_usd"], abs=1e-5)
            multi += len(r["models"]) > 1
        assert multi, by
    table = run("cost", "--db", db_path, "--breakdown", "--table", ok=True).output
    assert "└ claude-" in table


def test_sessions_and_projects_sort_by_cost_or_last_activity(catalog):
    db_path, *_ = catalog
    for by in ("session", "project"):
        rows = _cost(db_path, "--by", by)["rows"]
        costs = [r["cost_usd"] for r in rows if r["cost_usd"] is not None]
        assert len(costs) > 2 and costs == sorted(costs, reverse=True), by
        assert all(r["cost_usd"] is None for r in rows[len(costs):])  # unpriced last
        latest = _cost(db_path, "--by", by, "--sort", "last-activity")["rows"]
        stamps = [r["last_timestamp"] for r in latest]
        assert stamps == sorted(stamps, reverse=True) and len(latest) == len(rows)
        oldest = _cost(db_path, "--by", by, "--sort", "last-activity", "--order", "asc")["rows"]
        assert [r["last_timestamp"] for r in oldest] == sorted(stamps)
    projects = _cost(db_path, "--by", "project")["rows"]
    assert all(r["sessions"] >= 1 for r in projects)


def test_blocks_of_real_sessions_with_a_token_limit(catalog):
    db_path, conn, stamps = catalog
    rep = _cost(db_path, "--by", "block", "--token-limit", "max")
    rows = rep["rows"]
    assert sum(r["api_messages"] for r in rows) == len(stamps)
    for a, b in zip(rows, rows[1:]):
        assert b["block_start"] >= a["block_end"] or b["first_timestamp"] > a["block_end"]
    for r in rows:
        start = dt.datetime.fromisoformat(r["block_start"].replace("Z", "+00:00"))
        first = dt.datetime.fromisoformat(r["first_timestamp"].replace("Z", "+00:00"))
        last = dt.datetime.fromisoformat(r["last_timestamp"].replace("Z", "+00:00"))
        assert start == first.replace(minute=0, second=0, microsecond=0)  # floored to the hour (UTC)
        assert last - start <= dt.timedelta(hours=5)
        assert not r["is_active"]  # the sessions are old
    assert rep["token_limit"] == max(r["total_tokens"] for r in rows)
    assert max(r["percent_of_limit"] for r in rows) == 100.0
    # as of a moment inside the last block, it is active and projected
    last = rows[-1]
    now = dt.datetime.fromisoformat(last["last_timestamp"].replace("Z", "+00:00")) + dt.timedelta(minutes=1)
    active = cost.report(conn, by="block", token_limit=1_000_000, now=now)["active_block"]
    assert active["block_start"] == last["block_start"]
    assert 0 < active["minutes_left"] <= 300
    if active["burn_rate"]:
        assert active["projection"]["total_tokens"] >= active["total_tokens"]
    table = run("cost", "--db", db_path, "--by", "block", "--token-limit", "max", "--table", ok=True).output
    assert "100.0%" in table
    bad = run("cost", "--db", db_path, "--by", "block", "--token-limit", "lots")
    assert bad.exit_code == 2 and "Traceback" not in bad.output


def test_an_unknown_zone_is_one_error_line(catalog):
    db_path, *_ = catalog
    r = run("cost", "--db", db_path, "--timezone", "Mars/Olympus")
    assert r.exit_code != 0 and r.output.startswith("Error: unknown time zone") and r.output.count("\n") == 1


def test_one_session_and_today_as_a_status_line_asks(catalog):
    db_path, conn, _ = catalog
    rows = cost.report(conn, by="session")["rows"]
    top = rows[0]
    assert cost.session_cost(conn, top["session"])["cost_usd"] == pytest.approx(top["cost_usd"], abs=1e-6)
    day = cost.report(conn)["rows"][-1]
    now = dt.datetime.fromisoformat(day["day"] + "T12:00:00+00:00")
    assert cost.today_cost(conn, now=now)["api_messages"] == day["api_messages"]
    assert cost.today_cost(conn, now=now + dt.timedelta(days=400))["cost_usd"] == 0  # nothing today: $0, not unpriced


def test_every_report_prints_a_table(catalog):
    db_path, *_ = catalog
    for by in cost.GROUPS:
        r = run("cost", "--db", db_path, "--by", by, "--table", "--breakdown")
        assert r.exit_code == 0 and "Total: $" in r.output, (by, r.output[-500:])
    assert Path(db_path).exists()


def test_a_range_with_no_messages_costs_nothing_in_every_grouping(catalog):
    """No API message in range: $0.00 and 0, never "unpriced" (nothing was)."""
    db_path, *_ = catalog
    for by in cost.GROUPS:
        args = ("--by", by, "--since", "2099-11-01", "--until", "2099-11-30")
        rep = _cost(db_path, *args)
        assert rep["rows"] == [] and rep["unpriced_models"] == [], by
        assert rep["total"]["cost_usd"] == 0 and rep["total"]["api_messages"] == 0, by
        r = run("cost", "--db", db_path, "--table", *args)
        assert r.exit_code == 0 and "Total: $0.00 over 0 API messages" in r.output, (by, r.output)
        assert "unpriced" not in r.output, (by, r.output)


def test_csv_keeps_a_rows_nested_figures_as_json(catalog):
    import csv
    import io

    db_path, *_ = catalog
    out = run("cost", "--db", db_path, "--by", "month", "--breakdown", "--csv", ok=True).output
    rows = list(csv.DictReader(io.StringIO(out)))
    assert rows and all(json.loads(r["models"]) for r in rows)
    assert sum(m["api_messages"] for m in json.loads(rows[0]["models"])) == int(rows[0]["api_messages"])


def test_the_usage_blocks_view_agrees_with_the_python_rule(catalog):
    """One 5-hour rule (txdb.catalog.blocks): `cost --by block` and the statusline
    run it in Python, the usage_blocks view states it in SQL; on the shipped
    sessions both find the same blocks with the same totals."""
    from txdb.catalog import blocks

    _, conn, _ = catalog
    py = cost.blocks(conn)["rows"]
    view = [dict(zip(("block_start", "block_end", "api_messages", "total_tokens", "cost_usd"), r)) for r in
            conn.execute("SELECT block_start, block_end, api_messages, total_tokens, cost_usd "
                         "FROM usage_blocks ORDER BY block_start")]
    assert len(py) >= 5
    assert [(r["block_start"], r["block_end"]) for r in py] == [(r["block_start"], r["block_end"]) for r in view]
    assert [(r["api_messages"], r["total_tokens"]) for r in py] == [(r["api_messages"], r["total_tokens"])
                                                                    for r in view]
    assert [r["cost_usd"] for r in py] == pytest.approx([r["cost_usd"] for r in view], abs=1e-6)
    assert blocks.last_block(conn) == (py[-1]["block_start"], py[-1]["block_end"])


def test_a_message_just_past_a_blocks_end_starts_the_next_in_python_and_sql(tmp_path):
    """At the edge, to the millisecond: on the end is inside, 0.5 s past it starts a block."""
    from sessions import assistant, user, write

    stamps = ["2026-11-01T00:10:00.000Z", "2026-11-01T05:00:00.000Z", "2026-11-01T05:00:00.500Z",
              "2026-11-01T10:00:00.000Z"]
    objs, parent = [], None
    for i, t in enumerate(stamps):
        u = user(f"q{i}", parent, session="s-edge", timestamp=t)
        a = assistant("a", u["uuid"], session="s-edge", msg_id=f"msg_e{i}", timestamp=t, requestId=f"req_e{i}")
        objs += [u, a]
        parent = a["uuid"]
    write(tmp_path / "projects" / "-home-me-edge" / "s-edge.jsonl", objs)
    db_path = tmp_path / "c.db"
    run("refresh", "--db", db_path, "--root", tmp_path / "projects", ok=True)
    conn = db.connect(db_path)
    py = [(r["block_start"], r["api_messages"]) for r in cost.blocks(conn)["rows"]]
    sql = list(conn.execute("SELECT block_start, api_messages FROM usage_blocks ORDER BY block_start"))
    conn.close()
    assert py == [("2026-11-01T00:00:00.000Z", 2), ("2026-11-01T05:00:00.000Z", 2)]
    assert [tuple(r) for r in sql] == py
