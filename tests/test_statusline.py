"""`txdb statusline`: the line Claude Code's statusLine shows, from the
catalog's own figures (the estimate, the cost, the day, the block), and a
line that never fails."""

from __future__ import annotations

import datetime as dt
import json
import random
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import run as txdb
from sessions import assistant, user, write

from txdb.catalog import blocks
from txdb.catalog import statusline as lib

BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def catalog(shipped_catalog):
    return shipped_catalog


def _session(db):
    conn = sqlite3.connect(db)
    row = conn.execute("SELECT f.session_id, f.path, c.est_context_tokens, c.cost_usd, g.window_tokens "
                       "FROM files f JOIN session_costs c ON c.file_id = f.id "
                       "JOIN context_gauge g ON g.file_id = f.id WHERE f.kind = 'session' "
                       "AND c.cost_usd > 0 ORDER BY c.est_context_tokens DESC LIMIT 1").fetchone()
    conn.close()
    return row


def line(db, payload, *extra):
    data = payload if isinstance(payload, (bytes, str)) else json.dumps(payload)
    r = subprocess.run([str(BIN / "txdb"), "statusline", "--db", str(db), *extra], input=data if isinstance(
        data, bytes) else data.encode(), capture_output=True, timeout=60)
    return r


def test_the_line_says_the_catalogs_estimate_window_and_cost(catalog):
    sid, path, est, cost, window = _session(catalog)
    payload = {"session_id": sid, "transcript_path": path, "model": {"id": "claude-opus-4-7", "display_name": "Opus"}}
    r = line(catalog, payload, "--json")
    assert r.returncode == 0 and r.stderr == b""
    got = json.loads(r.stdout)
    assert got["context_tokens"] == est and got["context_source"] == "txdb"
    assert got["window_tokens"] == window
    assert got["session_usd"] == pytest.approx(cost)
    text = line(catalog, payload).stdout.decode().strip()
    assert text == got["line"]
    assert text.startswith("Opus \u00b7 ctx ")
    assert f"(${cost:,.2f}" not in text and f"${cost:,.2f} session" in text
    assert f"({100 * est / window:.0f}%)" in text
    # found by its id alone too (a payload without transcript_path)
    assert json.loads(line(catalog, {"session_id": sid}, "--json").stdout)["context_tokens"] == est


def test_today_is_the_local_day_and_its_cost_every_message_once(catalog):
    conn = sqlite3.connect(catalog)
    (last,) = conn.execute("SELECT max(timestamp) FROM billed_cost WHERE cost_usd > 0").fetchone()
    now = dt.datetime.strptime(last, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=dt.timezone.utc)
    start = lib.local_day_start(now)
    (want,) = conn.execute("SELECT sum(cost_usd) FROM billed_cost WHERE timestamp >= ?", (start,)).fetchone()
    conn.close()
    sid = _session(catalog)[0]
    got = lib.status(catalog, {"session_id": sid}, now=now)
    assert got.today_usd == pytest.approx(want) and want > 0


def test_it_never_fails(catalog, tmp_path):
    for payload in (b"", b"not json", b"[1, 2]", b'{"session_id": 12}', b"\xff\xfe", b"[" * 100000,
                    json.dumps({"session_id": "no-such-session", "model": "x" * 10000}).encode()):
        r = line(catalog, payload)
        assert r.returncode == 0 and r.stderr == b"", payload[:40]
        assert len(r.stdout.decode().splitlines()) == 1
    r = line(tmp_path / "none.db", {"model": {"display_name": "Sonnet"}})
    assert r.returncode == 0 and r.stdout.decode().strip() == "Sonnet \u00b7 no txdb catalog"
    assert not (tmp_path / "none.db").exists()  # read-only: makes nothing
    bad = tmp_path / "bad.db"
    bad.write_bytes(b"this is not sqlite" * 100)
    r = line(bad, {"model": {"display_name": "Sonnet"}})
    assert r.returncode == 0 and r.stdout.decode().startswith("Sonnet \u00b7 txdb: ")
    assert bad.read_bytes() == b"this is not sqlite" * 100


def test_a_session_not_catalogued_yet_shows_the_payloads_own_usage(catalog):
    payload = {"session_id": "11111111-2222-3333-4444-555555555555", "model": {"display_name": "Opus 5.5"},
               "context_window": {"context_window_size": 1000000, "current_usage": {
                   "input_tokens": 2492, "output_tokens": 9, "cache_creation_input_tokens": 984,
                   "cache_read_input_tokens": 8849}}}
    got = json.loads(line(catalog, payload, "--json").stdout)
    assert got["context_tokens"] == 2492 + 984 + 8849 and got["context_source"] == "recorded"
    assert got["window_tokens"] == 1000000 and got["note"] == "not catalogued yet"


def test_a_file_grown_since_the_catalog_read_it_shows_the_new_turns_usage(tmp_path):
    root = tmp_path / "projects"
    u = user("hello", session="s-grow")
    path = write(root / "-home-me-app" / "s-grow.jsonl", [u, assistant("hi", u["uuid"], session="s-grow")])
    db = tmp_path / "c.db"
    txdb("refresh", "--root", root, "--db", db, ok=True)
    payload = {"session_id": "s-grow", "transcript_path": str(path),
               "context_window": {"context_window_size": 200000, "current_usage": {"input_tokens": 5000}}}
    # the file as catalogued: txdb's estimate, whatever the CLI's gauge says (truer after a surgery)
    assert json.loads(line(db, payload, "--json").stdout)["context_source"] == "txdb"
    with path.open("ab") as f:
        f.write(json.dumps(user("more", u["uuid"], session="s-grow")).encode() + b"\n")
    got = json.loads(line(db, payload, "--json").stdout)
    assert (got["context_tokens"], got["context_source"]) == (5000, "recorded")
    # a file that changed with no new turn (the payload's usage is the catalog's last gauge): still txdb's
    conn = sqlite3.connect(db)
    (gauge,) = conn.execute("SELECT gauge_tokens FROM context_gauge g JOIN files f ON f.id = g.file_id "
                            "WHERE f.session_id = 's-grow'").fetchone()
    conn.close()
    same = {**payload, "context_window": {"context_window_size": 200000,
                                          "current_usage": {"input_tokens": gauge}}}
    assert json.loads(line(db, same, "--json").stdout)["context_source"] == "txdb"


def _usage_session(root: Path, stamps: list[str]) -> None:
    objs, parent = [], None
    for i, t in enumerate(stamps):
        u = user(f"q{i}", parent, session="s-blocks", timestamp=t)
        a = assistant("a", u["uuid"], session="s-blocks", msg_id=f"msg_b{i}", timestamp=t, requestId=f"req_b{i}")
        objs += [u, a]
        parent = a["uuid"]
    write(root / "-home-me-blocks" / "s-blocks.jsonl", objs)


@pytest.mark.parametrize("seed", range(12))
def test_the_latest_block_is_the_views(tmp_path, seed):
    """blocks.last_block, which starts its walk at the latest gap of more than
    5 hours, finds the block the view usage_blocks (which walks from the first
    message) lists last: on random histories with gaps of every size."""
    rnd = random.Random(seed)
    t = dt.datetime(2026, 11, 1, 7, 13, tzinfo=dt.timezone.utc)
    stamps = []
    for _ in range(rnd.randint(1 if seed == 0 else 20, 80)):
        t += dt.timedelta(minutes=rnd.choice([1, 7, 59, 61, 119, 240, 299, 300, 301, 360, 600, 1440]))
        stamps.append(t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z")
    root = tmp_path / "projects"
    _usage_session(root, stamps)
    db = tmp_path / "c.db"
    txdb("refresh", "--root", root, "--db", db, ok=True)
    conn = sqlite3.connect(db)
    want = conn.execute("SELECT block_start, block_end FROM usage_blocks ORDER BY block_start DESC LIMIT 1").fetchone()
    assert blocks.last_block(conn) == want
    end = dt.datetime.strptime(want[1], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=dt.timezone.utc)
    assert blocks.active_block(conn, end - dt.timedelta(minutes=1)) == want
    assert blocks.active_block(conn, end) is None
    st = lib.status(db, {"session_id": "s-blocks"}, now=end - dt.timedelta(minutes=90))
    assert st.minutes_left == 90 and "1h30m left in block" in st.line()


def test_the_latest_block_on_the_shipped_sessions(catalog):
    conn = sqlite3.connect(catalog)
    want = conn.execute("SELECT block_start, block_end FROM usage_blocks ORDER BY block_start DESC LIMIT 1").fetchone()
    assert want is not None and blocks.last_block(conn) == want
