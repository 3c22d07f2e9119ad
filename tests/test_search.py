"""`txdb search`: the search_* views' full-text index from the command line."""

from __future__ import annotations

import json
import sqlite3

import pytest

from conftest import copy_fixture_sessions
from conftest import run as txdb
from sessions import append, assistant, user, write


@pytest.fixture(scope="module")
def catalog(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("search")
    root = copy_fixture_sessions(tmp / "projects")
    u = user("Where is the zanzibar-config file kept?", session="s-search")
    a = assistant([{"type": "thinking", "thinking": "The zanzibar file is\nprobably under etc.", "signature": "x"},
                   {"type": "text", "text": "It is kept in /etc/zanzibar."}], u["uuid"], session="s-search")
    write(root / "-home-me-search" / "s-search.jsonl", [u, a])
    db = tmp / "c.db"
    txdb("refresh", "--root", root, "--db", db, ok=True)
    return db


def search(db, *args, ok=True):
    r = txdb("search", *args, "--db", db, "--json", ok=ok)
    return json.loads(r.output) if ok else r


def test_hits_name_their_session_and_show_the_words_in_a_one_line_excerpt(catalog):
    hits = search(catalog, "zanzibar")
    assert sorted((h["session_id"], h["role"], h["kind"]) for h in hits) == [
        ("s-search", "assistant", "text"), ("s-search", "assistant", "thinking"), ("s-search", "user", "text")]
    for h in hits:
        assert "\u00bbzanzibar\u00ab" in h["excerpt"] and "\n" not in h["excerpt"]
        assert h["path"].endswith("s-search.jsonl") and h["line"] in (1, 2)
    thinking = next(h for h in hits if h["kind"] == "thinking")
    assert thinking["excerpt"] == "The \u00bbzanzibar\u00ab file is probably under etc."


def test_kind_and_limit(catalog):
    assert {h["kind"] for h in search(catalog, "zanzibar", "--kind", "thinking")} == {"thinking"}
    assert [h["kind"] for h in search(catalog, "zanzibar", "--kind", "messages")] == ["text", "text"]
    out = search(catalog, "the", "--kind", "tool-output", "--limit", "500")
    assert out and {h["kind"] for h in out} <= {"tool_result", "command_output"}
    assert {h["kind"] for h in search(catalog, "file_path", "--kind", "tool-input")} == {"tool_use"}
    assert len(search(catalog, "the", "--limit", "3")) == 3


def test_every_word_must_appear_and_the_hits_are_the_views(catalog):
    """The hits are exactly what the search view returns for the same words."""
    got = search(catalog, "kept zanzibar", "--kind", "messages", "--limit", "100")
    conn = sqlite3.connect(catalog)
    want = conn.execute("SELECT count(*) FROM search_messages WHERE block_rowid IN "
                        "(SELECT rowid FROM blocks_fts WHERE blocks_fts MATCH '\"kept\" \"zanzibar\"')").fetchone()[0]
    conn.close()
    assert len(got) == want == 2
    assert search(catalog, "zanzibar nowhere-else-at-all") == []


def test_punctuation_is_searched_as_typed_and_bad_input_is_one_line(catalog, tmp_path):
    assert [h["kind"] for h in search(catalog, "zanzibar-config")] == ["text"]
    assert search(catalog, 'un"balanced AND (') == []
    r = search(catalog, "   ", ok=False)
    assert r.exit_code == 1 and r.output == "Error: search: give a word to look for\n"
    missing = tmp_path / "none.db"
    r = search(missing, "x", ok=False)
    assert r.exit_code == 1 and r.output == f"Error: no catalog at {missing}: run `txdb refresh --db {missing}` first\n"
    assert not missing.exists()


def test_table_output_is_one_row_per_hit(catalog):
    out = txdb("search", "zanzibar", "--kind", "thinking", "--db", catalog, "--table", ok=True).output
    lines = out.splitlines()
    assert lines[0].split() == ["session_id", "timestamp", "kind", "tool_name", "title", "excerpt"]
    assert len(lines) == 3 and "\u00bbzanzibar\u00ab" in lines[2]


def test_a_table_with_no_hits_says_so(catalog):
    out = txdb("search", "qwertyuiopnothere", "--db", catalog, "--table", ok=True).output
    assert out == "No matches.\n"
    assert txdb("search", "qwertyuiopnothere", "--db", catalog, "--json", ok=True).output.strip() == "[]"


def test_words_in_quotes_are_a_phrase(catalog):
    """`"kept in"` finds the one block where the words stand together, in that
    order; the same words unquoted also find the block where they are apart."""
    apart = search(catalog, "zanzibar kept", "--kind", "messages")
    assert len(apart) == 2  # the prompt ("... zanzibar-config file kept?") and the answer ("kept ... zanzibar")
    phrase = search(catalog, '"kept in /etc"', "--kind", "messages")
    assert [h["role"] for h in phrase] == ["assistant"]
    assert search(catalog, '"zanzibar kept"', "--kind", "messages") == []
    # a phrase and a word together: both required
    assert [h["role"] for h in search(catalog, '"is kept" zanzibar', "--kind", "messages")] == ["assistant"]
    # an unmatched quote is a character, never a syntax error
    assert search(catalog, 'zanzibar "kept', "--kind", "messages") == apart


def test_a_cut_texts_words_leave_the_index_when_its_file_is_rewritten_grown_or_pruned(tmp_path):
    """blocks_fts is contentless and a long tool output keeps only its first
    400 characters in blocks.text: refresh unindexes a row with its whole
    text, decoded from the chunks before they go, so a word past the cut
    is found while it is in the file and never after (the index stays
    sound: FTS5's integrity-check over what refresh indexed)."""
    from txdb.catalog import db, search as searching
    from txdb.catalog.ingest.store import refresh

    far = "filler " * 400
    root = tmp_path / "projects"
    path = root / "-p" / "s-cut.jsonl"

    def result(word, parent):
        return user([{"type": "tool_result", "tool_use_id": "t1", "content": far + word}], parent, session="s-cut")

    u = user("go", session="s-cut")
    a = assistant([{"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": far + "quagga"}}],
                  u["uuid"], session="s-cut")
    write(path, [u, a, result("okapi", a["uuid"])])
    conn = db.connect(tmp_path / "c.db")
    refresh(conn, [root])

    def found(word):
        return sorted(h["kind"] for h in searching.search(conn, word, limit=None))

    def sound():
        conn.execute("INSERT INTO blocks_fts (blocks_fts, rank) VALUES ('integrity-check', 0)")

    assert conn.execute("SELECT count(*) FROM blocks WHERE cut = 1").fetchone() == (2,)
    assert found("okapi") == ["tool_result"] and found("quagga") == ["tool_use"]
    sound()
    write(path, [u, a, result("wombat", a["uuid"])])  # rewritten: the result says another word
    refresh(conn, [root])
    assert found("okapi") == [] and found("wombat") == ["tool_result"] and found("quagga") == ["tool_use"]
    sound()
    last = orjson_last_uuid(path)
    append(path, user([{"type": "tool_result", "tool_use_id": "t1", "content": far + "narwhal"}], last,
                      session="s-cut"))  # grown
    refresh(conn, [root])
    assert found("narwhal") == ["tool_result"] and found("wombat") == ["tool_result"]
    sound()
    path.unlink()
    refresh(conn, [root], prune=True)  # pruned: its rows and their index entries go
    assert found("wombat") == [] and found("quagga") == [] and found("narwhal") == []
    assert conn.execute("SELECT count(*) FROM blocks_fts WHERE blocks_fts MATCH 'filler'").fetchone() == (0,)
    sound()


def orjson_last_uuid(path):
    return json.loads(path.read_bytes().splitlines()[-1])["uuid"]
