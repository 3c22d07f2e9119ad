"""The session page in a real headless browser (Debian's chromium): what is
rendered, not only what is sent. Skipped when chromium is not installed
(`apt-get install chromium`)."""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
import sys

import pytest

from txdb import db
from txdb.ingest.store import refresh

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
    assert len(re.findall(r'<details class="blk tool-use">', dom)) == 5
    assert not re.search(r'<details class="blk tool-use" open', dom)  # collapsed
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
