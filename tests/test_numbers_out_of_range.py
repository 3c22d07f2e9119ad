"""Numbers out of range in every usage field (2^63, -1, 10^30, 1.5, "12",
null, true): kept as written in the raw line, stored as NULL and named in
usage.invalid, never priced, never stopping the other rows or files; through
refresh, cost, verify, analyze and a running watcher. Also the names the price
library would price as another model (look-alikes), models of other
providers it prices, and <synthetic>."""

from __future__ import annotations

import json
import sqlite3
from datetime import datetime
from pathlib import Path

import pytest
from genai_prices import Usage, calc_price

from conftest import run
from test_watch import interrupt, poll, scalar, start, wait_ready
from txdb.catalog import cost, db, estimate
from txdb.catalog.ingest.chunks import json_function
from txdb.catalog.ingest.store import refresh

SID = "c0570000-0000-4000-8000-0000000000aa"
OTHER = "c0570000-0000-4000-8000-0000000000bb"
MODEL = "claude-sonnet-4-5-20250929"

# Every count a usage object carries, as a path into it.
FIELDS = ["input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens",
          "cache_creation.ephemeral_5m_input_tokens", "cache_creation.ephemeral_1h_input_tokens",
          "iterations.input_tokens", "iterations.output_tokens", "iterations.cache_read_input_tokens",
          "server_tool_use.web_search_requests"]
# (value as JSON text, the reason txdb names; None: not invalid)
VALUES = [("9223372036854775808", "out of range"), ("-1", "negative"),
          # beyond 64 bits JSON's 10^30 reads as a float (named as read: 1e+30; the line keeps it as written)
          ("1000000000000000000000000000000", "not an integer"),
          ("1.5", "not an integer"), ('"12"', "not an integer"), ("null", None), ("true", "not an integer")]
SHOWN = {"1000000000000000000000000000000": "1e+30"}
GOOD = {"input_tokens": 10, "output_tokens": 20, "cache_read_input_tokens": 30, "cache_creation_input_tokens": 40}


def _usage(field: str | None = None, value=None) -> dict:
    u = {**GOOD, "cache_creation": {"ephemeral_5m_input_tokens": 40, "ephemeral_1h_input_tokens": 0},
         "server_tool_use": {"web_search_requests": 0}, "iterations": [dict(GOOD)], "service_tier": "standard"}
    if field:
        head, _, tail = field.partition(".")
        target = u["iterations"][0] if head == "iterations" else (u[head] if tail else u)
        target[tail or head] = value
    return u


def _lines(session: str, usages: list[dict], model: str = MODEL, day: str = "2026-01-05") -> list[str]:
    """One prompt and one API message per usage object, written as the CLI
    writes JSON (the values as given, 2^63 included)."""
    out = []
    for i, u in enumerate(usages):
        when = f"{day}T10:{i // 60:02d}:{i % 60:02d}.000Z"
        out.append(json.dumps({"type": "user", "uuid": f"{session}-u{i}", "parentUuid": f"{session}-a{i - 1}" if i else None,
                               "sessionId": session, "timestamp": when,
                               "message": {"role": "user", "content": f"question {i}"}}, separators=(",", ":")))
        out.append(json.dumps({"type": "assistant", "uuid": f"{session}-a{i}", "parentUuid": f"{session}-u{i}",
                               "sessionId": session, "requestId": f"req_{session}_{i}", "timestamp": when,
                               "message": {"id": f"msg_{session}_{i}", "role": "assistant", "model": model,
                                           "content": [{"type": "text", "text": "ok"}], "usage": u}},
                              separators=(",", ":")))
    return out


def _write(root: Path, session: str, lines: list[str]) -> Path:
    folder = root / "-home-me-app"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{session}.jsonl"
    path.write_text("".join(line + "\n" for line in lines))
    return path


def _price(n_messages: int) -> float:
    """What the library charges for this many GOOD messages."""
    usage = Usage(input_tokens=10 + 30 + 40, output_tokens=20, cache_read_tokens=30, cache_write_tokens=40)
    at = datetime.fromisoformat("2026-01-05T10:00:00+00:00")
    return n_messages * float(calc_price(usage, MODEL, provider_id="anthropic", genai_request_timestamp=at).total_price)


# Each (field, value) in one message of one session, after a good one; a
# second session holds only good ones.
CASES = [(f, v, why) for f in FIELDS for v, why in VALUES]


@pytest.fixture
def bad(tmp_path):
    root = tmp_path / "projects"
    usages = [_usage()] + [_usage(f, json.loads(v)) for f, v, _ in CASES]
    # the bad values are written as JSON text, so 2^63 stays an integer in the line
    lines = _lines(SID, usages)
    path = _write(root, SID, lines)
    _write(root, OTHER, _lines(OTHER, [_usage(), _usage()]))
    return root, path, tmp_path / "c.db"


def test_every_bad_count_is_kept_in_its_line_flagged_and_the_file_catalogued(bad):
    root, path, db_path = bad
    r = run("refresh", "--db", db_path, "--root", root, ok=True)
    assert "could not be" not in r.output
    conn = sqlite3.connect(db_path)
    conn.create_function("txdb_json", 2, json_function(conn))
    rows = {m: (inv, raw) for m, inv, raw in conn.execute(
        "SELECT u.message_id, u.invalid, txdb_json(r.file_id, r.offset) FROM usage u JOIN records r ON r.file_id = u.file_id "
        "AND r.offset = u.offset WHERE u.session_id = ?", (SID,))}
    assert len(rows) == 1 + len(CASES)  # no row lost
    for i, (field, value, why) in enumerate(CASES, start=1):
        invalid, raw = rows[f"msg_{SID}_{i}"]
        key = field.rsplit(".", 1)[-1]
        assert f'"{key}":{value}' in raw  # the line as written
        if why is None:
            assert invalid is None, (field, value)
        else:
            shown = field.replace("iterations.", "iterations[0].")
            assert invalid == f"{shown}={SHOWN.get(value, value)} ({why})", (field, value, invalid)
    assert rows[f"msg_{SID}_0"][0] is None
    # nothing out of range reached a column: every stored count is an integer 0 .. MAX_COUNT or NULL
    for col in ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens",
                "ephemeral_5m_input_tokens", "ephemeral_1h_input_tokens", "gauge_input_tokens"):
        assert conn.execute(f"SELECT count(*) FROM usage WHERE {col} IS NOT NULL AND NOT "
                            f"(typeof({col}) = 'integer' AND {col} BETWEEN 0 AND ?)", (cost_max(),)).fetchone()[0] == 0
    # the other session is whole, and the context gauge never sums an out-of-range figure
    assert conn.execute("SELECT count(*) FROM usage WHERE session_id = ?", (OTHER,)).fetchone()[0] == 2
    assert conn.execute("SELECT max(api_gauge), max(gauge_tokens) FROM usage_context").fetchone() == (80, 80)


def cost_max() -> int:
    from txdb.model.records import MAX_COUNT

    return MAX_COUNT


def test_cost_never_prices_an_invalid_count_and_says_what_it_left_out(bad):
    root, _, db_path = bad
    run("refresh", "--db", db_path, "--root", root, ok=True)
    report = json.loads(run("cost", "--db", db_path, "--json", ok=True).output)
    n_bad = sum(1 for *_, why in CASES if why)
    n_good = 1 + 2 + (len(CASES) - n_bad)  # a null count is absent, not invalid: that message is priced
    lo = report["left_out"]
    assert lo["usage_records"] == n_bad
    assert (lo["negative"], lo["out_of_range"], lo["not_an_integer"]) == (
        sum(why == "negative" for *_, why in CASES), sum(why == "out of range" for *_, why in CASES),
        sum(why == "not an integer" for *_, why in CASES))
    assert lo["examples"][0]["session_id"] == SID and lo["examples"][0]["invalid"]
    total = report["total"]
    assert total["api_messages"] == n_good
    assert total["cost_usd"] >= 0 and all(r["cost_usd"] >= 0 for r in report["rows"])
    # the null messages lack one count: each priced on what it has, never on a made-up figure
    assert total["cost_usd"] <= _price(n_good) + 1e-6
    assert total["cost_usd"] >= _price(3) - 1e-6
    text = run("cost", "--db", db_path, "--table", ok=True)
    assert f"Left out: {n_bad:,} usage records with an invalid count" in text.output
    assert "-$" not in text.output
    # per session, too
    by_session = json.loads(run("cost", "--db", db_path, "--by", "session", "--json", ok=True).output)
    assert all(r["cost_usd"] >= 0 for r in by_session["rows"])
    # the usage views never print a negative either
    conn = sqlite3.connect(db_path)
    assert conn.execute("SELECT min(cost_usd) FROM usage_by_day").fetchone()[0] >= 0
    assert conn.execute("SELECT min(total_tokens) FROM usage_blocks").fetchone()[0] >= 0


@pytest.mark.parametrize("value,why", [v for v in VALUES if v[1]], ids=[v[0][:12] for v in VALUES if v[1]])
def test_one_negative_or_huge_count_in_a_session_leaves_the_rest_priced(tmp_path, value, why):
    """The issue's figure: one message with -1 output tokens (or 2^63 ...)
    priced as -$78.00, or turned into 0: now left out, and named."""
    root = tmp_path / "projects"
    _write(root, SID, _lines(SID, [_usage(), _usage("output_tokens", json.loads(value)), _usage()]))
    conn = db.connect(tmp_path / "c.db")
    refresh(conn, [root])
    r = cost.report(conn)
    assert r["total"]["api_messages"] == 2
    assert r["total"]["cost_usd"] == pytest.approx(_price(2), rel=1e-9)
    assert r["left_out"]["usage_records"] == 1
    assert r["left_out"]["examples"][0]["invalid"] == f"output_tokens={SHOWN.get(value, value)} ({why})"


def test_verify_and_analyze_read_a_file_of_bad_counts(bad):
    root, path, db_path = bad
    # by path, before any refresh (verify catalogues the file itself), then by id
    r = run("verify", "--db", db_path, path)
    assert r.exit_code == 0, r.output
    run("refresh", "--db", db_path, "--root", root, ok=True)
    r = run("verify", "--db", db_path, SID)
    assert r.exit_code == 0, r.output
    r = run("analyze", "--db", db_path, SID, "--json")
    assert r.exit_code == 0, r.output
    json.loads(r.output)
    r = run("analyze", "--db", db_path, str(path))
    assert r.exit_code == 0, r.output


def test_recorded_context_ignores_counts_out_of_range():
    # the gauge's Python rule and the catalog's read a count above MAX_COUNT as 0
    for v in (2 ** 63, 10 ** 30, -1, 1.5, "12", True):
        u = {**GOOD, "input_tokens": v}
        assert estimate.recorded_context(u) == 70
        assert estimate.recorded_context({**GOOD, "iterations": [{**GOOD, "cache_read_input_tokens": v}]}) == 50


def test_a_watcher_keeps_running_over_bad_counts(tmp_path):
    root = tmp_path / "projects"
    first = _write(root, OTHER, _lines(OTHER, [_usage()]))
    db_path = tmp_path / "c.db"
    proc = start(["refresh", "--watch", "--root", str(root), "--db", str(db_path)], tmp_path)
    try:
        wait_ready(proc)
        # a new file whose first message holds 2^63, then lines appended to it, then another file
        bad = _write(root, SID, _lines(SID, [_usage("input_tokens", 2 ** 63)]))
        assert poll(lambda: scalar(db_path, "SELECT count(*) FROM usage WHERE session_id = ?", (SID,)) == 1)
        with open(bad, "a") as fh:
            for line in _lines(SID, [_usage(), _usage(), _usage("iterations.input_tokens", -1)])[2:]:
                fh.write(line + "\n")
        assert poll(lambda: scalar(db_path, "SELECT count(*) FROM usage WHERE session_id = ?", (SID,)) == 3)
        third = _write(root, "c0570000-0000-4000-8000-0000000000cc",
                       _lines("c0570000-0000-4000-8000-0000000000cc", [_usage()]))
        assert poll(lambda: scalar(db_path, "SELECT count(*) FROM files WHERE path = ?", (str(third),)) == 1)
        assert proc.poll() is None  # still running
        assert scalar(db_path, "SELECT count(*) FROM usage WHERE invalid IS NOT NULL") == 2
        assert first.exists()
    finally:
        rc, err = interrupt(proc)
    assert rc in (0, 130), err
    assert "Traceback" not in err and "OverflowError" not in err


# ---- model names: look-alikes, other providers, <synthetic> ----

def _library(model: str, provider: str, usage: Usage) -> float:
    at = datetime.fromisoformat("2026-01-05T10:00:00+00:00")
    return float(calc_price(usage, model, provider_id=provider, genai_request_timestamp=at).total_price)


def test_look_alike_names_stay_unpriced_and_named(tmp_path):
    root = tmp_path / "projects"
    lines = []
    for n, model in enumerate(("claude-opus-4-5-evil", "claude-0pus-4", "claude-opus-4-5-20251101-x",
                               "claude-opus-4-5-20251101")):
        lines += _lines(f"s{n}", [_usage()], model=model)
    _write(root, SID, lines)
    conn = db.connect(tmp_path / "c.db")
    refresh(conn, [root])
    r = cost.report(conn, by="model")
    priced = {row["model"]: row["cost_usd"] for row in r["rows"]}
    assert priced["claude-opus-4-5-20251101"] > 0
    assert priced["claude-opus-4-5-evil"] is None and priced["claude-0pus-4"] is None
    assert priced["claude-opus-4-5-20251101-x"] is None
    why = {m["model"]: m["why"] for m in r["unpriced_models"]}
    assert why == {"claude-opus-4-5-evil": "resembles claude-opus-4-5 but is not that model's name",
                   "claude-opus-4-5-20251101-x": "resembles claude-opus-4-5 but is not that model's name",
                   "claude-0pus-4": "not a model the price library knows"}
    out = run("cost", "--db", tmp_path / "c.db", "--by", "model", "--table", ok=True).output
    assert "Unpriced: claude-opus-4-5-evil (1 messages, 100 tokens): resembles claude-opus-4-5" in out


def test_the_names_claude_code_writes_are_priced_as_their_model():
    names = {"claude-sonnet-4-5-20250929": "claude-sonnet-4-5", "claude-opus-4-1-20250805": "claude-opus-4-1",
             "claude-haiku-4-5-20251001": "claude-haiku-4-5", "claude-sonnet-4-20250514": "claude-sonnet-4-0",
             "claude-opus-4-20250514": "claude-opus-4-0", "claude-3-5-sonnet-20241022": "claude-3-5-sonnet",
             "claude-3-7-sonnet-20250219": "claude-3-7-sonnet-latest", "claude-opus-4-6": "claude-opus-4-6",
             "claude-opus-5-5": "claude-opus-5-5", "MiniMax-M2.7": "MiniMax-M2.7", "minimax-m2.7": "MiniMax-M2.7"}
    got = {r["model"]: r["priced_as"] for r in cost.price_rows(list(names), "test")}
    assert got == names


def test_a_model_of_another_provider_is_priced_by_it_and_synthetic_costs_zero(tmp_path):
    root = tmp_path / "projects"
    synthetic = {"input_tokens": 0, "output_tokens": 0, "cache_read_input_tokens": 0,
                 "cache_creation_input_tokens": 0}
    _write(root, SID, _lines(SID, [_usage()], model="minimax-m2.7", day="2026-01-05")
           + _lines("s2", [synthetic], model="<synthetic>", day="2026-01-06")
           + _lines("s3", [_usage()], model="glm-4.6", day="2026-01-06"))
    conn = db.connect(tmp_path / "c.db")
    refresh(conn, [root])
    r = cost.report(conn)
    day = {row["day"]: row for row in r["rows"]}
    usage = Usage(input_tokens=80, output_tokens=20, cache_read_tokens=30, cache_write_tokens=40)
    # (report figures are rounded to the micro-dollar)
    assert day["2026-01-05"]["cost_usd"] == pytest.approx(_library("minimax-m2.7", "minimax", usage), abs=5e-7)
    # a day of <synthetic> ($0 by definition) and an unknown model is unpriced, never "$0.00 +unpriced"
    assert day["2026-01-06"]["cost_usd"] is None
    assert [m["model"] for m in r["unpriced_models"]] == ["glm-4.6"]
    out = run("cost", "--db", tmp_path / "c.db", "--table", ok=True).output
    line = next(x for x in out.splitlines() if x.startswith("2026-01-06"))
    assert line.rstrip().endswith("unpriced") and "$0.00" not in line
    assert conn.execute("SELECT priced_as, provider FROM prices WHERE model = 'minimax-m2.7'").fetchone() == (
        "MiniMax-M2.7", "minimax")
