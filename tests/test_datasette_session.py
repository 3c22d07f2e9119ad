"""The session page (/-/txdb/session/<file_id>), in-process, and `txdb
serve` / plain `datasette serve` as real servers."""

from __future__ import annotations

import html as htmllib
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import orjson
import pytest

from txdb.catalog import db
from txdb.web.metadata import make_datasette, metadata_path
from txdb.web.session import TOOL_CHARS
from txdb.catalog.ingest.store import refresh

from conftest import copy_fixture_sessions

DB = "catalog"
BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sess")
    root = tmp / "projects"
    copy_fixture_sessions(root)
    path = tmp / f"{DB}.db"
    conn = db.connect(path)
    refresh(conn, [root])
    ids = {name: conn.execute("SELECT id FROM files WHERE path LIKE ?", (f"%{name}%",)).fetchone()[0]
           for name in ("tools-demo", "compact-demo", "subagent-demo")}
    long_fid, long_offset, long_chars = conn.execute("""
        SELECT b.file_id, b.offset, b.chars FROM blocks b
        JOIN chain c ON c.file_id = b.file_id AND c.offset = b.offset
        WHERE b.kind = 'tool_result' ORDER BY b.chars DESC LIMIT 1""").fetchone()
    conn.close()
    return {"path": path, "ids": ids, "long": (long_fid, long_offset, long_chars)}


@pytest.fixture
async def ds(built):
    d = make_datasette(built["path"])
    await d.invoke_startup()
    return d


def text_of(page: str) -> str:
    return htmllib.unescape(re.sub(r"<[^>]+>", "", page))


async def test_session_page_reads_like_the_conversation(ds, built):
    fid = built["ids"]["tools-demo"]
    r = await ds.client.get(f"/-/txdb/session/{fid}?db={DB}")
    assert r.status_code == 200
    page = r.text
    text = text_of(page)
    # header: title from the first prompt, figures, links to the rows
    assert "“Please inspect this project and make out.txt.”" in text
    assert "0ff9cf6e-e3b0-420c-913e-806c2aa938aa" in text
    assert "Estimated context" in text and "Gauge (recorded)" in text
    # its cost, and the CLI's own figure from its cost-state line
    cost = (await ds.client.get(f"/{DB}/session_costs.json?file_id={fid}&_shape=array")).json()[0]["cost_usd"]
    cli = (await ds.client.get(f"/{DB}/cli_cost.json?file_id={fid}&_shape=array")).json()[0]["cli_cost_usd"]
    assert cost > 0 and f"Cost${cost:,.2f} (the CLI's own figure: ${cli:,.2f})" in text
    assert f'href="/{DB}/records?file_id={fid}"' in page
    # the breakdown with its bars
    assert 'class="bar cat-system_prompt"' in page and 'class="bar cat-tool_result"' in page
    # the chain in order, each message with its role and its records row
    items = re.findall(r'<li class="msg [^"]*" id="pos-(\d+)"', page)
    assert [int(i) for i in items] == list(range(len(items))) and len(items) == 29
    assert re.search(rf'href="/{DB}/records/{fid},\d+" title="the records row">pos 0 · line \d+', page)
    roles = re.findall(r'<span class="who">([^<]+)</span>', page)
    assert roles[0] == "user" and "assistant" in roles and "tool result" in roles
    assert any(r.startswith("attachment · ") for r in roles)
    # a Bash call: its command as code, its output (short: open) right below it
    assert re.search(r'<pre class="cmd"><code>\$ echo hello-from-bash</code></pre>\s*'
                     r'<details class="blk bash-output" open><summary>output <span class="size">15 chars', page)
    assert "output of <span class=\"tool\">Bash</span> shown with its command above" in page
    # other tool calls collapsed, with their gist
    assert re.search(r'<details class="blk tool-use"><summary><span class="tool">Read</span> <code class="gist">', page)
    assert "hello-from-bash" in text
    assert '<details class="blk thinking"><summary>thinking · ' in page
    assert re.search(r'result of <span class="tool">Read</span> <span class="size">[\d,]+ chars · 1 image', page)
    # token cost bars and the running total
    assert len(re.findall(r'<span class="costbar"><span style="width: [\d.]+%"></span></span>', page)) == 29
    assert "Σ" in text


async def test_long_tool_output_is_truncated_with_its_size(ds, built):
    fid, offset, chars = built["long"]
    assert chars > TOOL_CHARS
    page = (await ds.client.get(f"/-/txdb/session/{fid}")).text
    assert f"{chars:,} chars" in page and f"first {TOOL_CHARS:,} shown" in page
    assert f'href="/{DB}/blocks/{fid},{offset},' in page


async def test_compact_boundary_and_paging(ds, built):
    fid = built["ids"]["compact-demo"]
    page = (await ds.client.get(f"/-/txdb/session/{fid}")).text
    assert 'class="msg type-system role-none compact"' in page
    assert "system · compact_boundary" in page
    full = len(re.findall(r'<li class="msg ', page))
    first = (await ds.client.get(f"/-/txdb/session/{fid}?limit=2")).text
    assert len(re.findall(r'<li class="msg ', first)) == 2 and "later →" in first
    second = (await ds.client.get(f"/-/txdb/session/{fid}?start=2&limit=2")).text
    assert 'id="pos-2"' in second and "← earlier" in second
    assert full > 2
    # first and last: the last window is a whole one ending at the chain's end
    n = db.connect_readonly(built["path"]).execute(
        "SELECT chain_length FROM sessions WHERE file_id = ?", (fid,)).fetchone()[0]
    assert f"start={n - 2}&amp;limit=2#conversation\">last ⇥" in first
    last = (await ds.client.get(f"/-/txdb/session/{fid}?start={n - 2}&limit=2")).text
    assert f'id="pos-{n - 1}"' in last and "later →" not in last
    assert "start=0&amp;limit=2#conversation\">⇤ first" in last
    # ?pos= opens the window that holds a position, scrolled to it
    moved = await ds.client.get(f"/-/txdb/session/{fid}?pos=3&limit=2")
    assert moved.status_code == 302
    assert moved.headers["location"] == f"/-/txdb/session/{fid}?db={DB}&start=2&limit=2#pos-3"


async def test_default_window(ds, built):
    """A chain longer than PAGE_RECORDS opens on its first PAGE_RECORDS records, the rest a page away."""
    from txdb.web.session import PAGE_RECORDS

    fid = max(built["ids"].values(), key=lambda f: db.connect_readonly(built["path"]).execute(
        "SELECT chain_length FROM sessions WHERE file_id = ?", (f,)).fetchone()[0])
    n = db.connect_readonly(built["path"]).execute(
        "SELECT chain_length FROM sessions WHERE file_id = ?", (fid,)).fetchone()[0]
    limit = max(1, n // 3)
    page = (await ds.client.get(f"/-/txdb/session/{fid}?limit={limit}")).text
    assert len(re.findall(r'<li class="msg ', page)) == limit and 'id="pos-0"' in page
    assert f'id="pos-{limit}"' not in page and f"positions 0–{limit - 1} of {n}" in page
    whole = (await ds.client.get(f"/-/txdb/session/{fid}")).text
    assert len(re.findall(r'<li class="msg ', whole)) == min(n, PAGE_RECORDS)


async def test_subagent_session_page(ds, built):
    sub = db.connect_readonly(built["path"]).execute(
        "SELECT file_id FROM sessions WHERE parent_session_id IS NOT NULL").fetchone()[0]
    page = text_of((await ds.client.get(f"/-/txdb/session/{sub}")).text)
    assert "subagent of" in page


async def test_unknown_session_is_a_404(ds):
    assert (await ds.client.get("/-/txdb/session/999999")).status_code == 404
    assert (await ds.client.get("/-/txdb/session/1?db=nope")).status_code == 404


async def test_views_link_to_the_session_page(ds, built):
    fid = built["ids"]["tools-demo"]
    for view in ("sessions_by_size", "sessions_by_context", "costliest_tool_calls", "sessions_near_limit"):
        page = (await ds.client.get(f"/{DB}/{view}")).text
        assert f'<a class="txdb-conv" href="/-/txdb/session/{fid}?db={DB}">' in page, view
    page = (await ds.client.get(f"/{DB}/sessions")).text
    assert f'href="/-/txdb/session/{fid}?db={DB}"' in page


TOOLS_ID = "0ff9cf6e-e3b0-420c-913e-806c2aa938aa"


async def test_session_page_opens_by_id_prefix_and_file_number(ds, built):
    fid = built["ids"]["tools-demo"]
    by_number = (await ds.client.get(f"/-/txdb/session/{fid}")).text
    for ref in (TOOLS_ID, TOOLS_ID[:8], TOOLS_ID[:4]):
        r = await ds.client.get(f"/-/txdb/session/{ref}")
        assert r.status_code == 200, ref
        assert "hello-from-bash" in r.text and TOOLS_ID in r.text
        assert len(re.findall(r'<li class="msg ', r.text)) == len(re.findall(r'<li class="msg ', by_number))
    # the pager keeps the id form
    paged = (await ds.client.get(f"/-/txdb/session/{TOOLS_ID}?limit=2")).text
    assert f'href="/-/txdb/session/{TOOLS_ID}?db={DB}&amp;start=2&amp;limit=2' in paged
    # a subagent by its file's stem
    sub = (await ds.client.get("/-/txdb/session/agent-af2f709f0345e1da9")).text
    assert "subagent of" in text_of(sub)
    for bad in (TOOLS_ID[:3], "ffffffff-0000", "0ff9cf6e.x", "999999"):
        assert (await ds.client.get(f"/-/txdb/session/{bad}")).status_code == 404, bad


async def test_an_ambiguous_prefix_lists_the_sessions_it_matches(tmp_path):
    root = tmp_path / "projects"
    src = Path(__file__).parent / "data" / "cli" / "-tmp-txdb-cli-fixtures-tools-demo" / f"{TOOLS_ID}.jsonl"
    other = "0ff9cf6e-1111-4222-8333-944444444444"
    (root / "-p").mkdir(parents=True)
    (root / "-p" / f"{TOOLS_ID}.jsonl").write_bytes(src.read_bytes())
    (root / "-p" / f"{other}.jsonl").write_bytes(src.read_bytes().replace(TOOLS_ID.encode(), other.encode()))
    conn = db.connect(tmp_path / "c.db")
    refresh(conn, [root])
    conn.close()
    d = make_datasette(tmp_path / "c.db")
    await d.invoke_startup()
    r = await d.client.get("/-/txdb/session/0ff9cf6e")
    assert r.status_code == 200
    assert "2 sessions match" in r.text
    for sid in (TOOLS_ID, other):
        assert f'href="/-/txdb/session/{sid}?db=c"' in r.text
        assert (await d.client.get(f"/-/txdb/session/{sid}")).status_code == 200
    assert "<li class=\"msg " not in r.text


def breakdown(page: str) -> tuple[list[tuple[str, int]], int]:
    table = page[page.index("What fills the context"):]
    table = table[:table.index("</table>")]
    rows = re.findall(r'<tr[^>]*><td[^>]*>([^<]+)</td><td class="num">[\d,]*</td><td class="num">([\d,]+)</td>', table)
    total = re.search(r'class="num breakdown-total">([\d,]+)<', table).group(1)
    return [(c, int(t.replace(",", ""))) for c, t in rows], int(total.replace(",", ""))


async def test_what_fills_the_context_adds_up_to_the_headline_estimate(ds, built):
    for name in ("tools-demo", "compact-demo", "subagent-demo"):
        fid = built["ids"][name]
        page = (await ds.client.get(f"/-/txdb/session/{fid}")).text
        est = (await ds.client.get(f"/{DB}/session_costs.json?file_id={fid}&_shape=array")).json()[0]
        headline = int(re.search(r"<dt>Estimated context</dt><dd>([\d,]+) tokens", page).group(1).replace(",", ""))
        assert headline == est["est_context_tokens"] != est["raw_context_tokens"]
        rows, total = breakdown(page)
        assert sum(t for _, t in rows) == total == headline, name
        # the fit's overhead is its own row; the raw system-prompt snapshot is not counted twice
        cats = [c for c, _ in rows]
        assert "system prompt &amp; tools (fitted)" in cats and "system_prompt" not in cats
        table = page[page.index("What fills"):]
        shares = [float(p) for p in re.findall(r'<span class="pct">([\d.]+)%</span>', table[:table.index("</table>")])]
        assert abs(sum(shares) - 100) < 0.1 * len(shares)


async def test_markdown_is_rendered_and_sanitised(tmp_path):
    """A message's Markdown is rendered; HTML or script in it never is."""
    src = Path(__file__).parent / "data" / "cli" / "-tmp-txdb-cli-fixtures-tools-demo" / f"{TOOLS_ID}.jsonl"
    hostile = ("Some *emphasis* and `code`.\n\n[x](javascript:alert(1)) [y](JaVaScRiPt:alert(2)) "
               "[z](data:text/html,alert) [ok](https://example.com/a)\n\n<script>alert(3)</script>\n\n"
               "<img src=x onerror=alert(4)>\n\n![i](http://tracker.example/p.png)\n\n"
               "<system-reminder>\nremember this\n</system-reminder>\nafter the **reminder**")
    lines = src.read_bytes().splitlines(keepends=True)
    out = []
    for ln in lines:
        obj = orjson.loads(ln)
        if obj.get("type") == "assistant":
            for c in obj["message"]["content"]:
                if c.get("type") == "text":
                    c["text"] = hostile
        if obj.get("type") == "user" and obj["message"]["content"] == "What does out.txt say now?":
            obj["isMeta"] = True  # as the CLI records a skill's body
            obj["message"]["content"] = "Base directory for this skill: /s\n\n# The skill\n\n" + "Do this. " * 200
        out.append(orjson.dumps(obj) + b"\n")
    (tmp_path / "p" / "-x").mkdir(parents=True)
    (tmp_path / "p" / "-x" / f"{TOOLS_ID}.jsonl").write_bytes(b"".join(out))
    conn = db.connect(tmp_path / "c.db")
    refresh(conn, [tmp_path / "p"])
    conn.close()
    d = make_datasette(tmp_path / "c.db")
    await d.invoke_startup()
    page = (await d.client.get(f"/-/txdb/session/{TOOLS_ID}")).text
    conv = page[page.index('id="conversation"'):]
    assert "<em>emphasis</em>" in conv and "<code>code</code>" in conv and "<strong>reminder</strong>" in conv
    assert '<a rel="noopener noreferrer nofollow" href="https://example.com/a">ok</a>' in conv
    for bad in ("<script>alert", "<img", "onerror=alert(4)>", 'href="javascript', 'href="JaVaScRiPt',
                'href="data:', 'src="http://tracker'):
        assert bad not in conv, bad
    assert "&lt;script&gt;alert(3)&lt;/script&gt;" in conv and "&lt;img src=x onerror=alert(4)&gt;" in conv
    assert "[x](javascript:alert(1))" in htmllib.unescape(conv)
    # a skill's body collapsed, its first line and size in the summary
    assert re.search(r'<details class="blk meta-text"><summary>Base directory for this skill: /s '
                     r'<span class="size">1,8\d\d chars · \d+ tok</span></summary>', conv)
    # the reminder collapsed (a closed <details>), its size shown
    assert re.search(r'<details class="blk reminder"><summary>system reminder · <span class="size">[\d,]+ chars'
                     r' · \d+ tok</span></summary><pre class="body">remember this</pre></details>', conv)


async def test_consecutive_attachments_are_one_collapsed_group(ds, built):
    fid = built["ids"]["tools-demo"]
    page = (await ds.client.get(f"/-/txdb/session/{fid}")).text
    groups = re.findall(r'<li class="attachments-group"><details><summary>(\d+) attachments · ', page)
    assert groups and all(int(n) >= 2 for n in groups)
    # the first reply is not pushed down: before it, only the prompt and the group(s)
    conv = page[page.index('<ol class="txdb-chain"'):]
    first_reply = conv.index('role-assistant')
    top = conv[:first_reply]
    top_level = re.sub(r'<li class="attachments-group">.*?</details></li>', "", top, flags=re.DOTALL)
    assert len(re.findall(r'<li class="msg ', top_level)) <= 3
    assert sum(int(n) for n in groups) == len(re.findall(r'<span class="who">attachment · ', page)) - len(
        re.findall(r'<li class="msg type-attachment[^>]*>', re.sub(
            r'<li class="attachments-group">.*?</details></li>', "", page, flags=re.DOTALL)))


async def test_every_session_url_opens_its_own_page(tmp_path):
    """A file name the route cannot carry (a space) or that reads as a file
    number (digits) gets the number form; each URL opens that session."""
    from txdb.catalog.sessions import list_sessions
    from txdb.web.urls import session_page_url, session_ref

    src = Path(__file__).parent / "data" / "cli" / "-tmp-txdb-cli-fixtures-tools-demo" / f"{TOOLS_ID}.jsonl"
    (tmp_path / "p" / "-x").mkdir(parents=True)
    names = {"my session": "aaaaaaaa-1111-4222-8333-944444444444", "1": "bbbbbbbb-1111-4222-8333-944444444444",
             TOOLS_ID: TOOLS_ID}
    for stem, sid in names.items():
        (tmp_path / "p" / "-x" / f"{stem}.jsonl").write_bytes(src.read_bytes().replace(TOOLS_ID.encode(), sid.encode()))
    conn = db.connect(tmp_path / "c.db")
    refresh(conn, [tmp_path / "p"])
    rows = list_sessions(conn)
    conn.close()
    d = make_datasette(tmp_path / "c.db")
    await d.invoke_startup()
    refs = {}
    for r in rows:
        ref = session_ref(r["path"], r["file_id"])
        refs[Path(r["path"]).stem] = ref
        page = (await d.client.get(session_page_url(ref)[len("http://127.0.0.1:8001"):])).text
        assert r["session_id"] in page and r["path"] in htmllib.unescape(page)
    assert refs[TOOLS_ID] == TOOLS_ID and isinstance(refs["my session"], int) and isinstance(refs["1"], int)


async def test_two_files_of_one_name_get_a_url_each_that_opens_that_session(tmp_path, monkeypatch):
    """Two sessions both stored as full.jsonl (in two folders): `sessions
    --urls` gives each its own URL, which opens that session's page, not
    the list of matches; the list of matches links to each page too."""
    import json
    from click.testing import CliRunner
    from txdb.cli import cli

    src = Path(__file__).parent / "data" / "cli" / "-tmp-txdb-cli-fixtures-tools-demo" / f"{TOOLS_ID}.jsonl"
    sids = ["aaaaaaaa-1111-4222-8333-944444444444", "bbbbbbbb-1111-4222-8333-944444444444"]
    for n, sid in enumerate(sids):
        d = tmp_path / "claude" / "projects" / f"-x{n}"
        d.mkdir(parents=True)
        (d / "full.jsonl").write_bytes(src.read_bytes().replace(TOOLS_ID.encode(), sid.encode()))
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "claude"))
    monkeypatch.setenv("TXDB_DB", str(tmp_path / "c.db"))
    assert CliRunner().invoke(cli, ["refresh"]).exit_code == 0
    r = CliRunner().invoke(cli, ["sessions", "--json"])
    assert r.exit_code == 0, r.output
    urls = {row["session_id"]: row["url"] for row in json.loads(r.output)}
    assert sorted(urls) == sids and len(set(urls.values())) == 2
    # the listing reads the files once (catalog.file_stem_matcher): what it matches is session_matches'
    from txdb.catalog import sessions as catalog, db as txdb_db
    from txdb.model.paths import session_stem
    conn = txdb_db.connect(tmp_path / "c.db")
    matches = catalog.file_stem_matcher(conn)
    stems = {session_stem(p) for (p,) in conn.execute("SELECT path FROM files")} | set(sids)
    assert all(matches(s) == catalog.session_matches(conn, s) for s in stems)
    conn.close()
    d = make_datasette(tmp_path / "c.db")
    await d.invoke_startup()
    for sid, url in urls.items():
        page = (await d.client.get(url[len("http://127.0.0.1:8001"):])).text
        assert sid in page and "Sessions matching" not in page
        other = next(s for s in sids if s != sid)
        assert other not in page
    matches = (await d.client.get("/-/txdb/session/full")).text
    for url in urls.values():
        assert url[len("http://127.0.0.1:8001"):] in htmllib.unescape(matches)


# ---------------------------------------------------------------- real servers


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(url: str, proc, timeout: float = 30) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"server exited: {proc.stderr.read().decode()[-2000:]}")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                return r.read().decode()
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"{url} did not answer")


def stop(proc):
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def listening_addresses(port: int) -> set[str]:
    """Local addresses with a socket listening on ``port``, read from
    /proc/net/tcp{,6}: no traffic to any address but loopback is needed."""
    out = set()
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(name).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            local, state = fields[1], fields[3]
            addr, hexport = local.rsplit(":", 1)
            if state == "0A" and int(hexport, 16) == port:  # 0A: LISTEN
                if len(addr) == 8:
                    out.add(socket.inet_ntop(socket.AF_INET, bytes.fromhex(addr)[::-1]))
                else:
                    out.add(addr)
    return out


def test_txdb_serve_starts_answers_and_binds_loopback(built, tmp_path):
    port = free_port()
    proc = subprocess.Popen([str(BIN / "txdb"), "serve", "--db", str(built["path"]), "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        index = wait_for(f"http://127.0.0.1:{port}/", proc)
        assert "txdb: Claude Code sessions" in index
        fid = built["ids"]["tools-demo"]
        page = wait_for(f"http://127.0.0.1:{port}/-/txdb/session/{fid}", proc)
        assert "hello-from-bash" in page
        if Path("/proc/net/tcp").exists():
            assert listening_addresses(port) == {"127.0.0.1"}
    finally:
        stop(proc)


def test_txdb_serve_migrates_a_fresh_catalog(tmp_path):
    path = tmp_path / "new.db"
    # An empty catalog (refresh made it; serve names a missing one: tests/test_cli.py)
    (tmp_path / "empty").mkdir()
    subprocess.run([str(BIN / "txdb"), "refresh", "--root", str(tmp_path / "empty"), "--db", str(path)],
                   capture_output=True, check=True)
    port = free_port()
    proc = subprocess.Popen([str(BIN / "txdb"), "serve", "--db", str(path), "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        page = wait_for(f"http://127.0.0.1:{port}/new/sessions_by_size", proc)
        assert "0 rows" in page
    finally:
        stop(proc)


def test_txdb_serve_on_a_busy_port_is_a_one_line_error(built):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        r = subprocess.run([str(BIN / "txdb"), "serve", "--db", str(built["path"]), "--port", str(port)],
                           capture_output=True, text=True, timeout=30)
    assert r.returncode == 1
    assert r.stderr.startswith("Error: port") and r.stderr.count("\n") == 1


def test_print_metadata_path():
    out = subprocess.run([str(BIN / "txdb"), "serve", "--print-metadata-path"], capture_output=True,
                         text=True, check=True).stdout.strip()
    assert out == metadata_path() and Path(out).is_file()


def test_plain_datasette_command_loads_the_plugin(built):
    """The README's equivalent command: plain datasette with -m finds the
    plugin through its entry point."""
    port = free_port()
    proc = subprocess.Popen(
        [str(BIN / "datasette"), "serve", str(built["path"]), "-m", metadata_path(), "--host", "127.0.0.1",
         "--port", str(port), "--setting", "sql_time_limit_ms", "5000", "--setting", "facet_time_limit_ms",
         "500", "--setting", "suggest_facets", "off"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        fid = built["ids"]["tools-demo"]
        page = wait_for(f"http://127.0.0.1:{port}/-/txdb/session/{fid}", proc)
        assert "hello-from-bash" in page
        view = wait_for(f"http://127.0.0.1:{port}/{DB}/costliest_tool_calls", proc)
        assert "txdb-conv" in view
    finally:
        stop(proc)


async def test_the_pages_gauge_is_a_share_of_the_sessions_own_window(tmp_path):
    """The window rule of sessions_near_limit (context_gauge.window_tokens):
    613,220 tokens is 61.3% of a 1M window, not 307% of 200k; 170,000 is
    85.0% of 200k."""
    from sessions import assistant, user, write

    def session(sid, gauge):
        u = user("hi", session=sid)
        a = assistant("ok", u["uuid"], session=sid, model="claude-opus-5",
                      usage={"input_tokens": 10, "output_tokens": 5, "cache_read_input_tokens": gauge - 10,
                             "cache_creation_input_tokens": 0})
        return write(tmp_path / "projects" / "-p" / f"{sid}.jsonl", [u, a])

    session("long", 613_220)
    session("short", 170_000)
    path = tmp_path / f"{DB}.db"
    conn = db.connect(path)
    refresh(conn, [tmp_path / "projects"])
    ids = dict(conn.execute("SELECT session_id, file_id FROM sessions"))
    near = dict(conn.execute("SELECT session_id, pct_of_window FROM sessions_near_limit"))
    conn.close()
    assert near == {"long": 61.3, "short": 85.0}
    d = make_datasette(path)
    await d.invoke_startup()
    for sid, want in (("long", "613,220 tokens · 61.3% of 1M"), ("short", "170,000 tokens · 85.0% of 200k")):
        text = " ".join(text_of((await d.client.get(f"/-/txdb/session/{ids[sid]}?db={DB}")).text).split())
        assert want in text, sid


def _long_output_session(root: Path) -> None:
    """A session whose tool input and output hold a word only past the 400
    characters blocks.text keeps of them (and before the 2,000 the session
    page shows)."""
    filler = "".join(f"line {i} of the output\n" for i in range(60))
    lines = [
        {"type": "user", "uuid": "u1", "parentUuid": None, "sessionId": "s-cut", "timestamp": "2026-01-01T00:00:00Z",
         "message": {"role": "user", "content": "run it"}},
        {"type": "assistant", "uuid": "a1", "parentUuid": "u1", "sessionId": "s-cut",
         "timestamp": "2026-01-01T00:00:01Z",
         "message": {"role": "assistant", "id": "m1", "model": "claude-sonnet-4-5", "content": [
             {"type": "tool_use", "id": "t1", "name": "Grep", "input": {"pattern": filler + " quaggainput"}}]}},
        {"type": "user", "uuid": "u2", "parentUuid": "a1", "sessionId": "s-cut", "timestamp": "2026-01-01T00:00:02Z",
         "message": {"role": "user", "content": [
             {"type": "tool_result", "tool_use_id": "t1", "content": filler + "quaggaoutput at the end\n"}]}},
    ]
    folder = root / "-cut"
    folder.mkdir(parents=True)
    (folder / "s-cut.jsonl").write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in lines))


async def test_a_cut_blocks_text_is_shown_whole_on_the_session_page_and_in_search_cells(tmp_path):
    """blocks.text keeps 400 characters of a long tool input or output: the
    session page shows what it shows of the block (up to 2,000 characters)
    decoded from its raw line, and a search whose word is past the stored
    start shows that word in the cell's excerpt."""
    _long_output_session(tmp_path / "projects")
    path = tmp_path / f"{DB}.db"
    conn = db.connect(path)
    refresh(conn, [tmp_path / "projects"])
    assert conn.execute("SELECT kind, length(text), cut FROM blocks WHERE chars > 1000 ORDER BY kind").fetchall() \
        == [("tool_result", 400, 1), ("tool_use", 400, 1)]
    fid, = conn.execute("SELECT id FROM files").fetchone()
    conn.close()
    d = make_datasette(path)
    await d.invoke_startup()
    page = (await d.client.get(f"/-/txdb/session/{fid}?db={DB}")).text
    assert "quaggaoutput at the end" in page and "line 59 of the output" in page
    assert "quaggainput" in text_of(page)
    for view, word in (("search_tool_output", "quaggaoutput"), ("search_tool_input", "quaggainput")):
        cells = (await d.client.get(f"/{DB}/{view}?_search={word}")).text
        assert f"<mark>{word}</mark>" in cells, view
