"""The charts: the figures behind each one equal what the session files say
(read here on their own, the way the API wrote them), and the pages draw
exactly those figures as SVG. Real files, a real catalog, Datasette
in-process through its own client. The browser half is in
test_datasette_browser.py."""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

import orjson
import pytest

from conftest import copy_fixture_sessions
from sessions import assistant, user, write
from txdb.catalog import db
from txdb.catalog.sessions import list_sessions
from txdb.catalog.ingest.store import refresh
from txdb.web import charts, svg
from txdb.web.metadata import make_datasette

KINDS = [col for col, _ in charts.TOKEN_KINDS]


def compacted_session(root: Path) -> Path:
    """Two turns on one day, a compaction, a turn the next day (streamed in
    two lines whose usage grows, as the CLI writes it)."""
    def usage(i, o, r, c):
        return {"input_tokens": i, "output_tokens": o, "cache_read_input_tokens": r,
                "cache_creation_input_tokens": c}

    day1, day2 = "2026-10-30T23:50:00.000Z", "2026-10-31T00:10:00.000Z"
    u1 = user("first question", None, session="cmp", timestamp=day1)
    a1 = assistant("first answer", u1["uuid"], session="cmp", msg_id="msg_a1",
                   usage=usage(3, 40, 0, 50_000), timestamp=day1)
    u2 = user("second question", a1["uuid"], session="cmp", timestamp=day1)
    a2 = assistant("second answer", u2["uuid"], session="cmp", msg_id="msg_a2",
                   usage=usage(5, 60, 50_000, 130_000), timestamp=day1)
    boundary = {"parentUuid": None, "logicalParentUuid": a2["uuid"], "isSidechain": False, "type": "system",
                "subtype": "compact_boundary", "content": "Conversation compacted", "uuid": "b0000000-0000",
                "timestamp": day2, "sessionId": "cmp", "compactMetadata": {"trigger": "manual", "preTokens": 180_000}}
    summary = user("This session is being continued ... summary", boundary["uuid"], session="cmp",
                   timestamp=day2, isCompactSummary=True)
    a3a = assistant("third", summary["uuid"], session="cmp", msg_id="msg_a3",
                    usage=usage(7, 1, 0, 9_000), timestamp=day2)
    a3b = assistant([{"type": "text", "text": "third, streamed on"}], a3a["uuid"], session="cmp",
                    msg_id="msg_a3", usage=usage(7, 90, 0, 9_000), timestamp=day2)
    path = root / "-home-me-compacted" / "c0000000-0000-0000-0000-000000000001.jsonl"
    write(path, [u1, a1, u2, a2, boundary, summary, a3a, a3b])
    return path


def api_usage(path: Path) -> list[dict]:
    """One entry per API message of a file, as the API recorded it: the line
    with the largest total when a message is streamed over several lines,
    dated by its first line; in file order."""
    seen: dict[str, dict] = {}
    for line in path.read_bytes().splitlines():
        o = orjson.loads(line)
        m = o.get("message")
        if o.get("type") != "assistant" or not isinstance(m, dict) or not isinstance(m.get("usage"), dict):
            continue
        u = {k: m["usage"].get(k) or 0 for k in KINDS}
        mid = m.get("id") or o["uuid"]
        if mid not in seen:
            seen[mid] = {"day": o["timestamp"][:10], **u}
        elif sum(u.values()) > sum(seen[mid][k] for k in KINDS):
            seen[mid].update(u)
    return list(seen.values())


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("charts")
    root = copy_fixture_sessions(tmp / "projects")
    compacted = compacted_session(root)
    path = tmp / "catalog.db"
    conn = db.connect(path)
    refresh(conn, [root])
    conn.close()
    return {"path": path, "root": root, "compacted": compacted}


@pytest.fixture
def conn(built):
    c = db.connect(built["path"])
    yield c
    c.close()


@pytest.fixture
async def ds(built):
    d = make_datasette(built["path"])
    await d.invoke_startup()
    return d


def test_tokens_by_day_are_what_the_api_recorded(built, conn):
    expected: dict[str, dict] = defaultdict(lambda: dict.fromkeys(KINDS, 0))
    for f in sorted(built["root"].rglob("*.jsonl")):
        for u in api_usage(f):
            for k in KINDS:
                expected[u["day"]][k] += u[k]
    got = charts.tokens_by_day(conn)
    assert [d["day"] for d in got] == sorted(expected)
    assert len(got) >= 3  # several days: the shipped sessions and both days of the compacted one
    assert {d["day"]: {k: d[k] for k in KINDS} for d in got} == expected
    two = {d["day"]: d for d in got if d["day"] in ("2026-10-30", "2026-10-31")}
    assert two["2026-10-30"]["cache_creation_input_tokens"] == 180_000
    assert two["2026-10-31"]["output_tokens"] == 90  # the streamed message once, at its largest


def test_largest_contexts_are_the_sessions_fullest_first(conn):
    got = charts.largest_contexts(conn, limit=5)
    every = list_sessions(conn, include_subagents=True, order="tokens")
    assert len(got) == 5
    assert [s["est_context_tokens"] for s in got] == sorted(
        (s["est_context_tokens"] for s in every), reverse=True)[:5]
    by_id = {s["session_id"]: s for s in every}
    for s in got:
        assert s["gauge_tokens"] == by_id[s["session_id"]]["gauge_tokens"]


def test_context_over_the_chain_shows_growth_and_the_compaction(built, conn):
    fid = conn.execute("SELECT id FROM files WHERE path = ?", (str(built["compacted"]),)).fetchone()[0]
    got = charts.context_over_chain(conn, fid)
    expected = [u["input_tokens"] + u["cache_read_input_tokens"] + u["cache_creation_input_tokens"]
                for u in api_usage(built["compacted"])]
    assert expected == [50_003, 180_005, 9_007]
    assert [p["context"] for p in got["points"]] == expected
    assert [c["after_turn"] for c in got["compactions"]] == [2]  # between the second turn and the third
    assert got["limit"] == 200_000


def test_chart_history_from_the_stored_chain_equals_the_rebuilt_one(built, conn):
    """The chart reads a chain that starts at no compact boundary from the
    stored chain: the same history as rebuilding every node and walking it."""
    from txdb.catalog import chain_rows

    fast = 0
    for (fid,) in conn.execute("SELECT file_id FROM sessions ORDER BY file_id").fetchall():
        nodes, boundaries = chain_rows.compacted_history(conn, fid)
        rebuilt = [(n.offset, n.type, n.message_id, n.timestamp) for n in nodes]
        got, got_boundaries = charts._history(conn, fid)
        assert [tuple(r) for r in got] == rebuilt, fid
        assert got_boundaries == boundaries
        first = conn.execute("SELECT offset FROM chain WHERE file_id = ? AND pos = 0", (fid,)).fetchone()
        fast += first is not None and first[0] not in boundaries
    assert fast >= 3  # most fixtures take the stored chain; the compacted ones rebuild it


def test_context_of_the_cli_compacted_session(built, conn):
    """A compaction made by the real CLI: its preserved turn is on the chain
    after the boundary, but was recorded before it (file order)."""
    path = next(built["root"].glob("-tmp-txdb-cli-fixtures-compact-demo/*.jsonl"))
    fid = conn.execute("SELECT id FROM files WHERE path = ?", (str(path),)).fetchone()[0]
    got = charts.context_over_chain(conn, fid)
    expected = [u["input_tokens"] + u["cache_read_input_tokens"] + u["cache_creation_input_tokens"]
                for u in api_usage(path)]
    assert len(expected) == 2
    assert [p["context"] for p in got["points"]] == expected
    assert [c["after_turn"] for c in got["compactions"]] == [2]


def values(page: str, cls: str) -> list[int]:
    return [int(v) for v in re.findall(rf'<(?:rect|circle|line) class="{cls}"[^>]*? data-value="(\d+)"', page)]


async def test_charts_page_draws_those_figures(ds, conn):
    r = await ds.client.get("/-/txdb/charts")
    assert r.status_code == 200
    page = r.text
    days = charts.tokens_by_day(conn)
    for k, col in enumerate(KINDS):
        assert values(page, f"c-bar kind-{k}") == [d[col] for d in days]
    largest = charts.largest_contexts(conn)
    assert [int(v) for v in re.findall(r'class="c-bar ctx(?: over)?" data-file-id="\d+" data-value="(\d+)"', page)] \
        == [s["est_context_tokens"] for s in largest]
    assert "200k context window" in page
    content = page.split('<section class="content">')[1].split("</section>")[0]
    assert "<script" not in content and content.count("<svg") == 2  # drawn without script
    assert re.search(r'(?:src|href)="(?:https?:)?//', content) is None  # nothing from another host


async def test_charts_page_draws_the_cost_by_day(ds, conn):
    """The by-day chart's last row is the cost in USD of each day
    (usage_by_day's cost_usd), labelled in dollars."""
    page = (await ds.client.get("/-/txdb/charts")).text
    row = len(charts.TOKEN_KINDS)
    drawn = [float(v) for v in re.findall(rf'<rect class="c-bar kind-{row}"[^>]*? data-value="([0-9.]+)"', page)]
    days = charts.tokens_by_day(conn)
    expected = [d["cost_usd"] or 0 for d in days]
    assert drawn == expected and sum(expected) > 0
    total = conn.execute("SELECT sum(cost_usd) FROM usage_by_day").fetchone()[0]
    assert f"${total:,.2f} in all" in page


async def test_session_page_draws_its_context(ds, built, conn):
    fid = conn.execute("SELECT id FROM files WHERE path = ?", (str(built["compacted"]),)).fetchone()[0]
    r = await ds.client.get(f"/-/txdb/session/{fid}?db=catalog")
    assert r.status_code == 200
    assert values(r.text, "pt") == [50_003, 180_005, 9_007]
    assert len(re.findall(r'<line class="compaction" data-after-turn="2"', r.text)) == 1
    assert "compacted 1 time" in r.text
    later = await ds.client.get(f"/-/txdb/session/{fid}?db=catalog&start=2")
    assert later.status_code == 200 and 'class="pt"' not in later.text  # the first page only


async def test_index_and_database_link_to_the_charts(ds):
    assert "/-/txdb/charts" in (await ds.client.get("/")).text
    assert "/-/txdb/charts?db=catalog" in (await ds.client.get("/catalog")).text


# ---------------------------------------------------------------- drawing: axis, labels, numbers

TEXT = re.compile(r'<text class="([\w-]+)" x="([-\d.]+)" y="([-\d.]+)"(?: text-anchor="(\w+)")?>([^<]*)</text>')
SIZE = {"lbl": 12, "sub": 11, "limit-lbl": 11, "compaction-lbl": 11}


def label_boxes(drawn: str) -> list[tuple]:
    """Each text label's box (x0, y0, x1, y1, text): sans-serif, generous widths."""
    boxes = []
    for cls, x, y, anchor, text in TEXT.findall(drawn):
        x, y, size = float(x), float(y), SIZE.get(cls, 12)
        w = len(text) * size * 0.6
        x0 = {"end": x - w, "middle": x - w / 2}.get(anchor, x)
        boxes.append((x0, y - size, x0 + w, y + 2, text))
    return boxes


def assert_no_overlap(drawn: str) -> None:
    boxes = label_boxes(drawn)
    assert boxes
    for i, a in enumerate(boxes):
        assert a[0] >= 0 and a[2] <= svg.WIDTH, f"{a[4]!r} is cut at the edge"
        for b in boxes[i + 1:]:
            assert a[2] <= b[0] or b[2] <= a[0] or a[3] <= b[1] or b[3] <= a[1], f"{a[4]!r} overlaps {b[4]!r}"


def day(d: str, n: int = 1) -> dict:
    return {"day": d, "input_tokens": 1_234 * n, "output_tokens": 56_789 * n, "cache_read_input_tokens": 9_876_543 * n,
            "cache_creation_input_tokens": 123_456 * n, "cost_usd": 1234.5 * n, "unpriced_messages": 0}


def bar_x(drawn: str) -> dict[str, float]:
    """The middle of each day's bar in the first row."""
    return {d: float(x) + float(w) / 2 for d, x, w in re.findall(
        r'<rect class="c-bar kind-0" data-day="([\d-]+)" data-value="\d+" x="([\d.]+)" y="[\d.]+" width="([\d.]+)"',
        drawn)}


def test_the_day_axis_is_time_idle_days_are_gaps():
    drawn = svg.tokens_by_day([day("2026-01-01"), day("2026-01-02"), day("2026-01-10")], charts.DAY_ROWS)
    x = bar_x(drawn)
    assert list(x) == ["2026-01-01", "2026-01-02", "2026-01-10"]  # bars on the days used only
    one_day = x["2026-01-02"] - x["2026-01-01"]
    assert x["2026-01-10"] - x["2026-01-02"] == pytest.approx(8 * one_day, abs=0.2)


@pytest.mark.parametrize("span", [1, 2, 9, 31, 120, 400])
def test_the_by_day_labels_never_overlap(span):
    import datetime as dt
    start = dt.date(2026, 1, 1)
    days = [day((start + dt.timedelta(days=i)).isoformat(), 1 + i % 7) for i in range(0, span, 1 + span // 40)]
    assert_no_overlap(svg.tokens_by_day(days, charts.DAY_ROWS))


def test_the_largest_and_context_labels_never_overlap():
    sessions = [{"file_id": i, "session_id": f"s{i}", "title": "a very long session title that goes on and on " * 2,
                 "est_context_tokens": 250_000 - i * 9_000, "gauge_tokens": 240_000 - i * 9_000} for i in range(20)]
    assert_no_overlap(svg.largest_contexts(sessions, charts.CONTEXT_LIMIT, lambda fid: f"/s/{fid}"))
    points = [{"turn": t, "timestamp": None, "context": 1_000 * t} for t in range(1, 301)]
    compactions = [{"after_turn": t, "timestamp": None} for t in (100, 101, 103, 200, 299)]
    assert_no_overlap(svg.context_over_chain({"points": points, "compactions": compactions, "limit": 200_000}))


def test_numbers_in_the_charts_have_thousands_separators():
    drawn = svg.tokens_by_day([day("2026-01-01", 3), day("2026-01-05")], charts.DAY_ROWS)
    shown = [t for *_, t in label_boxes(drawn)] + re.findall(r"<title>([^<]*)</title>", drawn)
    assert "39,506,172 in all" in shown and "$4,938.00 in all" in shown
    for text in shown:
        undated = re.sub(r"\d{4}-\d\d-\d\d", "", text)
        assert not re.search(r"\d{4,}", undated), f"{text!r}: a number without separators"


async def test_each_session_is_drawn_against_its_own_window(tmp_path):
    """A session past 200k runs in a 1M window: `txdb sessions` says ok, so
    its bar is not red and its window mark is at 1M, not 200k."""
    root = copy_fixture_sessions(tmp_path / "projects")
    u = user("a long one " + "word " * 240_000, None, session="big")  # ~300k tokens, as recorded
    a = assistant("answer", u["uuid"], session="big", msg_id="msg_big",
                  usage={"input_tokens": 10, "output_tokens": 5, "cache_read_input_tokens": 290_000,
                         "cache_creation_input_tokens": 10_000})
    write(root / "-home-me-big" / "b1000000-0000-0000-0000-000000000001.jsonl", [u, a])
    path = tmp_path / "catalog.db"
    c = db.connect(path)
    refresh(c, [root])
    largest = charts.largest_contexts(c)
    status = {r[0]: (r[1], r[2]) for r in c.execute(
        "SELECT file_id, window_tokens, status FROM sessions_near_limit")}
    windows = {r[0]: r[1] for r in c.execute("SELECT file_id, window_tokens FROM context_gauge")}
    big = c.execute("SELECT file_id FROM sessions WHERE session_id = 'big'").fetchone()[0]
    c.close()
    assert status[big] == (1_000_000, "ok")
    assert [s["window_tokens"] for s in largest] == [windows.get(s["file_id"], 200_000) for s in largest]
    d = make_datasette(path)
    await d.invoke_startup()
    page = (await d.client.get("/-/txdb/charts")).text
    bars = {fid: over for over, fid in re.findall(r'class="c-bar ctx( over)?" data-file-id="(\d+)"', page)}
    for s in largest:
        assert (bars[str(s["file_id"])] == " over") == (s["est_context_tokens"] > s["window_tokens"])
    assert bars[str(big)] == ""  # not red: its window is 1M
    est_big = next(s["est_context_tokens"] for s in largest if s["file_id"] == big)
    assert est_big > 200_000  # it would have been red against a fixed 200k
    assert values(page, "limit") == [s["window_tokens"] for s in largest if s["window_tokens"] <= max(
        200_000 * 1.1, max(max(x["est_context_tokens"] or 0, x["gauge_tokens"] or 0) for x in largest))]
