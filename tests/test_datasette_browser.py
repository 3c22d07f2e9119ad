"""The session page in a real headless browser (Debian's chromium): what is
rendered, not only what is sent. Skipped when chromium is not installed
(`apt-get install chromium`)."""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from txdb.catalog import db
from txdb.catalog.ingest.store import refresh

from conftest import DATA
from test_datasette_session import free_port, stop, wait_for

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="chromium is not installed (apt-get install chromium) - no headless browser test")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars"]


def chromium(tmp_path, *args, timeout=90) -> subprocess.CompletedProcess:
    profile = tmp_path / "chromium-profile"
    return subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args],
                          capture_output=True, timeout=timeout)


@pytest.fixture
def server(tmp_path):
    root = tmp_path / "projects"
    d = DATA / "cli" / "-tmp-txdb-cli-fixtures-tools-demo"
    shutil.copytree(d, root / d.name)
    path = tmp_path / "catalog.db"
    conn = db.connect(path)
    refresh(conn, [root])
    fid = conn.execute("SELECT id FROM files").fetchone()[0]
    conn.close()
    port = free_port()
    txdb = str(__import__("pathlib").Path(sys.executable).parent / "txdb")
    proc = subprocess.Popen([txdb, "serve", "--db", str(path), "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(base + "/", proc)
        yield base, fid
    finally:
        stop(proc)


def test_session_page_renders_in_chromium(server, tmp_path):
    base, fid = server
    url = f"{base}/-/txdb/session/{fid}"
    dom = chromium(tmp_path, "--dump-dom", url).stdout.decode()
    # the DOM the browser built: conversation items, collapsed tool calls, bars
    assert "Please inspect this project and make out.txt." in dom
    items = re.findall(r'<li class="msg [^"]*" id="pos-\d+"', dom)
    assert len(items) == 29
    assert len(re.findall(r'<details class="blk tool-use">', dom)) == 4  # Bash's shown inline
    assert not re.search(r'<details class="blk tool-use" open', dom)  # collapsed
    assert '<pre class="cmd"><code>$ echo hello-from-bash</code></pre>' in dom
    assert len(re.findall(r'<span class="costbar">', dom)) == 29
    assert "hello-from-bash" in dom
    # the stylesheet was applied: the screenshot is a real, wide, non-blank page
    shot = tmp_path / "session.png"
    chromium(tmp_path, "--window-size=1280,1000", f"--screenshot={shot}", url)
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    assert (width, height) == (1280, 1000)
    assert len(data) > 30_000  # text, bars and colours, not an empty page


READING = "b3edadab-bca0-4054-9b41-f7ffa6941260"  # tests/data/projects/-Users-user-project
SCREENSHOT = Path(__file__).parent.parent / "docs" / "datasette-session.png"


@pytest.fixture
def reading_server(tmp_path):
    root = tmp_path / "projects"
    shutil.copytree(DATA / "projects" / "-Users-user-project", root / "-Users-user-project")
    path = tmp_path / "catalog.db"
    conn = db.connect(path)
    refresh(conn, [root])
    conn.close()
    port = free_port()
    txdb = str(Path(sys.executable).parent / "txdb")
    proc = subprocess.Popen([txdb, "serve", "--db", str(path), "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(base + "/", proc)
        yield base
    finally:
        stop(proc)


def test_session_page_by_id_reads_like_the_conversation(reading_server, tmp_path):
    """Opened by its session id: Markdown rendered, reminders collapsed, nothing
    fetched from elsewhere. Its screenshot is docs/datasette-session.png
    (written there when TXDB_SCREENSHOTS=1)."""
    url = f"{reading_server}/-/txdb/session/{READING}"
    shot = tmp_path / "session.png"
    dom, foreign = rendered(tmp_path, url, shot, size="1280,1900")
    assert foreign == []
    conv = dom[dom.index('id="conversation"'):]
    assert "<strong>" in conv and "<code>" in conv  # from the messages' Markdown
    reminders = re.findall(r'<details class="blk reminder"( open)?><summary>system reminder · ', conv)
    assert reminders and not any(reminders)  # collapsed
    assert is_picture(shot)
    if os.environ.get("TXDB_SCREENSHOTS") == "1":
        shutil.copyfile(shot, SCREENSHOT)


# ---------------------------------------------------------------- charts

def foreign_loads(netlog) -> list[str]:
    """The URLs a page asked for from a host other than loopback, read from
    chromium's NetLog: requests a page makes carry its origin as initiator;
    the browser's own (update checks, network time) carry "not an origin"."""
    import json
    from urllib.parse import urlsplit
    data = json.loads(netlog.read_text())
    start = data["constants"]["logEventTypes"]["URL_REQUEST_START_JOB"]
    out = []
    for e in data["events"]:
        p = e.get("params") or {}
        if e["type"] != start or not p.get("url") or p.get("initiator") == "not an origin":
            continue
        if urlsplit(p["url"]).hostname not in ("127.0.0.1", "localhost", "::1"):
            out.append(p["url"])
    return out


@pytest.fixture
def charts_server(tmp_path):
    from test_datasette_charts import compacted_session
    root = tmp_path / "projects"
    for d in (DATA / "cli").iterdir():
        if d.is_dir():
            shutil.copytree(d, root / d.name)
    compacted = compacted_session(root)
    path = tmp_path / "catalog.db"
    conn = db.connect(path)
    refresh(conn, [root])
    fid = conn.execute("SELECT id FROM files WHERE path = ?", (str(compacted),)).fetchone()[0]
    conn.close()
    port = free_port()
    txdb = str(__import__("pathlib").Path(sys.executable).parent / "txdb")
    proc = subprocess.Popen([txdb, "serve", "--db", str(path), "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(base + "/", proc)
        yield base, fid
    finally:
        stop(proc)


def rendered(tmp_path, url, shot=None, size="1100,1000") -> tuple[str, list[str]]:
    """The DOM chromium built for ``url`` (and a screenshot), and what the
    page asked of hosts other than loopback (none of which resolve here)."""
    netlog = tmp_path / "netlog.json"
    offline = ["--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1", f"--log-net-log={netlog}"]
    dom = chromium(tmp_path, *offline, "--virtual-time-budget=3000", "--dump-dom", url).stdout.decode()
    foreign = foreign_loads(netlog)
    if shot is not None:
        chromium(tmp_path, *offline, f"--window-size={size}", f"--screenshot={shot}", url)
        foreign += foreign_loads(netlog)
    return dom, foreign


def is_picture(shot) -> bool:
    """A real, non-blank PNG (the stylesheet and the charts drawn)."""
    data = shot.read_bytes()
    return data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000


def test_a_page_that_loads_from_elsewhere_is_caught(tmp_path):
    """The check below can fail: a page with a CDN script and image is caught."""
    page = tmp_path / "cdn.html"
    page.write_text('<img src="http://cdn.example.org/chart.png">'
                    '<script src="https://cdn.example.org/plot.js"></script>')
    _dom, foreign = rendered(tmp_path, page.as_uri())
    assert sorted(foreign) == ["http://cdn.example.org/chart.png", "https://cdn.example.org/plot.js"]


def test_charts_render_with_no_network(charts_server, tmp_path):
    base, fid = charts_server
    shot = tmp_path / "charts.png"
    dom, foreign = rendered(tmp_path, f"{base}/-/txdb/charts", shot)
    assert foreign == []  # nothing asked of any host but loopback
    assert dom.count('<svg class="txdb-chart"') == 2
    # every day's bars and every session's bar, with their figures
    days = re.findall(r'<rect class="c-bar kind-0" data-day="([\d-]+)" data-value="(\d+)"', dom)
    assert [d for d, _ in days] == ["2026-10-30", "2026-10-31", "2026-11-30"]
    sessions = re.findall(r'<rect class="c-bar ctx(?: over)?" data-file-id="\d+" data-value="(\d+)"[^>]* width="([\d.]+)"', dom)
    assert len(sessions) == 5 and all(float(w) > 0 for _, w in sessions)
    assert "200k context window" in dom
    assert is_picture(shot)

    shot = tmp_path / "session-context.png"
    dom, foreign = rendered(tmp_path, f"{base}/-/txdb/session/{fid}", shot, size="1100,700")
    assert foreign == []
    points = re.findall(r'<circle class="pt" data-turn="(\d+)" data-value="(\d+)"', dom)
    assert [int(v) for _, v in points] == [50_003, 180_005, 9_007]
    assert len(re.findall(r'<line class="compaction"', dom)) == 1
    assert re.search(r'<polyline class="line" points="[\d., ]+"', dom)
    assert is_picture(shot)


# ---------------------------------------------------------------- the front page

DOCS = __import__("pathlib").Path(__file__).resolve().parent.parent / "docs"


def keep_shot(shot, name: str) -> None:
    """TXDB_UPDATE_SHOTS=1: the screenshot replaces docs/<name> (README's pictures)."""
    import os
    if os.environ.get("TXDB_UPDATE_SHOTS"):
        shutil.copyfile(shot, DOCS / name)


def test_front_page_and_charts_render_in_chromium(charts_server, tmp_path):
    base, fid = charts_server
    shot = tmp_path / "front.png"
    dom, foreign = rendered(tmp_path, f"{base}/catalog", shot, size="1280,1500")
    assert foreign == []
    front = dom.split('<section class="txdb-front">', 1)[1].split("</section>", 1)[0]
    assert re.search(r'<form class="txdb-search" action="[^"]*/catalog/search_blocks"', front)
    assert len(re.findall(r'formaction="[^"]*/catalog/search_(messages|thinking|tool_output)"', front)) == 3
    for section in ("near-limit", "recent", "largest"):
        assert f'id="{section}"' in front
    assert f'/-/txdb/session/{fid}?db=catalog' in front  # the compacted session, among the recent ones
    assert re.search(r"\$[\d,]+\.\d\d · [\d,]+ tokens · [\d,]+ API messages", front)  # the totals, in all
    assert is_picture(shot)
    keep_shot(shot, "datasette-front.png")

    shot = tmp_path / "charts.png"
    dom, foreign = rendered(tmp_path, f"{base}/-/txdb/charts", shot, size="1100,1000")
    assert foreign == [] and dom.count('<svg class="txdb-chart"') == 2
    assert is_picture(shot)
    keep_shot(shot, "datasette-charts.png")
