"""Hostile and broken lines: each is a record, or a parse error, never a crash."""

from __future__ import annotations

import orjson
import pytest

from conftest import rows
from sessions import conversation, dumps, user
from txdb.model import chain as chainmod
from txdb.catalog import chain_rows
from txdb.catalog.ingest.store import refresh
from txdb.model.transcript import Transcript


def ingest(conn, tmp_path, data: bytes):
    root = tmp_path / "projects"
    path = root / "-p" / "s.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    stats = refresh(conn, [root])
    recs = rows(conn, "SELECT line, type, uuid, txdb_json(file_id, offset) AS raw FROM records ORDER BY offset")
    errs = rows(conn, "SELECT line, message, recovered FROM parse_errors ORDER BY line")
    return stats, recs, errs


def good(text="hello"):
    return dumps(user(text, None))


def test_malformed_json_goes_to_parse_errors_and_the_run_goes_on(conn, tmp_path):
    data = good("a") + b"\n" + b'{"type":"user","message":' + b"\n" + good("b") + b"\n"
    stats, recs, errs = ingest(conn, tmp_path, data)
    assert [r["line"] for r in recs] == [1, 3]
    assert len(errs) == 1 and errs[0]["line"] == 2 and errs[0]["recovered"] == 0
    assert errs[0]["message"] == "invalid JSON: Expecting value at column 26"
    assert stats.parse_errors == 1


def test_two_objects_glued_on_one_line_are_split(conn, tmp_path):
    a = user("first", None)
    b = {"type": "summary", "summary": "s", "leafUuid": a["uuid"]}
    stats, recs, errs = ingest(conn, tmp_path, dumps(a) + dumps(b) + b"\n")
    assert [(r["line"], r["type"]) for r in recs] == [(1, "user"), (1, "summary")]
    assert errs == [{"line": 1, "message": "2 JSON objects glued on one line; split", "recovered": 1}]
    offsets = [r[0] for r in conn.execute("SELECT offset FROM records ORDER BY offset")]
    assert offsets == [0, len(dumps(a))]


def test_the_second_object_of_a_glued_line_is_a_record_off_the_chain(conn, tmp_path):
    """Claude Code reads only the first object of a glued line: the prompt
    glued behind an assistant line is kept in `records` but is on no chain
    (the catalog's, refresh's or the surgery engine's); the record below it
    is bridged to the line before, as resume does."""
    objs = conversation(3)
    data = b"".join(dumps(o) + (b"" if i == 3 else b"\n") for i, o in enumerate(objs))
    _, recs, _ = ingest(conn, tmp_path, data)
    assert [r["uuid"] for r in recs if r["line"] == 4] == [objs[3]["uuid"], objs[4]["uuid"]]
    expected = [o["uuid"] for i, o in enumerate(objs) if i != 4]
    assert [r["uuid"] for r in rows(conn, "SELECT uuid FROM active_chain ORDER BY pos")] == expected
    (fid,) = conn.execute("SELECT id FROM files").fetchone()
    assert [n.uuid for n in chainmod.active_chain(chain_rows.load_nodes(conn, fid))] == expected
    t = Transcript.load(tmp_path / "projects" / "-p" / "s.jsonl")
    assert [r.uuid for r in t.chain] == expected


def test_utf8_bom_and_crlf_endings(conn, tmp_path):
    data = b"\xef\xbb\xbf" + good("a") + b"\r\n" + good("b") + b"\r\n"
    _, recs, errs = ingest(conn, tmp_path, data)
    assert errs == [] and len(recs) == 2
    assert all(not r["raw"].endswith("\r") for r in recs)
    assert orjson.loads(recs[0]["raw"])["message"]["content"] == "a"


def test_nul_bytes(conn, tmp_path):
    inside = good("a").replace(b'"a"', b'"a\x00b"')
    outside = good("c") + b"\x00"
    _, recs, errs = ingest(conn, tmp_path, inside + b"\n" + outside + b"\n" + good("d") + b"\n")
    # A NUL inside a string parses; after the object it is trailing garbage:
    # the object is kept and the line noted.
    assert [r["line"] for r in recs] == [1, 2, 3]
    assert orjson.loads(recs[0]["raw"].replace("\x00", "\\u0000"))["message"]["content"] == "a\x00b"
    assert [(e["line"], e["recovered"]) for e in errs] == [(2, 1)]


def test_invalid_utf8_is_kept_with_replacement(conn, tmp_path):
    bad = good("caf\xc3\xa9").replace("caf".encode(), b"caf\xff")
    _, recs, errs = ingest(conn, tmp_path, bad + b"\n")
    assert len(recs) == 1 and "\ufffd" in recs[0]["raw"]
    assert errs[0]["recovered"] == 1 and errs[0]["message"] == "invalid UTF-8 replaced with U+FFFD"


def test_lone_surrogates_are_parsed_by_the_fallback(conn, tmp_path):
    raw = good("x").replace(b'"x"', b'"bad \\ud800 pair \\udfff end"')
    _, recs, errs = ingest(conn, tmp_path, raw + b"\n")
    assert len(recs) == 1
    (b,) = rows(conn, "SELECT text FROM blocks")
    assert b["text"] == "bad \ufffd pair \ufffd end"
    assert recs[0]["raw"] == raw.decode()  # the line as written, escapes and all
    assert errs == []


def test_an_integer_of_thousands_of_digits_is_a_number_as_javascript_reads_it(conn, tmp_path):
    """Python refuses to convert an integer literal of over 4,300 digits
    (the conversion is quadratic); JSON.parse reads it as a double. The
    line is a record, kept byte for byte, and the file around it is read."""
    huge = b"9" * 5000
    raw = good("x")[:-1] + b',"n":' + huge + b"}"
    _, recs, errs = ingest(conn, tmp_path, good("a") + b"\n" + raw + b"\n" + good("b") + b"\n")
    assert len(recs) == 3 and recs[1]["raw"] == raw.decode() and errs == []
    assert [b["text"] for b in rows(conn, "SELECT text FROM blocks ORDER BY offset")] == ["a", "x", "b"]


def test_nesting_deeper_than_any_parser_limit(conn, tmp_path):
    deep = b'{"type":"user","x":' + b"[" * 200_000 + b"]" * 200_000 + b"}"
    _, recs, errs = ingest(conn, tmp_path, deep + b"\n" + good() + b"\n")
    assert [r["line"] for r in recs] == [2]
    assert errs[0]["line"] == 1 and errs[0]["message"] == "nesting deeper than 5,000 levels"


@pytest.mark.parametrize("line,message", [
    (b"[1,2]", "line is a JSON array, not an object"),
    (b'"text"', "line is a JSON string, not an object"),
    (b"42", "line is a JSON number, not an object"),
    (b"true", "line is a JSON boolean, not an object"),
    (b"null", "line is a JSON null, not an object"),
    (b"", "blank line"),
    (b'{"type":"user"} [1]', "line holds a JSON array, not an object (after 1 object(s))"),
])
def test_lines_that_are_not_objects(conn, tmp_path, line, message):
    _, recs, errs = ingest(conn, tmp_path, good() + b"\n" + line + b"\n")
    assert errs[0]["line"] == 2 and errs[0]["message"] == message
    assert len(recs) == 1 + line.startswith(b"{")  # an object before the array is kept


def test_a_30_mb_line(conn, tmp_path):
    u = user(None, None)
    u["message"]["content"] = [{"type": "tool_result", "tool_use_id": "t1", "content": "x" * 30_000_000}]
    _, recs, errs = ingest(conn, tmp_path, dumps(u) + b"\n" + good() + b"\n")
    assert errs == [] and len(recs) == 2
    (b,) = rows(conn, "SELECT kind, chars, tokens FROM blocks WHERE kind = 'tool_result'")
    assert b == {"kind": "tool_result", "chars": 30_000_000, "tokens": 7_500_000}


def test_unknown_types_and_odd_fields_are_kept(conn, tmp_path):
    objs = conversation(1)
    odd = [{"type": "brand-new-type", "payload": {"a": [1, 2]}},
           {"type": 5, "uuid": 7, "parentUuid": ["x"], "timestamp": {"t": 1}},
           {"no_type": True},
           {"type": "user", "message": "not a dict", "uuid": "u-odd"},
           {"type": "attachment", "attachment": "nope", "uuid": "a-odd"}]
    data = b"".join(dumps(o) + b"\n" for o in objs + odd)
    _, recs, errs = ingest(conn, tmp_path, data)
    assert errs == [] and len(recs) == 9
    assert recs[4]["type"] == "brand-new-type"
    assert recs[5]["type"] == "5" and recs[5]["uuid"] is None


# -- valid lines nested deeper than orjson goes (it reads 1,024 levels, writes 254) --

DEPTHS = (300, 1000, 2000)
PLACES = ("tool_use", "tool_result", "attachment", "envelope", "prompt")


def nested_json(depth: int) -> str:
    return "[" * depth + '"x"' + "]" * depth


def deep_session(depth: int, place: str) -> tuple[bytes, int]:
    """A small session, valid JSON throughout, with one value nested
    ``depth`` levels deep at ``place``; and the 1-based number of that line.
    A second tool call carries a large result, so strip-all has work to do
    on every variant."""
    from sessions import assistant, attachment

    u = user("hi", None)
    a = assistant([{"type": "tool_use", "id": "toolu_deep", "name": "Bash", "input": {"command": "ls"}}],
                  u["uuid"])
    r = user([{"type": "tool_result", "tool_use_id": "toolu_deep", "content": "ok"}], a["uuid"])
    at = attachment({"type": "task_reminder", "content": []}, r["uuid"])
    a2 = assistant([{"type": "tool_use", "id": "toolu_big", "name": "Read", "input": {"file_path": "/f"}}],
                   at["uuid"])
    r2 = user([{"type": "tool_result", "tool_use_id": "toolu_big", "content": "y" * 20_000}], a2["uuid"])
    a3 = assistant("done", r2["uuid"])
    objs = [u, a, r, at, a2, r2, a3]
    hole = "DEEP-VALUE-HERE"
    if place == "tool_use":
        a["message"]["content"][0]["input"] = {"x": hole}
        line = 2
    elif place == "tool_result":
        r["message"]["content"][0]["content"] = [{"type": "text", "text": "t"}, {"type": "json", "v": hole}]
        line = 3
    elif place == "attachment":
        at["attachment"]["content"] = hole
        line = 4
    elif place == "prompt":  # a key beside a human prompt (what the view human_prompts reads)
        u["x"] = hole
        line = 1
    else:  # the envelope: the CLI's structured tool result beside the message
        r["toolUseResult"] = hole
        line = 3
    text = "".join(orjson.dumps(o).decode() + "\n" for o in objs)
    return text.replace(f'"{hole}"', nested_json(depth)).encode(), line


@pytest.mark.parametrize("place", PLACES)
@pytest.mark.parametrize("depth", DEPTHS)
def test_valid_deep_nesting_is_stored_whole(conn, tmp_path, depth, place):
    data, deep_line = deep_session(depth, place)
    stats, recs, errs = ingest(conn, tmp_path, data)
    lines = data.decode().splitlines()
    assert errs == [] and stats.parse_errors == 0 and stats.unreadable == []
    assert [r["raw"] for r in recs] == lines  # every line, its raw text as written
    (chain,) = rows(conn, "SELECT chain_length FROM sessions")
    assert chain["chain_length"] == len(lines)
    if place == "tool_use":
        (b,) = rows(conn, "SELECT chars FROM blocks WHERE kind = 'tool_use' AND tool_use_id = 'toolu_deep'")
        assert b["chars"] == len('{"x":' + nested_json(depth) + "}")
    if place == "tool_result":
        (b,) = rows(conn, "SELECT txdb_text(file_id, offset, idx) AS text, cut FROM blocks "
                          "WHERE kind = 'tool_result' AND tool_use_id = 'toolu_deep'")
        assert nested_json(depth) in b["text"]  # its whole text, decoded (cut: blocks.text keeps 400 chars)


def test_a_deep_file_stops_no_other_file(conn, tmp_path):
    root = tmp_path / "projects"
    names = []
    for depth in DEPTHS:
        for place in PLACES:
            p = root / "-p" / f"{place}-{depth}.jsonl"
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(deep_session(depth, place)[0])
            names.append(p)
    (root / "-p" / "plain.jsonl").write_bytes(good() + b"\n")
    stats = refresh(conn, [root])
    assert stats.new == len(names) + 1 and stats.unreadable == [] and stats.parse_errors == 0
    assert conn.execute("SELECT count(*) FROM records").fetchone()[0] == 7 * len(names) + 1


@pytest.mark.parametrize("place", PLACES)
@pytest.mark.parametrize("depth", DEPTHS)
def test_strip_all_on_a_deep_session(tmp_path, monkeypatch, depth, place):
    """strip-all writes a pending copy; an untouched deep line stays byte for
    byte, a rewritten one is valid JSON that lost only what was stripped."""
    from click.testing import CliRunner

    from txdb.cli import cli
    from txdb.model import deep

    data, deep_line = deep_session(depth, place)
    path = tmp_path / "projects" / "-p" / "s.jsonl"
    path.parent.mkdir(parents=True)
    path.write_bytes(data)
    monkeypatch.setenv("TXDB_DB", str(tmp_path / "c.db"))
    result = CliRunner().invoke(cli, ["strip-all", str(path)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    pending = path.with_name("s.jsonl.pending").read_bytes().split(b"\n")
    original = data.split(b"\n")
    assert len(pending) == len(original)
    assert b"y" * 20_000 not in pending[5]  # the large result went
    before, after = original[deep_line - 1], pending[deep_line - 1]
    if place in ("attachment", "envelope"):
        assert after == before
    else:
        assert deep.loads(after)["uuid"] == deep.loads(before)["uuid"]
    verify = CliRunner().invoke(cli, ["verify", str(path) + ".pending"], catch_exceptions=False)
    assert verify.exit_code == 0, verify.output


def test_a_record_whose_blocks_cannot_be_derived_is_still_stored(conn, tmp_path, monkeypatch):
    """Derived columns are best effort: the record and its place on the
    chain stay, the line is noted (recovered) in parse_errors."""
    from txdb.catalog.ingest import rows as rowsmod

    real = rowsmod.block_rows

    def fussy(content, role):
        if content == "odd":
            raise ValueError("no blocks for you")
        return real(content, role)

    monkeypatch.setattr(rowsmod, "block_rows", fussy)
    a = user("first", None)
    b = user("odd", a["uuid"])
    c = user("third", b["uuid"])
    stats, recs, errs = ingest(conn, tmp_path, b"".join(dumps(o) + b"\n" for o in (a, b, c)))
    assert [r["uuid"] for r in recs] == [a["uuid"], b["uuid"], c["uuid"]]
    assert errs == [{"line": 2, "message": "stored without its blocks: ValueError: no blocks for you",
                     "recovered": 1}]
    assert stats.parse_errors == 0
    assert rows(conn, "SELECT chain_length FROM sessions") == [{"chain_length": 3}]
    assert conn.execute("SELECT count(*) FROM blocks").fetchone()[0] == 2


@pytest.mark.parametrize("place", PLACES)
@pytest.mark.parametrize("depth", DEPTHS)
def test_fork_of_a_deep_session(tmp_path, monkeypatch, depth, place):
    """A fork rewrites every line (a new session id): the deep value comes
    through whole."""
    from click.testing import CliRunner

    from txdb.cli import cli

    data, deep_line = deep_session(depth, place)
    path = tmp_path / "projects" / "-p" / "s.jsonl"
    path.parent.mkdir(parents=True)
    path.write_bytes(data)
    monkeypatch.setenv("TXDB_DB", str(tmp_path / "c.db"))
    result = CliRunner().invoke(cli, ["fork", str(path)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    (fork,) = [p for p in path.parent.glob("*.jsonl") if p != path]
    lines = fork.read_bytes().splitlines()
    assert len(lines) == len(data.splitlines()) + 1  # and its title
    assert nested_json(depth).encode() in lines[deep_line - 1]
    assert b'"sessionId":"' + fork.stem.encode() + b'"' in lines[deep_line - 1]
