"""One title rule (records.pick_title) shown everywhere: the catalog's
sessions.title, the name a fork gets and the session page's heading agree,
for a session with both a summary and an ai-title, and for one with nothing
but a prompt."""

from __future__ import annotations

import html as htmllib
import json
import re
from pathlib import Path

import orjson
import pytest

from txdb.catalog import db
from txdb.web.metadata import make_datasette

from conftest import run
from sessions import assistant, user, write

SID = "5e55a1e0-0000-4000-8000-00000000000a"
PROMPT = "Please   refactor the parser\nso it streams lines instead of reading the whole file at once, thanks"


@pytest.fixture
def env(tmp_path, monkeypatch):
    monkeypatch.setenv("TXDB_DB", str(tmp_path / "catalog.db"))
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "claude"))
    proj = tmp_path / "claude" / "projects" / "-home-me-app"
    proj.mkdir(parents=True)
    return proj


def _session(proj: Path, *extra: dict, name: str = SID) -> Path:
    u0 = user(PROMPT, session=name)
    a0 = assistant([{"type": "text", "text": "Done."}], u0["uuid"], session=name)
    meta = user("<command-name>/clear</command-name>", session=name, isMeta=True)
    return write(proj / f"{name}.jsonl", [meta, u0, a0, *extra])


def _fork_title(path: Path) -> str:
    rep = json.loads(run("fork", str(path), "--json", ok=True).output)
    last = orjson.loads(Path(rep["target"]).read_bytes().splitlines()[-1])
    assert last["type"] == "custom-title"
    return last["customTitle"]


async def _page_heading(file_id: int) -> str:
    import os
    d = make_datasette(Path(os.environ["TXDB_DB"]))
    await d.invoke_startup()
    page = (await d.client.get(f"/-/txdb/session/{file_id}")).text
    h1 = re.search(r'<h1 class="txdb-title">(.*?)</h1>', page, re.S).group(1)
    return htmllib.unescape(re.sub(r"<[^>]+>", "", h1)).strip("“”")


def _catalog(path: Path) -> tuple[int, str, str]:
    import os
    conn = db.connect(os.environ["TXDB_DB"])
    try:
        return conn.execute("SELECT f.id, s.title, s.title_source FROM sessions s JOIN files f ON f.id = s.file_id "
                            "WHERE f.path = ?", (str(path),)).fetchone()
    finally:
        conn.close()


async def test_summary_outranks_ai_title_in_catalog_fork_and_page(env):
    f = _session(env, {"type": "ai-title", "aiTitle": "AI TITLE", "sessionId": SID},
                 {"type": "summary", "summary": "SUMMARY TITLE", "leafUuid": "x"})
    run("refresh", ok=True)
    fid, title, source = _catalog(f)
    assert (title, source) == ("SUMMARY TITLE", "summary")
    assert _fork_title(f) == "SUMMARY TITLE (Stripped)"
    assert await _page_heading(fid) == "SUMMARY TITLE"


async def test_a_session_with_only_a_prompt_is_titled_by_it_everywhere(env):
    f = _session(env)
    run("refresh", ok=True)
    fid, title, source = _catalog(f)
    want = " ".join(PROMPT.split())[:60]
    assert (title, source) == (want, "prompt")  # the meta /clear line is no prompt
    assert _fork_title(f) == want + " (Stripped)"
    assert await _page_heading(fid) == want


def test_a_prompt_with_an_image_first_text_block_counts_and_a_compact_summary_does_not(env):
    name = "5e55a1e0-0000-4000-8000-00000000000b"
    cs = user("This session is being continued from a previous conversation.", session=name, isCompactSummary=True)
    u = user([{"type": "text", "text": "Look at this screenshot"},
              {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}],
             cs["uuid"], session=name)
    f = write(env / f"{name}.jsonl", [cs, u, assistant([{"type": "text", "text": "ok"}], u["uuid"], session=name)])
    run("refresh", ok=True)
    assert _catalog(f)[1:] == ("Look at this screenshot", "prompt")
    assert _fork_title(f) == "Look at this screenshot (Stripped)"


def test_a_prompt_typed_after_an_ide_opened_file_note_titles_the_session(env):
    """The shape of a real session opened from an IDE: the first user
    message's first text block is only the <ide_opened_file> note, the
    typed prompt is the second block."""
    name = "5e55a1e0-0000-4000-8000-00000000000d"
    u = user([{"type": "text", "text": "<ide_opened_file>The user opened the file server.json in the IDE. "
               "This may or may not be related to the current task.</ide_opened_file>"},
              {"type": "text", "text": "GOSPEL CHECK. Read the status file\n\nthen deploy the node"}], session=name)
    f = write(env / f"{name}.jsonl", [u, assistant([{"type": "text", "text": "ok"}], u["uuid"], session=name)])
    run("refresh", ok=True)
    assert _catalog(f)[1:] == ("GOSPEL CHECK. Read the status file then deploy the node", "prompt")
    assert _fork_title(f) == "GOSPEL CHECK. Read the status file then deploy the node (Stripped)"


def test_a_human_prompt_is_one_rule_in_python_and_sql(env):
    """records.human_prompt and the human_prompts view name the same records;
    analyze's cut points are the human prompts of the chain, the first of
    which titles a session with nothing else to name it."""
    from txdb.model import records
    from txdb.catalog.sessions import analyze
    from txdb.catalog.ingest.store import refresh

    name = "5e55a1e0-0000-4000-8000-00000000000c"
    cs = user("This session is being continued from a previous conversation.", session=name, isCompactSummary=True)
    cmd = user("<command-name>/model</command-name>", cs["uuid"], session=name)
    angle = user("<div>not typed by a person</div>", cmd["uuid"], session=name)
    meta = user("Caveat: the messages below were generated", angle["uuid"], session=name, isMeta=True)
    p1 = user("first real prompt", meta["uuid"], session=name)
    a1 = assistant([{"type": "tool_use", "id": "toolu_9", "name": "Read", "input": {}}], p1["uuid"], session=name)
    tr = user([{"type": "tool_result", "tool_use_id": "toolu_9", "content": "x"}], a1["uuid"], session=name)
    a2 = assistant([{"type": "text", "text": "ok"}], tr["uuid"], session=name)
    p2 = user([{"type": "text", "text": "  second prompt"}], a2["uuid"], session=name)
    a3 = assistant([{"type": "text", "text": "k"}], p2["uuid"], session=name)
    ide = {"type": "text", "text": "<ide_opened_file>The user opened notes.md in the IDE.</ide_opened_file>"}
    p3 = user([ide, {"type": "text", "text": ""}, {"type": "text", "text": "third, after the IDE note"}],
              a3["uuid"], session=name)
    a4 = assistant([{"type": "text", "text": "k"}], p3["uuid"], session=name)
    only_markup = user([ide], a4["uuid"], session=name)
    not_text = user([ide, {"type": "tool_result", "tool_use_id": "toolu_9", "content": "x"},
                     {"type": "text", "text": "after a tool result"}], only_markup["uuid"], session=name)
    objs = [cs, cmd, angle, meta, p1, a1, tr, a2, p2, a3, p3, a4, only_markup, not_text,
            assistant([{"type": "text", "text": "k"}], not_text["uuid"], session=name)]
    f = write(env / f"{name}.jsonl", objs)
    import os
    conn = db.connect(os.environ["TXDB_DB"])
    refresh(conn, [env.parent])
    (fid,) = conn.execute("SELECT id FROM files WHERE path = ?", (str(f),)).fetchone()
    lines = [i + 1 for i, o in enumerate(objs) if records.human_prompt(o) is not None]
    assert lines == [5, 9, 11]
    assert records.human_prompt(p3) == "third, after the IDE note"
    assert [r[0] for r in conn.execute("SELECT line FROM human_prompts WHERE file_id = ? ORDER BY line", (fid,))] == lines
    assert [c["line"] for c in analyze(conn, fid)["cut_points"]] == lines
    assert conn.execute("SELECT title, title_source FROM sessions WHERE file_id = ?", (fid,)).fetchone() == (
        "first real prompt", "prompt")
    conn.close()
