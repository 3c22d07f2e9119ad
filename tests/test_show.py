"""show-tool, show-thinking, the `persisted` views and analyze's Persisted
section: on shipped sessions (CLI-written and real) and on a copy of one
with hand-written persisted markers; real files, real SQLite."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from conftest import copy_fixture_sessions, rows
from sessions import DATA
from txdb.catalog import db
from txdb.catalog.ingest import type_sums
from txdb.catalog.sqlutil import transaction
from txdb.cli import cli
from txdb.catalog.ingest.store import refresh

TOOLS_DIR = "-tmp-txdb-cli-fixtures-tools-demo"
TOOLS_SID = "0ff9cf6e-e3b0-420c-913e-806c2aa938aa"
REAL = DATA / "real" / "-Users-dain-workspace-danieldemmel-me-next" / "9e953218-585f-4692-89df-9e0747a31c68.jsonl"


def txdb(db_path, *args, ok=True):
    r = CliRunner().invoke(cli, [*map(str, args), "--db", str(db_path)], catch_exceptions=False)
    if ok:
        assert r.exit_code == 0, r.output
    return r


def lines_of(path: Path) -> list[dict]:
    return [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()]


def chain_pos(conn, file_id: int) -> dict[str, int]:
    return {r["uuid"]: r["pos"] for r in rows(conn, "SELECT uuid, pos FROM active_chain WHERE file_id = ?", (file_id,))}


@pytest.fixture
def tools(tmp_path):
    """A copy of the CLI-written tools session, catalogued: (db path, conn, file path, file id)."""
    root = tmp_path / "projects"
    shutil.copytree(DATA / "cli" / TOOLS_DIR, root / TOOLS_DIR)
    path = root / TOOLS_DIR / f"{TOOLS_SID}.jsonl"
    db_path = tmp_path / "c.db"
    conn = db.connect(db_path)
    refresh(conn, [root])
    (fid,) = conn.execute("SELECT id FROM files WHERE path = ?", (str(path),)).fetchone()
    yield db_path, conn, path, fid
    conn.close()


def _input_json(block) -> str:
    return orjson.dumps(block["input"]).decode()


# -- show-tool -------------------------------------------------------------------

def test_show_tool_list_reports_every_call_on_the_chain_with_its_sizes(tools):
    db_path, conn, path, fid = tools
    pos = chain_pos(conn, fid)
    expected, results = [], {}
    for o in lines_of(path):
        content = (o.get("message") or {}).get("content") if isinstance(o.get("message"), dict) else None
        for b in content if isinstance(content, list) else []:
            if b.get("type") == "tool_use":
                expected.append({"pos": pos[o["uuid"]], "tool_use_id": b["id"], "tool_name": b["name"],
                                 "input_chars": len(_input_json(b))})
            elif b.get("type") == "tool_result":
                c = b["content"]
                text = c if isinstance(c, str) else "\n".join(x.get("text", "") for x in c if x.get("type") == "text")
                results[b["tool_use_id"]] = (pos[o["uuid"]], len(text))
    report = json.loads(txdb(db_path, "show-tool", TOOLS_SID, "--list", "--json").output)
    assert report["file"] == {"path": str(path), "catalogued": True, "kind": "session", "copy_of": None}
    assert report["session_id"] == TOOLS_SID
    got = report["tool_calls"]
    assert [{k: c[k] for k in ("pos", "tool_use_id", "tool_name", "input_chars")} for c in got] == expected
    assert [c["tool_name"] for c in got] == ["Bash", "Read", "Read", "Write", "Edit"]
    for c in got:
        assert (c["result_pos"], c["result_chars"]) == results[c["tool_use_id"]]
        assert c["input_tokens"] > 0 and c["result_tokens"] > 0
        assert c["result_state"] is None and c["persisted"] is None and c["input_stripped"] is False
    png = next(c for c in got if c["result_images"])
    assert png["result_chars"] == 0 and png["tool_name"] == "Read"

    text = txdb(db_path, "show-tool", TOOLS_SID).output.splitlines()  # --list is the default
    assert text[0] == f"Session {TOOLS_SID}  ({path})"
    assert text[1] == f"Positions of {path} (the session file; no pending copy)"
    text = text[1:]
    assert text[1] == f"5 tool calls on the active chain ({report['chain_length']} positions)"
    assert text[2].split() == ["pos", "tool_use_id", "tool", "input", "chars", "input", "tok", "result", "pos",
                               "result", "chars", "result", "tok", "state"]
    for line, c in zip(text[4:], got):
        assert line.split() == [str(c["pos"]), c["tool_use_id"], c["tool_name"], str(c["input_chars"]),
                                str(c["input_tokens"]), str(c["result_pos"]), str(c["result_chars"]),
                                str(c["result_tokens"])]


def test_show_tool_id_shows_input_result_and_context(tools):
    db_path, conn, path, fid = tools
    pos = chain_pos(conn, fid)
    recs = lines_of(path)
    use = next(o for o in recs if o["type"] == "assistant" and o["message"]["content"][0].get("name") == "Bash")
    block = use["message"]["content"][0]
    res = next(o for o in recs if o["type"] == "user" and isinstance(o["message"]["content"], list)
               and o["message"]["content"][0].get("tool_use_id") == block["id"])
    report = json.loads(txdb(db_path, "show-tool", TOOLS_SID, "--id", block["id"], "--context", "2", "--json").output)
    call = report["tool_call"]
    assert call["pos"] == pos[use["uuid"]] and call["result_pos"] == pos[res["uuid"]]
    assert call["input_text"] == _input_json(block)
    assert call["result_text"] == res["message"]["content"][0]["content"]
    ctx = report["context"]
    assert [r["pos"] for r in ctx] == list(range(call["pos"] - 2, call["result_pos"] + 3))
    assert [r["pos"] for r in ctx if r["target"]] == [call["pos"], call["result_pos"]]
    by_pos = {r["pos"]: r for r in ctx}
    assert by_pos[call["pos"]]["role"] == "assistant" and by_pos[call["pos"]]["kinds"] == "tool_use"
    assert by_pos[call["result_pos"]]["excerpt"] == " ".join(call["result_text"].split())[:100]

    out = txdb(db_path, "show-tool", TOOLS_SID, "--id", block["id"], "--context", "2").output
    assert (f"Tool call {block['id']} (Bash) at pos {call['pos']} (line {call['line']}), "
            f"result at pos {call['result_pos']}") in out
    assert f"Input: {call['input_chars']:,} chars, ~{call['input_tokens']:,} tokens\n{call['input_text']}\n" in out
    assert f"\n{call['result_text']}\n" in out
    assert f"Context (positions {call['pos'] - 2}..{call['result_pos'] + 2}; > marks the shown ones):" in out


def test_show_tool_on_a_real_session(tmp_path):
    root = tmp_path / "projects"
    shutil.copytree(REAL.parent, root / REAL.parent.name)
    path = root / REAL.parent.name / REAL.name
    db_path = tmp_path / "c.db"
    conn = db.connect(db_path)
    refresh(conn, [root])
    (fid,) = conn.execute("SELECT id FROM files WHERE path = ?", (str(path),)).fetchone()
    pos = chain_pos(conn, fid)
    expected = [(pos[o["uuid"]], b["id"], b["name"]) for o in lines_of(path) if o.get("uuid") in pos
                and o.get("type") == "assistant" for b in o["message"]["content"] if b.get("type") == "tool_use"]
    report = json.loads(txdb(db_path, "show-tool", str(path), "--list", "--json").output)
    assert [(c["pos"], c["tool_use_id"], c["tool_name"]) for c in report["tool_calls"]] == expected
    assert len(expected) > 50
    assert all(c["result_pos"] is not None and c["result_pos"] > c["pos"] for c in report["tool_calls"])


# -- show-thinking ---------------------------------------------------------------

def test_show_thinking_lists_blocks_with_text_and_signature_sizes(tools):
    db_path, conn, path, fid = tools
    pos = chain_pos(conn, fid)
    expected = [(pos[o["uuid"]], len(b["thinking"]), len(b["signature"])) for o in lines_of(path)
                if o.get("type") == "assistant" for b in o["message"]["content"] if b.get("type") == "thinking"]
    assert len(expected) == 3
    report = json.loads(txdb(db_path, "show-thinking", TOOLS_SID, "--json").output)
    got = report["thinking"]
    assert [(r["pos"], r["chars"], r["signature_chars"]) for r in got] == expected
    for r in got:
        assert r["type"] == "thinking" and r["total_chars"] == r["chars"] + r["signature_chars"]
        assert r["tokens"] == -(-r["total_chars"] // 4) and r["persisted"] is None

    text = txdb(db_path, "show-thinking", TOOLS_SID).output.splitlines()[1:]
    assert text[1] == f"3 thinking blocks on the active chain ({report['chain_length']} positions)"
    for line, r in zip(text[4:7], got):
        assert line.split() == [str(r["pos"]), str(r["line"]), "0", "thinking", str(r["chars"]),
                                str(r["signature_chars"]), str(r["total_chars"]), str(r["tokens"])]
    assert text[7] == (f"Total: {sum(r['total_chars'] for r in got):,} chars, "
                       f"~{sum(r['tokens'] for r in got):,} tokens")


def test_show_thinking_pos_shows_the_block_and_its_context(tools):
    db_path, conn, path, fid = tools
    pos = chain_pos(conn, fid)
    first = next(o for o in lines_of(path) if o.get("type") == "assistant"
                 and o["message"]["content"][0].get("type") == "thinking")
    p = pos[first["uuid"]]
    report = json.loads(txdb(db_path, "show-thinking", TOOLS_SID, "--pos", p, "--context", "1", "--json").output)
    [b] = report["blocks"]
    assert b["text"] == first["message"]["content"][0]["thinking"] and b["pos"] == p
    assert [(r["pos"], r["target"]) for r in report["context"]] == [(p - 1, False), (p, True), (p + 1, False)]
    out = txdb(db_path, "show-thinking", TOOLS_SID, "--pos", p, "--context", "1").output
    assert (f"Thinking at pos {p} (line {b['line']}, block 0, thinking): {b['chars']} text + "
            f"{b['signature_chars']} signature chars, ~{b['tokens']} tokens\n{b['text']}\n") in out


# -- bad input -------------------------------------------------------------------

def test_unknown_id_and_positions_are_one_error_line(tools):
    db_path, conn, path, fid = tools
    (end,) = conn.execute("SELECT max(pos) FROM chain WHERE file_id = ?", (fid,)).fetchone()
    r = txdb(db_path, "show-tool", TOOLS_SID, "--id", "toolu_nope", ok=False)
    assert r.exit_code == 1
    assert r.output == (f"Error: tool call 'toolu_nope' is not in {path} "
                        "(`txdb show-tool SESSION --list` lists them)\n")
    r = txdb(db_path, "show-thinking", TOOLS_SID, "--pos", end + 1, ok=False)
    assert r.exit_code == 1
    assert r.output == f"Error: position {end + 1} is not on the active chain of {path} (positions 0..{end})\n"
    r = txdb(db_path, "show-thinking", TOOLS_SID, "--pos", 0, ok=False)
    thinking = [t["pos"] for t in json.loads(txdb(db_path, "show-thinking", TOOLS_SID, "--json").output)["thinking"]]
    assert r.exit_code == 1
    assert r.output == (f"Error: no thinking block at position 0 of {path} "
                        f"(thinking at positions {', '.join(map(str, thinking))})\n")
    r = txdb(db_path, "show-tool", TOOLS_SID, "--list", "--id", "toolu_x", ok=False)
    assert r.exit_code == 2 and "--list and --id are exclusive" in r.output


# -- a pending copy --------------------------------------------------------------

def test_a_pending_copy_is_shown_with_its_own_positions_and_said_so(tools):
    db_path, conn, path, fid = tools
    txdb(db_path, "strip-tools", TOOLS_SID, "--tools", "Write,Edit")
    pending = Path(f"{path}.pending")
    assert pending.is_file()
    report = json.loads(txdb(db_path, "show-tool", pending, "--json").output)
    assert report["file"] == {"path": str(pending), "catalogued": False, "kind": "the pending copy",
                              "copy_of": str(path)}
    states = {c["tool_name"]: c["result_state"] for c in report["tool_calls"]}
    assert states == {"Bash": None, "Read": None, "Write": "stripped", "Edit": "stripped"}
    # Named by id, the session is read through its pending copy too (the file the next
    # surgery edits); --original reads the session, which still has them whole. The
    # pending copy stays out of the catalog.
    assert json.loads(txdb(db_path, "show-tool", TOOLS_SID, "--json").output) == report
    session = json.loads(txdb(db_path, "show-tool", TOOLS_SID, "--original", "--json").output)
    assert session["file"]["path"] == str(path)
    assert all(c["result_state"] is None for c in session["tool_calls"])
    assert txdb(db_path, "show-tool", TOOLS_SID, "--original").output.splitlines()[1] == (
        f"Positions of {path} (the session file, asked for with --original; the next surgery edits "
        f"its pending copy {pending}, whose positions may differ)")
    assert conn.execute("SELECT count(*) FROM files WHERE path = ?", (str(pending),)).fetchone() == (0,)
    out = txdb(db_path, "show-thinking", pending).output.splitlines()
    assert out[1] == (f"Positions of {pending} (the pending copy of {path}: the file the next surgery "
                      "edits; not catalogued)")
    pending_pos = {r["tool_use_id"]: r["pos"] for r in report["tool_calls"]}
    edit = report["tool_calls"][-1]["tool_use_id"]
    shown = json.loads(txdb(db_path, "show-tool", pending, "--id", edit, "--json").output)
    assert shown["tool_call"]["pos"] == pending_pos[edit]
    assert shown["tool_call"]["result_text"].startswith("[stripped by txdb")


# -- persisted markers -----------------------------------------------------------

SDIR = f"/home/me/.claude/projects/{TOOLS_DIR}/{TOOLS_SID}"
NATIVE = (f"<persisted-output>\nOutput too large (55.3KB). Full output saved to: {SDIR}/tool-results/byshsvyn3.txt\n\n"
          "Preview (first 2KB):\ntotal 12\nSummary: a line of the output, not the summary\n...\n</persisted-output>")
OURS_TOOL = (f"<persisted-output>\nOutput too large (1.5KB). Full output saved to: {SDIR}/tool-results/toolu_x.txt\n"
             "Summary: Read config.py: Flask settings\n\nPreview (first 2KB):\nDEBUG = True\n</persisted-output>")
THINKING = (f"<persisted-thinking>\nSaved to: {SDIR}/persisted/thinking/f3883eec.txt (1,234 chars)\n"
            "Summary: [no summary provided]\n\nPreview:\nLet me look\n</persisted-thinking>")
TEXT = (f"<persisted-text>\nSaved to: {SDIR} (copy)/persisted/text/edae_0.txt (12 chars)\n"
        "Summary: Audit M-02 spec draft\n\nPreview:\nhello world!\n</persisted-text>")
RANGE = (f'<persisted-range from="3" to="9" count="7">\nSaved to: {TOOLS_SID}/persisted/message (7 files)\n'
         "Summary: setup chatter\n\nPreview:\n[user] hi\n[... 6 more]\n</persisted-range>")
MENTION = "please explain what a <persisted-thinking> marker is"
WRAPPED = "<thinking>\nThe user wants a demo.\n</thinking>"


def _write_markers(path: Path) -> dict[str, dict]:
    """Hand-written markers in the session copy (compact JSON, as Claude Code
    writes); returns the edited records by name."""
    objs = [json.loads(ln) for ln in path.read_text().splitlines()]
    edited = {}

    def content(o):
        return o["message"]["content"]

    for o in objs:
        c = o.get("message", {}).get("content") if isinstance(o.get("message"), dict) else None
        if o["type"] == "user" and isinstance(c, list) and c[0].get("type") == "tool_result":
            tid = c[0]["tool_use_id"]
            if tid.startswith("toolu_fake0001"):
                c[0]["content"] = NATIVE
                o["toolUseResult"] = {"stdout": "x", "persistedOutputSize": 56581}
                edited["native"] = o
            elif tid.startswith("toolu_fake0002"):
                c[0]["content"] = OURS_TOOL
                edited["ours_tool"] = o
        elif o["type"] == "assistant" and c[0].get("type") == "thinking" and "thinking" not in edited:
            o["message"]["content"] = [{"type": "text", "text": THINKING}]
            edited["thinking"] = o
        elif o["type"] == "assistant" and c[0].get("type") == "text" and "text" not in edited:
            content(o)[0]["text"] = TEXT
            edited["text"] = o
        elif o["type"] == "assistant" and c[0].get("type") == "text":
            content(o)[0]["text"] = WRAPPED
            edited["wrapped"] = o
        elif o["type"] == "user" and isinstance(c, str) and "mention" not in edited:
            o["message"]["content"] = MENTION
            edited["mention"] = o
        elif o["type"] == "user" and isinstance(c, str):
            o["message"]["content"] = RANGE
            edited["range"] = o
    assert set(edited) == {"native", "ours_tool", "thinking", "text", "wrapped", "mention", "range"}
    path.write_bytes(b"".join(orjson.dumps(o) + b"\n" for o in objs))
    return edited


def test_persisted_view_has_one_row_per_marker(tools):
    db_path, conn, path, fid = tools
    edited = _write_markers(path)
    refresh(conn, [path.parent.parent])
    pos = chain_pos(conn, fid)
    line = {o["uuid"]: i for i, o in enumerate(lines_of(path), 1) if o.get("uuid")}

    def row(name, kind, block_kind, sidecar, original, exact, marker, summary, tool=(None, None)):
        o = edited[name]
        return {"kind": kind, "session_id": TOOLS_SID, "file_id": fid, "pos": pos[o["uuid"]], "on_chain": 1,
                "line": line[o["uuid"]], "uuid": o["uuid"], "block": 0, "block_kind": block_kind,
                "tool_use_id": tool[0], "tool_name": tool[1], "sidecar_path": sidecar,
                "original_chars": original, "original_exact": exact, "marker_chars": len(marker),
                "saved_chars": None if original is None else original - len(marker), "summary": summary}

    def tool(name):
        tid = edited[name]["message"]["content"][0]["tool_use_id"]
        (tname,) = conn.execute("SELECT tool_name FROM blocks WHERE tool_use_id = ? AND kind = 'tool_use'",
                                (tid,)).fetchone()
        return tid, tname

    expected = sorted([
        # Claude Code's own: the exact size it recorded, not the rounded 55.3KB; the
        # preview's "Summary:" line is not the summary.
        row("native", "tool", "tool_result", f"{SDIR}/tool-results/byshsvyn3.txt", 56581, 1, NATIVE, None,
            tool("native")),
        # persist's tool marker: no recorded size, so the rounded one (1.5 x 1024).
        row("ours_tool", "tool", "tool_result", f"{SDIR}/tool-results/toolu_x.txt", 1536, 0, OURS_TOOL,
            "Read config.py: Flask settings", tool("ours_tool")),
        row("thinking", "thinking", "text", f"{SDIR}/persisted/thinking/f3883eec.txt", 1234, 1, THINKING,
            "[no summary provided]"),
        row("text", "text", "text", f"{SDIR} (copy)/persisted/text/edae_0.txt", 12, 1, TEXT,
            "Audit M-02 spec draft"),
        row("range", "range", "text", f"{TOOLS_SID}/persisted/message", None, 0, RANGE, "setup chatter"),
    ], key=lambda r: r["line"])
    assert rows(conn, "SELECT * FROM persisted ORDER BY line") == expected

    [by_session] = rows(conn, "SELECT * FROM persisted_by_session")
    stated = [r for r in expected if r["original_chars"] is not None]
    assert by_session == {
        "file_id": fid, "session_id": TOOLS_SID, "title": by_session["title"], "project": TOOLS_DIR,
        "markers": 5, "chain_markers": 5,
        "chain_original_chars": sum(r["original_chars"] for r in stated),
        "chain_marker_chars": sum(r["marker_chars"] for r in stated),
        "chain_saved_chars": sum(r["saved_chars"] for r in stated),
    }

    # analyze reads the same view: one row per kind, on the chain.
    report = json.loads(txdb(db_path, "analyze", TOOLS_SID, "--json").output)
    got = {r["kind"]: r for r in report["persisted"]}
    assert got["tool"]["markers"] == 2
    assert got["tool"]["saved_chars"] == sum(r["saved_chars"] for r in expected if r["kind"] == "tool")
    assert got["range"] == {"kind": "range", "markers": 1, "original_chars": None, "marker_chars": len(RANGE),
                            "saved_chars": None, "saved_tokens": 0}
    out = txdb(db_path, "analyze", TOOLS_SID).output
    assert "\nPersisted (markers on the chain):\n" in out

    # show-tool and show-thinking say what is persisted, and where to.
    calls = {c["tool_use_id"]: c for c in json.loads(txdb(db_path, "show-tool", TOOLS_SID, "--json").output)["tool_calls"]}
    native = calls[tool("native")[0]]
    assert native["result_state"] == "persisted"
    assert native["persisted"] == {"kind": "tool", "sidecar_path": f"{SDIR}/tool-results/byshsvyn3.txt",
                                   "original_chars": 56581, "summary": None}
    thinking = json.loads(txdb(db_path, "show-thinking", TOOLS_SID, "--json").output)["thinking"]
    kinds = {r["pos"]: r["type"] for r in thinking}
    assert kinds[pos[edited["thinking"]["uuid"]]] == "persisted"
    assert kinds[pos[edited["wrapped"]["uuid"]]] == "wrapped"
    assert pos[edited["mention"]["uuid"]] not in kinds
    text = txdb(db_path, "show-thinking", TOOLS_SID, "--pos", pos[edited["thinking"]["uuid"]]).output
    assert f"; persisted to {SDIR}/persisted/thinking/f3883eec.txt (1,234 chars)\n{THINKING}\n" in text


def test_persisted_reads_the_markers_refresh_found_not_every_line(tools):
    """The view starts from the markers refresh stored (no scan of every
    block's text, no JSON read out of raw lines: 0.6 s at 200k lines)."""
    db_path, conn, path, fid = tools
    _write_markers(path)
    refresh(conn, [path.parent.parent])
    stored = conn.execute("SELECT offset, idx, recorded_size FROM markers WHERE file_id = ? ORDER BY offset",
                          (fid,)).fetchall()
    listed = conn.execute("SELECT p.block, p.original_chars, p.original_exact, r.offset FROM persisted p "
                          "JOIN records r ON r.file_id = p.file_id AND r.line = p.line ORDER BY r.offset").fetchall()
    assert [(o, i) for o, i, _ in stored] == [(o, b) for b, _, _, o in listed]  # the mention is no marker
    assert [size for _, _, size in stored].count(56581) == 1  # toolUseResult.persistedOutputSize, once
    plan = [r[3] for r in conn.execute("EXPLAIN QUERY PLAN SELECT * FROM persisted")]
    steps = [p for p in plan if not p.startswith("MATERIALIZE")]
    assert steps[0] == "SCAN k"  # the markers table
    # everything else by its key (the header's fields parsed once a marker, kept aside)
    assert all(p in ("SCAN fields", "SCAN parsed") for p in steps[1:] if p.startswith("SCAN")), plan
    assert "json_extract" not in conn.execute(
        "SELECT sql FROM sqlite_master WHERE name = 'persisted'").fetchone()[0]


def test_a_catalog_from_before_the_markers_table_finds_its_markers(tools):
    """Migration 019 re-reads the files that hold markers: the next refresh
    fills the table, and the view lists what it listed before."""
    db_path, conn, path, fid = tools
    _write_markers(path)
    refresh(conn, [path.parent.parent])
    before = rows(conn, "SELECT * FROM persisted ORDER BY line")
    assert len(before) == 5
    conn.execute("DROP TABLE markers")  # the catalog as migration 018 left it
    conn.execute("DELETE FROM _txdb_migrations WHERE name IN ('020_markers', '034_dropped_thinking_markers')")
    conn.commit()
    conn.close()
    conn = db.connect(db_path)
    assert rows(conn, "SELECT * FROM persisted") == []  # migrated, not yet refreshed
    refresh(conn, [path.parent.parent])
    assert rows(conn, "SELECT * FROM persisted ORDER BY line") == before
    conn.close()


def test_what_fills_the_context_is_summed_from_indexes_not_rows(tools):
    """analyze_by_type's sums (context_by_category; type_sums, stored at
    refresh) read each chain record's type and tokens and its blocks' tokens
    from covering indexes: the rows hold raw lines and text (about 2x at 1 GB)."""
    db_path, conn, path, fid = tools
    plan = [r[3] for r in conn.execute("EXPLAIN QUERY PLAN " + type_sums.SUMS_SELECT, (fid,))]
    assert any(p.startswith("SEARCH r USING COVERING INDEX records_sizes") for p in plan), plan
    assert not any(p.startswith("SEARCH b USING INDEX") for p in plan), plan  # never a block row
    assert any("SEARCH b USING COVERING INDEX blocks_sizes" in p for p in plan), plan
    # the chain drives: a long session's chain is often a fraction of its rows
    assert sum(p.startswith("SEARCH c USING COVERING INDEX chain_record (file_id=?)") for p in plan) == 2, plan


def test_blocks_are_summed_by_kind_from_an_index_with_the_same_rows(tmp_path):
    """analyze_by_tool reads
    each block's kind, tool, sizes and tokens from a covering index
    (migration 024), not from rows that hold the text, and answer the
    same rows as a catalog without that index."""
    conn = db.connect(tmp_path / "c.db")
    refresh(conn, [copy_fixture_sessions(tmp_path / "projects")])
    # (analyze_by_type's sums read blocks_sizes: test_what_fills_the_context_is_summed_from_indexes_not_rows)
    plan = [r[3] for r in conn.execute("EXPLAIN QUERY PLAN SELECT * FROM analyze_by_tool")]
    assert any("USING COVERING INDEX blocks_kind_sizes" in p for p in plan), plan
    # a tool call's result is still found by its tool_use_id, not by scanning the file's results
    for view in ("costliest_tool_calls", "block_targets", "persisted"):
        plan = [r[3] for r in conn.execute(f"EXPLAIN QUERY PLAN SELECT count(*) FROM {view}")]
        assert not any("(kind=? AND file_id=?)" in p for p in plan), (view, plan)
    views = ("analyze_by_type", "analyze_by_tool", "context_by_category", "costliest_tool_calls", "block_targets",
             "persisted", "human_prompts", "image_targets", "search_messages", "search_tool_output")
    def read(v):  # age_days counts from now: left out, it is not a stored figure
        cols = [r[1] for r in conn.execute(f"SELECT * FROM pragma_table_info('{v}')") if r[1] != "age_days"]
        return sorted(map(repr, conn.execute(f"SELECT {', '.join(f'[{c}]' for c in cols)} FROM {v}")))

    with_index = {v: read(v) for v in views}
    assert all(with_index[v] for v in views[:4])  # the fixtures have rows in these
    conn.execute("DROP INDEX blocks_kind_sizes")
    with transaction(conn):  # the stored sums, summed again without the index
        type_sums.store_all(conn)
    for v in views:
        assert read(v) == with_index[v], v
    conn.close()


def test_hostile_markers_never_break_the_views_or_analyze(tools):
    """Sizes no sum can hold, sizes of the wrong type, a marker cut short, a
    summary carrying terminal escapes: the row says what it can, the sums
    and analyze still answer, the text output prints the escape inert."""
    db_path, conn, path, fid = tools
    objs = [json.loads(ln) for ln in path.read_text().splitlines()]
    hostile = [
        ("<persisted-text>\nSaved to: /x/a.txt (99,999,999,999,999,999,999 chars)\nSummary: big\n\nPreview:\n"
         "</persisted-text>", None),
        ("<persisted-output>\nOutput too large (1e400KB). Full output saved to: /x/b.txt\n", 10 ** 30),
        ("<persisted-output>\nOutput too large (12", "12"),
        ("<persisted-thinking>\nSummary: \x1b]8;;http://evil\x07click\x1b[2J", None),
    ]
    results = [o for o in objs if o["type"] == "user" and isinstance(o["message"]["content"], list)
               and o["message"]["content"][0].get("type") == "tool_result"]
    for o, (text, size) in zip(results, hostile):
        o["message"]["content"][0]["content"] = text
        o["toolUseResult"] = {"persistedOutputSize": size}
    # json, not orjson: a 10**30 integer is valid JSON that orjson will not write.
    path.write_text("".join(json.dumps(o, separators=(",", ":"), ensure_ascii=False) + "\n" for o in objs))
    refresh(conn, [path.parent.parent])
    got = rows(conn, "SELECT kind, sidecar_path, original_chars, saved_chars, summary FROM persisted ORDER BY line")
    assert got == [
        {"kind": "text", "sidecar_path": "/x/a.txt", "original_chars": None, "saved_chars": None, "summary": "big"},
        {"kind": "tool", "sidecar_path": "/x/b.txt", "original_chars": None, "saved_chars": None, "summary": None},
        {"kind": "tool", "sidecar_path": None, "original_chars": None, "saved_chars": None, "summary": None},
        {"kind": "thinking", "sidecar_path": None, "original_chars": None, "saved_chars": None,
         "summary": "\x1b]8;;http://evil\x07click\x1b[2J"},
    ]
    [s] = rows(conn, "SELECT markers, chain_saved_chars FROM persisted_by_session")
    assert s == {"markers": 4, "chain_saved_chars": 0}
    report = json.loads(txdb(db_path, "analyze", TOOLS_SID, "--json").output)
    assert sum(r["markers"] for r in report["persisted"]) == 4
    out = txdb(db_path, "show-tool", TOOLS_SID, "--id", results[3]["message"]["content"][0]["tool_use_id"]).output
    assert "\x1b" not in out and "\\x1b]8;;http://evil\\x07click\\x1b[2J" in out


def test_a_one_line_session_has_a_chain_of_one(tmp_path):
    from sessions import user, write

    path = write(tmp_path / "projects" / "-home-me-app" / "s-1.jsonl", [user("hello")])
    db_path = tmp_path / "c.db"
    report = json.loads(txdb(db_path, "show-thinking", path, "--json").output)
    assert report["chain_length"] == 1 and report["thinking"] == []
    assert txdb(db_path, "show-tool", path).output.splitlines()[2] == "0 tool calls on the active chain (1 position)"
    r = txdb(db_path, "show-thinking", path, "--pos", 0, ok=False)
    assert r.output == f"Error: no thinking block at position 0 of {path} (the chain has no thinking block)\n"


def test_a_long_inputs_strip_mark_past_its_stored_start_is_seen(tmp_path):
    """blocks.text keeps 400 characters of a long tool input: show-tool
    finds a strip mark past them in the whole input (txdb_text)."""
    from txdb.model.records import MARK

    sid = "5e1f0000-0000-4000-8000-000000000001"
    lines = [
        {"type": "user", "uuid": "u1", "parentUuid": None, "sessionId": sid, "timestamp": "2026-01-01T00:00:00Z",
         "message": {"role": "user", "content": "edit it"}},
        {"type": "assistant", "uuid": "a1", "parentUuid": "u1", "sessionId": sid, "timestamp": "2026-01-01T00:00:01Z",
         "message": {"role": "assistant", "id": "m1", "model": "claude-sonnet-4-5", "content": [
             {"type": "tool_use", "id": "t1", "name": "Edit",
              "input": {"file_path": "/x/" + "d/" * 300 + "f.py", "old_string": MARK + " 900 chars]"}}]}},
        {"type": "user", "uuid": "u2", "parentUuid": "a1", "sessionId": sid, "timestamp": "2026-01-01T00:00:02Z",
         "message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]}},
    ]
    folder = tmp_path / "projects" / "-x"
    folder.mkdir(parents=True)
    (folder / f"{sid}.jsonl").write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in lines))
    db_path = tmp_path / "c.db"
    conn = db.connect(db_path)
    refresh(conn, [tmp_path / "projects"])
    assert conn.execute("SELECT cut, instr(text, ?) FROM blocks WHERE kind = 'tool_use'", (MARK,)).fetchone() == (1, 0)
    conn.close()
    (call,) = json.loads(txdb(db_path, "show-tool", sid, "--list", "--json").output)["tool_calls"]
    assert call["input_stripped"] is True
