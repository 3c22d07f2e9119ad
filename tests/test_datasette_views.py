"""txdb's Datasette: metadata, every table and view, search, JSON cells,
read-only serving. In-process through Datasette's own client, on a catalog
refreshed from the fixture sessions (tests/data/projects + tests/data/cli)."""

from __future__ import annotations

import hashlib
import json
import re
import urllib.parse
from pathlib import Path

import pytest

from txdb.catalog import db
from txdb.web.metadata import load_metadata, make_datasette, metadata_path
from txdb.catalog.ingest.store import refresh

from conftest import DATA, copy_fixture_sessions, rows

DB = "catalog"  # the served database is named after the file: catalog.db


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A catalog of the fixture sessions, one broken copy and one surgery row."""
    tmp = tmp_path_factory.mktemp("ds")
    root = tmp / "projects"
    copy_fixture_sessions(root)
    # A broken copy of the tools session: one parentUuid points nowhere.
    src = next((DATA / "cli" / "-tmp-txdb-cli-fixtures-tools-demo").glob("*.jsonl"))
    broken_dir = root / "-tmp-broken"
    broken_dir.mkdir()
    lines = src.read_bytes().splitlines(keepends=True)
    for i, line in enumerate(lines):
        obj = json.loads(line)
        if obj.get("type") == "assistant" and obj.get("parentUuid"):
            obj["parentUuid"] = "00000000-dead-beef-0000-000000000000"
            lines[i] = json.dumps(obj, separators=(",", ":")).encode() + b"\n"
            break
    (broken_dir / "11111111-2222-3333-4444-555555555555.jsonl").write_bytes(b"".join(lines))
    path = tmp / f"{DB}.db"
    conn = db.connect(path)
    refresh(conn, [root])
    tools_id = conn.execute("SELECT id FROM files WHERE path LIKE '%tools-demo%'").fetchone()[0]
    conn.execute(
        "INSERT INTO surgeries (at, command, arguments, session_id, file_id, path, backup_path, "
        "records_changed, tokens_before, tokens_after) VALUES (?,?,?,?,?,?,?,?,?,?)",
        ("2026-11-30T09:00:00Z", "strip-tools", json.dumps({"where": "tokens > 10", "keep_last": 2}),
         "0ff9cf6e", tools_id, str(src), str(src) + ".bak.1", 3, 16424, 12000),
    )
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return {"path": path, "root": root, "tools_id": tools_id}


@pytest.fixture
def ro(built):
    conn = db.connect_readonly(built["path"])
    yield conn
    conn.close()


@pytest.fixture
async def ds(built):
    d = make_datasette(built["path"])
    await d.invoke_startup()
    return d


async def get_json(ds, path: str) -> list[dict]:
    sep = "&" if "?" in path else "?"
    r = await ds.client.get(f"/{DB}/{path.replace('?', '.json?', 1) if '?' in path else path + '.json'}{sep}_shape=array&_size=max")
    assert r.status_code == 200, r.text[:500]
    return r.json()


async def get_html(ds, path: str) -> str:
    r = await ds.client.get(path)
    assert r.status_code == 200, r.text[:500]
    return r.text


# ---------------------------------------------------------------- metadata


def test_metadata_describes_every_table_view_and_column(ro):
    meta = json.loads(Path(metadata_path()).read_text())
    tables = meta["databases"]["txdb"]["tables"]
    names = {r[0]: r[1] for r in ro.execute(
        "SELECT name, type FROM sqlite_master WHERE type IN ('table', 'view') "
        "AND name NOT LIKE 'blocks_fts_%' AND name NOT LIKE 'history_fts_%' AND name NOT LIKE 'sqlite_%'")}
    missing = sorted(n for n in names if n not in tables)
    assert not missing, f"no metadata for {missing}"
    for name, kind in names.items():
        t = tables[name]
        if t.get("hidden"):
            continue
        assert t.get("title") and t.get("description"), name
        cols = {r[1] for r in ro.execute(f'PRAGMA table_info("{name}")')}
        described = set(t.get("columns", {}))
        assert described <= cols, f"{name}: described columns not in it: {described - cols}"
        assert cols <= described, f"{name}: undescribed columns: {cols - described}"
        for facet in t.get("facets", []):
            assert facet in cols, f"{name}: facet {facet}"
        for key in ("sort", "sort_desc", "label_column"):
            if key in t:
                assert t[key] in cols, f"{name}: {key} {t[key]}"
        if "fts_table" in t:
            assert t["fts_table"] in ("blocks_fts", "history_fts")
            assert t.get("fts_pk", "rowid") in cols | {"rowid"}


def test_metadata_rekeyed_for_the_served_file():
    meta = load_metadata("catalog")
    assert "catalog" in meta["databases"] and "txdb" not in meta["databases"]
    assert 'href="/catalog/sessions_by_size"' in meta["databases"]["catalog"]["description_html"]
    assert "txdb" in load_metadata("txdb")["databases"]


async def test_index_and_database_pages(ds):
    html = await get_html(ds, "/")
    assert "txdb: Claude Code sessions" in html
    html = await get_html(ds, f"/{DB}")
    assert f'href="/{DB}/sessions_by_size"' in html
    for view in ("sessions_by_size", "costliest_tool_calls", "search_tool_output", "surgery_log"):
        assert view in html


async def test_every_table_and_view_answers_with_rows(ds, ro):
    empty_ok = {"parse_errors", "chain_problems", "persisted", "persisted_by_session", "markers",  # none here
                "gone_sessions", "secret_findings", "secret_scans", "secrets",
                "pruned_sessions", "restored_copies",
                "history", "history_files", "history_sessions"}  # secrets: tests/test_secrets.py; the restore tables:
    # tests/test_restore_whole.py; history.jsonl (none beside these roots): tests/test_history.py
    names = [r[0] for r in ro.execute(
        "SELECT name FROM sqlite_master WHERE type IN ('table', 'view') AND name NOT LIKE 'sqlite_%' "
        "AND name NOT LIKE '%fts%' AND name NOT LIKE '\\_%' ESCAPE '\\'")]
    assert len(names) >= 30
    for name in names:
        data = await get_json(ds, name)
        if name not in empty_ok:
            assert data, f"{name} is empty"
        html = await get_html(ds, f"/{DB}/{name}")
        assert ("<table" in html) == bool(data), name


# ---------------------------------------------------------------- views


async def test_sessions_by_size(ds, built):
    data = await get_json(ds, "sessions_by_size")
    sizes = [r["file_bytes"] for r in data]
    assert sizes == sorted(sizes, reverse=True)
    for r in data:
        assert r["file_bytes"] == Path(r["path"]).stat().st_size
        assert r["conversation"] == r["file_id"]
    tools = next(r for r in data if r["file_id"] == built["tools_id"])
    assert tools["gauge_tokens"] > 0 and tools["kind"] == "session"
    html = await get_html(ds, f"/{DB}/sessions_by_size")
    assert f'href="/-/txdb/session/{built["tools_id"]}?db={DB}"' in html
    # amounts with thousands separators; ids and positions as they are
    cells: dict[str, str] = {}
    for col, cell in re.findall(r'<td class="col-(\w+) type-int">([^<]*)</td>', html):
        cells.setdefault(col, cell)  # the first row's
    top = data[0]
    assert top["file_bytes"] >= 1000 and cells["file_bytes"] == f'{top["file_bytes"]:,}'
    assert cells["lines"] == f'{top["lines"]:,}' and cells["file_id"] == str(top["file_id"])


async def test_sessions_by_context_agrees_with_session_costs(ds, ro):
    data = await get_json(ds, "sessions_by_context")
    est = [r["est_context_tokens"] for r in data]
    assert est == sorted(est, reverse=True)
    costs = {r["file_id"]: r for r in rows(ro, "SELECT * FROM session_costs")}
    assert len(data) == len(costs)
    for r in data:
        c = costs[r["file_id"]]
        assert (r["est_context_tokens"], r["chain_tokens"], r["system_prompt_tokens"], r["gauge_tokens"]) == (
            c["est_context_tokens"], c["chain_tokens"], c["system_prompt_tokens"], c["gauge_tokens"])


async def test_context_by_category_and_tool(ds, built):
    fid = built["tools_id"]
    cats = await get_json(ds, f"context_by_category?file_id={fid}")
    by = {r["category"]: r for r in cats}
    assert {"text", "thinking", "tool_use", "tool_result", "system_prompt", "attachment"} <= set(by)
    assert abs(sum(r["pct_of_session"] for r in cats) - 100) < 1
    assert max(cats, key=lambda r: r["tokens"])["category"] == "system_prompt"
    tools = {r["tool_name"]: r for r in await get_json(ds, f"context_by_tool?file_id={fid}")}
    assert {k: v["calls"] for k, v in tools.items()} == {"Bash": 1, "Read": 2, "Write": 1, "Edit": 1}
    assert all(v["errors"] == 0 for v in tools.values())


async def test_attachment_policy(ds, ro):
    data = await get_json(ds, "attachment_policy")
    assert sum(r["attachments"] for r in data) == ro.execute(
        "SELECT sum(count) FROM attachments_by_type").fetchone()[0]
    for r in data:
        assert r["kept"] + r["dropped"] == r["attachments"]
        if r["policy"] != "superseded":
            assert r["dropped"] == 0
    assert any(r["dropped"] > 0 and r["policy"] == "superseded" for r in data)


async def test_costliest_tool_calls(ds, built):
    data = await get_json(ds, "costliest_tool_calls")
    totals = [r["total_tokens"] for r in data]
    assert totals == sorted(totals, reverse=True)
    for r in data:
        assert r["total_tokens"] == r["input_tokens"] + r["result_tokens"]
    mine = [r for r in data if r["file_id"] == built["tools_id"]]
    assert sorted(r["tool_name"] for r in mine) == ["Bash", "Edit", "Read", "Read", "Write"]
    png = [r for r in mine if r["tool_name"] == "Read" and r["result_images"]]
    assert len(png) == 1 and "dot.png" in png[0]["input"]
    bash = next(r for r in mine if r["tool_name"] == "Bash")
    assert "hello-from-bash" in bash["input"] and bash["on_chain"] == 1


async def test_sessions_near_limit(ds, ro):
    data = await get_json(ds, "sessions_near_limit")
    assert data
    for r in data:
        assert r["pct_of_200k"] == round(100 * r["gauge_tokens"] / 200000, 1)
        assert r["status"] in ("ok", "near", "over")
        assert r["status"] == ("over" if r["gauge_tokens"] > r["window_tokens"] else
                               "near" if r["gauge_tokens"] >= 0.8 * r["window_tokens"] else "ok")
    assert len(data) == ro.execute("SELECT count(*) FROM context_gauge g JOIN files f ON f.id = g.file_id "
                                   "WHERE f.kind = 'session'").fetchone()[0]


def test_sessions_near_limit_judges_each_session_by_its_own_window(tmp_path):
    """634k of a 1M window is 63.4%: ok, not over; 170k of 200k is near;
    past 1M is over; a subagent's transcript (never resumed) is not listed."""
    from sessions import assistant, user, write

    def session(sid, gauge, model="claude-opus-5", folder=None):
        u = user("hi", session=sid)
        a = assistant("ok", u["uuid"], session=sid, model=model,
                      usage={"input_tokens": 10, "output_tokens": 5, "cache_read_input_tokens": gauge - 10,
                             "cache_creation_input_tokens": 0})
        return write(folder or tmp_path / "projects" / "-p" / f"{sid}.jsonl", [u, a])

    session("big", 634_000)
    session("near", 170_000)
    session("huge", 1_050_000)
    session("tagged", 850_000, model="claude-opus-5[1m]")
    session("ok", 50_000)
    session("agent-a1", 190_000, folder=tmp_path / "projects" / "-p" / "ok" / "subagents" / "agent-a1.jsonl")
    conn = db.connect(tmp_path / "c.db")
    refresh(conn, [tmp_path / "projects"])
    assert conn.execute("SELECT count(*) FROM files WHERE kind = 'subagent'").fetchone()[0] == 1
    got = {r["session_id"]: (r["window_tokens"], r["pct_of_window"], r["status"])
           for r in db.rows(conn, "SELECT * FROM sessions_near_limit")}
    assert got == {"big": (1_000_000, 63.4, "ok"), "near": (200_000, 85.0, "near"),
                   "huge": (1_000_000, 105.0, "over"), "tagged": (1_000_000, 85.0, "near"),
                   "ok": (200_000, 25.0, "ok")}


async def test_chain_problems_shows_the_dangling_parent(ds):
    # resume bridges this gap (the record before was written within 5 s):
    # a warning, as `txdb verify` says, not an error
    data = await get_json(ds, "chain_problems")
    dangling = [r for r in data if r["problem"] == "bridged_parent"]
    assert len(dangling) == 1 and dangling[0]["severity"] == "warning"
    assert "00000000-dead-beef" in dangling[0]["detail"]
    assert dangling[0]["project"] == "-tmp-broken"
    assert all(r["severity"] in ("error", "warning") for r in data)


async def test_surgery_log(ds, built):
    data = await get_json(ds, "surgery_log")
    assert len(data) == 1
    r = data[0]
    assert (r["command"], r["tokens_saved"], r["pct_saved"]) == ("strip-tools", 4424, 26.9)
    assert r["conversation"] == built["tools_id"] and r["project"] == "-tmp-txdb-cli-fixtures-tools-demo"
    html = await get_html(ds, f"/{DB}/surgery_log")
    # arguments: JSON shown pretty-printed
    assert '<pre class="txdb-json">{\n  &#34;where&#34;: &#34;tokens &gt; 10&#34;,' in html or \
        '<pre class="txdb-json">{\n  &quot;where&quot;' in html or '"where": "tokens &gt; 10"' in html


async def test_usage_by_day_and_model(ds, ro):
    # The broken copy repeats the tools session's API messages: billed once.
    total = ro.execute("SELECT count(*), sum(coalesce(output_tokens, 0)) FROM billed_usage").fetchone()
    copies = ro.execute("SELECT count(*) FROM usage u JOIN files f ON f.id = u.file_id "
                        "WHERE f.path LIKE '%-tmp-broken%'").fetchone()[0]
    assert copies > 0 and ro.execute("SELECT count(*) FROM usage").fetchone()[0] == total[0] + copies
    days = await get_json(ds, "usage_by_day")
    assert sum(r["api_messages"] for r in days) == total[0]
    assert sum(r["output_tokens"] for r in days) == total[1]
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\d", r["day"]) for r in days if r["day"])
    models = await get_json(ds, "usage_by_model")
    assert sum(r["api_messages"] for r in models) == total[0]
    assert "claude-opus-5-5" in {r["model"] for r in models}


# ---------------------------------------------------------------- search


async def test_views_over_the_whole_catalog_facet_on_request_only(ds):
    """A facet re-runs its view once per column: the search and usage views
    have none by default (search_blocks at 10x the corpus: 1.2-1.6 s with
    them, 0.09 s without); asked for, a facet still counts."""
    for view in ("search_blocks", "search_messages", "search_tool_output", "usage_by_day", "session_usage",
                 "billed_cost"):
        r = await ds.client.get(f"/catalog/{view}.json?_extra=facet_results")
        assert r.status_code == 200
        assert r.json()["facet_results"] in ({}, {"results": {}, "timed_out": []}), view
    r = await ds.client.get("/catalog/search_blocks.json?_facet=kind&_extra=facet_results")
    facets = r.json()["facet_results"]
    facets = facets.get("results", facets)
    counts = {f["value"]: f["count"] for f in facets["kind"]["results"]}
    assert counts.get("text", 0) > 0 and sum(counts.values()) > 0


async def test_search_each_kind_on_its_own(ds, built):
    out = await get_json(ds, "search_tool_output?_search=hello-from-bash")
    assert out and all("hello-from-bash" in r["text"] for r in out)
    assert {r["tool_name"] for r in out} == {"Bash"}
    inp = await get_json(ds, "search_tool_input?_search=hello-from-bash")
    assert inp and all(r["kind"] == "tool_use" for r in inp)
    # the phrase is in tool input and output only
    assert await get_json(ds, "search_messages?_search=hello-from-bash") == []
    assert await get_json(ds, "search_thinking?_search=hello-from-bash") == []
    th = await get_json(ds, "search_thinking?_search=image")
    assert any(r["text"] == "Now the image." for r in th)
    msgs = await get_json(ds, "search_messages?_search=inspect project")
    assert any(r["text"].startswith("Please inspect this project") for r in msgs)
    # the HTML marks the match and the blocks table is searchable too
    html = await get_html(ds, f"/{DB}/search_tool_output?_search=hello-from-bash")
    assert "<mark>hello</mark>" in html and 'name="_search"' in html
    blocks = await get_json(ds, "blocks?_search=gamma")
    assert blocks and all("gamma" in r["text"] for r in blocks)


def test_fts_kept_current_by_refresh(tmp_path):
    src = next((DATA / "cli" / "-tmp-txdb-cli-fixtures-tools-demo").glob("*.jsonl"))
    proj = tmp_path / "projects" / "-p"
    proj.mkdir(parents=True)
    f = proj / src.name
    f.write_bytes(src.read_bytes())
    conn = db.connect(tmp_path / "c.db")

    def hits(word):
        return conn.execute("SELECT count(*) FROM blocks_fts WHERE blocks_fts MATCH ?", (word,)).fetchone()[0]

    def check():
        conn.execute("INSERT INTO blocks_fts(blocks_fts) VALUES ('integrity-check')")

    refresh(conn, [tmp_path / "projects"])
    check()
    assert hits("gamma") == 1  # the Read result of notes.txt
    # grown: an appended line is searchable after the next refresh
    last = json.loads(f.read_bytes().splitlines()[-1])
    extra = {"type": "user", "uuid": "aaaaaaaa-0000-0000-0000-000000000001", "parentUuid": last.get("uuid"),
             "sessionId": last.get("sessionId"), "timestamp": "2026-11-30T09:00:00.000Z",
             "message": {"role": "user", "content": "zanzibar quokka"}}
    with f.open("ab") as fh:
        fh.write(json.dumps(extra).encode() + b"\n")
    refresh(conn, [tmp_path / "projects"])
    check()
    assert hits("zanzibar") == 1
    # rewritten: the old text leaves the index, the new one enters it
    f.write_bytes(src.read_bytes().replace(b"hello-from-bash", b"howdy-from-bash"))
    refresh(conn, [tmp_path / "projects"])
    check()
    assert hits("zanzibar") == 0 and hits('"hello-from-bash"') == 0 and hits('"howdy-from-bash"') >= 2
    # pruned: a vanished file's rows and index entries go
    f.unlink()
    refresh(conn, [tmp_path / "projects"], prune=True)
    check()
    assert conn.execute("SELECT count(*) FROM blocks_fts WHERE blocks_fts MATCH 'howdy OR gamma'").fetchone()[0] == 0
    conn.close()


# ---------------------------------------------------------------- cells


async def test_json_cells_pretty_and_collapsed(ds, ro, built):
    fid = built["tools_id"]
    offset = ro.execute("SELECT offset FROM records WHERE file_id = ? AND type = 'assistant' LIMIT 1",
                        (fid,)).fetchone()[0]
    # a record's raw JSON, as ad-hoc SQL asks for it (the plugin's txdb_json)
    one = await get_html(ds, f"/{DB}?" + urllib.parse.urlencode(
        {"sql": f"select txdb_json(file_id, offset) as raw from records where file_id = {fid} and offset = {offset}"}))
    assert '{\n  &#34;' in one or '{\n  &quot;' in one
    table_html = await get_html(ds, f"/{DB}?" + urllib.parse.urlencode(
        {"sql": f"select offset, txdb_json(file_id, offset) as raw from records where file_id = {fid} limit 5"}))
    assert table_html.count('<details class="txdb-json">') == 5
    assert "bytes</span></summary>" in table_html


async def test_long_text_cells_are_excerpted(ds, ro):
    long_id, chars = ro.execute(
        "SELECT rowid, chars FROM blocks WHERE kind = 'tool_result' ORDER BY chars DESC LIMIT 1").fetchone()
    assert chars > 1000
    html = await get_html(ds, f"/{DB}/search_tool_output?block_rowid={long_id}")
    assert f"{chars:,} chars</span>" in html


async def test_serving_never_writes_the_catalog(built):
    path = built["path"]
    before = hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mtime_ns
    d = make_datasette(path)
    await d.invoke_startup()
    for url in ("/", f"/{DB}", f"/{DB}/sessions_by_size", f"/-/txdb/session/{built['tools_id']}",
                f"/{DB}/search_messages?_search=inspect"):
        assert (await d.client.get(url)).status_code == 200
    r = await d.client.post(f"/{DB}", data={"sql": "DELETE FROM files"})
    assert r.status_code != 200 or "DELETE" not in r.text
    r = await d.client.get(f"/{DB}.json?sql=DELETE+FROM+files")
    assert r.status_code == 400
    assert (hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mtime_ns) == before
    assert ro_count(path) > 0


def ro_count(path):
    conn = db.connect_readonly(path)
    try:
        return conn.execute("SELECT count(*) FROM files").fetchone()[0]
    finally:
        conn.close()


async def test_every_titled_view_links_its_titles_to_the_session_page(ds, ro):
    """Issue 26: no list of views by hand: every table or view with a title
    beside its file_id (or conversation) links that title to the session page."""
    names = [r[0] for r in ro.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view') "
                                      "AND name NOT LIKE 'sqlite_%' ORDER BY name")]
    titled = []
    for name in names:
        cols = {r[1] for r in ro.execute(f'PRAGMA table_info("{name}")')}
        if "title" not in cols or not cols & {"file_id", "conversation"}:
            continue
        key = "file_id" if "file_id" in cols else "conversation"
        row = ro.execute(f'SELECT "{key}" FROM "{name}" WHERE "{key}" IS NOT NULL LIMIT 1').fetchone()
        if row is None:
            continue  # nothing of it in the fixture catalog
        titled.append(name)
        html = await get_html(ds, f"/{DB}/{name}")
        assert f'<a href="/-/txdb/session/{row[0]}?db={DB}">' in html, name  # the title's link, not the conversation's
    assert {"sessions", "sessions_by_size", "block_targets", "chain_targets", "surgery_log"} <= set(titled)


async def test_a_cut_blocks_row_page_shows_its_whole_text(ds, ro):
    """blocks.text keeps 400 characters of a long tool output (cut = 1);
    its row page decodes the whole text (txdb_text), its table cell names
    the whole length."""
    import html as htmlmod

    fid, offset, idx, chars, whole = ro.execute(
        "SELECT file_id, offset, idx, chars, txdb_text(file_id, offset, idx) FROM blocks WHERE cut = 1 "
        "AND kind = 'tool_result' ORDER BY chars DESC LIMIT 1").fetchone()
    assert len(whole) == chars > 2001  # longer than the session page shows, too
    page = await get_html(ds, f"/{DB}/blocks/{fid},{offset},{idx}")
    tail = whole.rstrip()[-60:].split("\n")[-1][-30:]
    assert htmlmod.escape(tail, quote=False) in page or htmlmod.escape(tail) in page
    assert "more characters" not in page
