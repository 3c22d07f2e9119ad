"""No SQL a user sends reaches fts3_tokenizer: with two arguments it
replaces a tokenizer's C function pointer (then called by the next FTS3
table using it), with one it hands out that pointer (an address in
memory). `txdb query` and the Datasette `txdb serve` runs refuse it, in
any spelling; the SQLite Python ships here has it on."""

from __future__ import annotations

import sqlite3

import orjson
import pytest
from datasette.app import Datasette

from conftest import run
from sessions import conversation, write
from txdb.catalog import db
from txdb.catalog.ingest.store import refresh
from txdb.web.metadata import load_metadata

CALLS = ["select fts3_tokenizer('simple', x'4141414141414141')",
         "select hex(fts3_tokenizer('simple'))",
         "select FTS3_Tokenizer('porter', zeroblob(8))",
         "with t(n) as (select 'simple') select fts3_tokenizer(n) from t"]


@pytest.fixture(scope="module")
def catalog(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fts3")
    root = tmp / "projects"
    write(root / "-p" / "s.jsonl", conversation(2, session="s"))
    path = tmp / "c.db"
    conn = db.connect(path)
    refresh(conn, [root])
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return path


def test_the_function_is_there_to_refuse():
    """Without the guard, both forms run (the test would prove nothing otherwise)."""
    conn = sqlite3.connect(":memory:")
    assert conn.execute(CALLS[0]).fetchone() == (b"AAAAAAAA",)
    assert len(conn.execute(CALLS[1]).fetchone()[0]) == 16


@pytest.mark.parametrize("sql", CALLS)
def test_txdb_query_refuses_fts3_tokenizer(catalog, sql):
    r = run("query", sql, "--db", catalog, ok=False)
    assert r.exit_code == 1
    assert r.output.startswith("Error: query refused: ") and "fts3_tokenizer() is not allowed" in r.output.lower()
    assert r.output.count("\n") == 1
    # Other functions still run.
    ok = run("query", "select count(*) as n, hex('a') as h from records", "--db", catalog, "--json", ok=True)
    assert orjson.loads(ok.output)[0]["h"] == "61"


@pytest.fixture
async def ds(catalog):
    d = Datasette([str(catalog)], metadata=load_metadata("catalog"))
    await d.invoke_startup()
    return d


@pytest.mark.parametrize("sql", CALLS)
async def test_datasette_refuses_fts3_tokenizer(ds, sql):
    r = await ds.client.get("/c.json", params={"sql": sql, "_shape": "array"})
    assert r.status_code == 400, r.text[:300]
    assert "AAAAAAAA" not in r.text and "not authorized" in r.text
    ok = await ds.client.get("/c.json", params={"sql": "select hex('a') as h, count(*) as n from records",
                                                "_shape": "array"})
    assert ok.status_code == 200 and ok.json()[0]["h"] == "61"
    # Datasette's own pages, which read the catalog through the same connections, still work.
    assert (await ds.client.get("/c/records")).status_code == 200
