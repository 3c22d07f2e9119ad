"""The front page: a catalog's database page opens with the figures a user
looks for first, each read from its view; another database's page is
Datasette's own. Real files, a real catalog, Datasette in-process."""

from __future__ import annotations

import datetime as dt
import html
import re
import sqlite3

import pytest
from datasette.app import Datasette

from conftest import copy_fixture_sessions
from sessions import assistant, user, write
from txdb.catalog import db
from txdb.catalog.ingest.store import refresh
from txdb.web.front import human_bytes
from txdb.web.metadata import load_metadata, make_datasette
from txdb.web.urls import session_path

TODAY = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.000Z")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("front")
    root = copy_fixture_sessions(tmp / "projects")
    # A session of today, its context near the 200k window (170,000 of it).
    u = user("how full is the zebrafish context", session="near", timestamp=TODAY)
    a = assistant("quite full", u["uuid"], session="near", msg_id="msg_near", timestamp=TODAY,
                  usage={"input_tokens": 1_000, "output_tokens": 2_345, "cache_read_input_tokens": 150_000,
                         "cache_creation_input_tokens": 19_000})
    write(root / "-home-me-near" / "d0000000-0000-0000-0000-00000000000e.jsonl", [u, a])
    path = tmp / "catalog.db"
    conn = db.connect(path)
    refresh(conn, [root])
    conn.close()
    return path


@pytest.fixture
async def page(built):
    ds = make_datasette(built)
    await ds.invoke_startup()
    r = await ds.client.get(f"/{built.stem}")
    assert r.status_code == 200
    front = r.text.split('<section class="txdb-front">', 1)[1].split("</section>", 1)[0]
    return {"ds": ds, "html": front}


def text_of(fragment: str) -> str:
    return html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", fragment)))


def view(built, sql, params=()):
    conn = sqlite3.connect(built)
    try:
        return conn.execute(sql, params).fetchone()
    finally:
        conn.close()


async def test_totals_of_the_week_and_in_all_are_the_views(built, page):
    shown = text_of(page["html"])
    week = view(built, "SELECT sum(total_tokens), round(sum(cost_usd), 2), sum(api_messages) FROM usage_by_day "
                       "WHERE day >= date('now', '-6 days')")
    every = view(built, "SELECT sum(total_tokens), round(sum(cost_usd), 2), sum(api_messages) FROM usage_by_day")
    assert week[0] >= 172_345  # today's session is in the week
    assert f"${week[1]:,.2f} · {week[0]:,} tokens · {week[2]:,} API messages" in shown
    assert f"${every[1]:,.2f} · {every[0]:,} tokens · {every[2]:,} API messages" in shown
    sessions = view(built, "SELECT count(*) FROM sessions_by_size WHERE kind = 'session' AND gone = 0")[0]
    assert f"Sessions {sessions:,}" in shown


async def test_near_limit_recent_and_largest_link_to_their_session_pages(built, page):
    fid, gauge = view(built, "SELECT file_id, gauge_tokens FROM sessions_near_limit WHERE session_id = 'near'")
    assert gauge == 170_000
    near = page["html"].split('id="near-limit"', 1)[1].split('id="recent"', 1)[0]
    assert session_path(fid) in near and "170,000" in near and "85.0% of 200,000" in text_of(near)
    recent = page["html"].split('id="recent"', 1)[1].split('id="largest"', 1)[0]
    first = re.search(r'<a href="([^"]+)">([^<]+)</a>', recent)
    assert session_path(fid) in first.group(1)  # the newest session first, by its title
    assert first.group(2) == "how full is the zebrafish context"
    r = await page["ds"].client.get(html.unescape(first.group(1)))
    assert r.status_code == 200 and "zebrafish" in r.text
    largest = page["html"].split('id="largest"', 1)[1]
    biggest = view(built, "SELECT file_id, file_bytes FROM sessions_by_size WHERE kind = 'session' AND gone = 0")
    assert session_path(biggest[0]) in largest
    # the size as a reader takes it in, the exact bytes in its title
    cell = re.search(rf'<td class="num" title="{biggest[1]:,} bytes">([^<]+)</td>', largest)
    assert cell and cell.group(1) == human_bytes(biggest[1]) and cell.group(1).endswith((" KB", " MB"))
    total = view(built, "SELECT sum(size) FROM files WHERE kind = 'session' AND gone = 0")[0]
    assert f'title="{total:,} bytes">({human_bytes(total)})' in page["html"]


def test_human_bytes():
    assert [human_bytes(n) for n in (0, 1023, 1024, 1536, 5 * 2**20 + 2**19, 3 * 2**30)] == [
        "0 bytes", "1,023 bytes", "1.0 KB", "1.5 KB", "5.5 MB", "3.0 GB"]


async def test_the_search_box_searches_messages_thinking_and_tool_output(built, page):
    form = re.search(r'<form class="txdb-search" action="([^"]+)".*?</form>', page["html"], re.S)
    assert form and 'name="_search"' in form.group(0)
    targets = [form.group(1)] + re.findall(r'formaction="([^"]+)"', form.group(0))
    assert [t.rsplit("/", 1)[1] for t in targets] == [
        "search_blocks", "search_messages", "search_thinking", "search_tool_output"]
    r = await page["ds"].client.get(targets[1] + "?_search=zebrafish")
    assert r.status_code == 200 and "zebrafish" in r.text


async def test_another_database_keeps_datasettes_page(built, tmp_path):
    other = tmp_path / "other.db"
    o = sqlite3.connect(other)
    o.execute("CREATE TABLE events (id INTEGER PRIMARY KEY, title TEXT)")
    o.commit()
    o.close()
    ds = Datasette([str(built), str(other)], metadata=load_metadata(built.stem))
    await ds.invoke_startup()
    r = await ds.client.get("/other")
    assert r.status_code == 200 and "events" in r.text and "txdb-front" not in r.text
    r = await ds.client.get(f"/{built.stem}")
    assert "txdb-front" in r.text


async def test_an_empty_catalog_has_a_front_page_that_says_so(tmp_path):
    path = tmp_path / "empty.db"
    db.connect(path).close()
    ds = make_datasette(path)
    await ds.invoke_startup()
    r = await ds.client.get("/empty")
    assert r.status_code == 200
    shown = text_of(r.text.split('<section class="txdb-front">', 1)[1].split("</section>", 1)[0])
    assert "Sessions 0 (0 bytes)" in shown and "no API usage" in shown
    assert "No sessions in this catalog yet." in shown and "No session is within 80% of its window." in shown


async def test_a_template_dir_of_ones_own_still_wins(built, tmp_path):
    (tmp_path / "database.html").write_text("my own page for {{ database }}")
    ds = Datasette([str(built)], metadata=load_metadata(built.stem), template_dir=str(tmp_path))
    await ds.invoke_startup()
    r = await ds.client.get(f"/{built.stem}")
    assert r.status_code == 200 and r.text == f"my own page for {built.stem}"
