"""The plugin beside other databases: installed in a Datasette that also
serves unrelated databases, its hooks act on the txdb catalog only (their
pages keep Datasette's look, their `raw`/`arguments`/`iterations` columns
are not re-rendered); and a line nested thousands of levels deep (valid
JSON, stored by refresh) renders as its text instead of failing the page.
Real Datasette, in-process through its own client, on real SQLite files."""

from __future__ import annotations

import json
import re
import sqlite3
from urllib.parse import urlencode

import pytest
from datasette.app import Datasette

from test_bad_input import deep_session
from txdb.catalog import db
from txdb.catalog.ingest.chunks import json_function
from txdb.catalog.ingest.store import refresh
from txdb.web.metadata import load_metadata

CSS = "/-/txdb/txdb.css"
RAW = json.dumps({"type": "user", "message": {"content": "hello from elsewhere"}})


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("scope")
    root = tmp / "projects"
    for depth, place in ((3000, "tool_use"), (2000, "attachment")):
        data, _line = deep_session(depth, place)
        f = root / f"-deep-{place}" / f"{depth:08d}-0000-0000-0000-000000000000.jsonl"
        f.parent.mkdir(parents=True)
        f.write_bytes(data)
    # No title and no prompt in words: the first user message is a tool result.
    from sessions import assistant, user, write
    u = user([{"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok"}], None, session="untitled")
    write(root / "-untitled" / "00000001-0000-0000-0000-000000000000.jsonl",
          [u, assistant("done", u["uuid"], session="untitled")])
    catalog = tmp / "catalog.db"
    conn = db.connect(catalog)
    refresh(conn, [root])
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    other = tmp / "other.db"
    o = sqlite3.connect(other)
    o.executescript("CREATE TABLE events (id INTEGER PRIMARY KEY, file_id INTEGER, title TEXT, raw TEXT, "
                    "arguments TEXT, iterations TEXT, conversation INTEGER)")
    o.execute("INSERT INTO events VALUES (1, 1, 'a title', ?, ?, ?, 1)", (RAW, '{"a": [1, 2]}', "[1, 2, 3]"))
    o.commit()
    o.close()
    return {"catalog": catalog, "other": other}


@pytest.fixture
async def ds(served):
    d = Datasette([str(served["catalog"]), str(served["other"])], metadata=load_metadata("catalog"))
    await d.invoke_startup()
    return d


async def html(ds, path: str) -> str:
    r = await ds.client.get(path)
    assert r.status_code == 200, r.text[:500]
    return r.text


@pytest.mark.parametrize("path", ["/other", "/other/events", "/other/events/1",
                                  "/other?sql=select+raw,+arguments,+iterations,+title,+file_id+from+events"])
async def test_other_databases_keep_datasettes_look(ds, path):
    page = await html(ds, path)
    assert CSS not in page
    assert "txdb-json" not in page and "/-/txdb/session/" not in page and "txdb-conv" not in page
    if path != "/other":
        assert "hello from elsewhere" in page  # the raw text, as Datasette shows any text


@pytest.mark.parametrize("path", ["/catalog", "/catalog/records", "/catalog/sessions"])
async def test_catalog_pages_have_the_plugins_look(ds, path):
    page = await html(ds, path)
    assert CSS in page


async def test_catalog_cells_are_still_rendered(ds, served):
    page = await html(ds, "/catalog?" + urlencode({"sql": f"select {RAW_SQL} as raw from records limit 3"}))
    assert 'class="txdb-json"' in page
    page = await html(ds, "/catalog/sessions")
    assert "/-/txdb/session/" in page


RAW_SQL = "txdb_json(file_id, offset)"  # a record's raw JSON (txdb/catalog/ingest/chunks.py)


def _catalog(served) -> sqlite3.Connection:
    conn = sqlite3.connect(served["catalog"])
    conn.create_function("txdb_json", 2, json_function(conn))
    return conn


async def test_a_line_nested_thousands_deep_renders_as_its_text(ds, served):
    conn = _catalog(served)
    deep = conn.execute(f"SELECT file_id, offset, {RAW_SQL} FROM records WHERE {RAW_SQL} LIKE '%[[[[[[[[[[%' "
                        f"ORDER BY length({RAW_SQL}) DESC").fetchall()
    conn.close()
    assert len(deep) == 2
    for file_id, offset, raw in deep:
        with pytest.raises(RecursionError):
            json.loads(raw)  # what the plugin tries first
        # the raw JSON, asked for by txdb_json() (the plugin's) on a query page, shown as its text
        page = await html(ds, "/catalog?" + urlencode(
            {"sql": f"select file_id, offset, {RAW_SQL} as raw from records where file_id = {file_id} "
                    f"and offset = {offset}"}))
        assert "[[[[[[[[[[" in page, page[:2000]
        page = await html(ds, f"/catalog/records/{file_id},{offset}")
        assert "Traceback" not in page
        page = await html(ds, f"/-/txdb/session/{file_id}?db=catalog")
        assert "Traceback" not in page


async def test_a_session_with_neither_title_nor_prompt_has_its_page(ds, served):
    conn = sqlite3.connect(served["catalog"])
    (file_id,) = conn.execute("SELECT id FROM files WHERE path LIKE '%-untitled%'").fetchone()
    conn.close()
    page = await html(ds, f"/-/txdb/session/{file_id}?db=catalog")
    assert "<title>untitled · txdb session</title>" in page  # named by its session id
    assert "(untitled session)" in page



async def test_a_deep_line_is_cut_to_size_on_table_pages(ds, served):
    conn = _catalog(served)
    deep = conn.execute(f"SELECT file_id, length({RAW_SQL}) FROM records WHERE {RAW_SQL} LIKE '%[[[[[[[[[[%'").fetchall()
    conn.close()
    for file_id, length in deep:
        assert length > 4000
        page = await html(ds, "/catalog?" + urlencode(
            {"sql": f"select offset, {RAW_SQL} as raw from records where file_id = {file_id}"}))
        cells = re.findall(r'<details class="txdb-json">.*?</details>', page, re.S)
        assert any("[[[[[[[[[[" in c and "more characters (see the row&#x27;s .json)" in c for c in cells)
        assert "[" * 4001 not in page  # the line is not all there
