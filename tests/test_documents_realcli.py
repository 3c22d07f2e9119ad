"""A PDF the real Claude Code CLI read, judged by the CLI itself: on resume
it sends the ``document`` block back inside the Read's tool_result (where
the catalog sizes it per page), and after ``strip-tools`` + apply it sends no
document and the session still loads whole."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from conftest import run
from txdb.model import tokens

sys.path.insert(0, str(Path(__file__).resolve().parent))
from realcli.oracle import resume  # noqa: E402

pytestmark = pytest.mark.realcli

CLI_PDF = next((Path(__file__).parent / "data" / "documents" / "-tmp-txdb-cli-fixtures-pdf-demo").glob("*.jsonl"))


@pytest.fixture
def env(tmp_path, monkeypatch):
    monkeypatch.setenv("TXDB_DB", str(tmp_path / "catalog.db"))
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "claude"))
    proj = tmp_path / "claude" / "projects" / CLI_PDF.parent.name
    proj.mkdir(parents=True)
    return Path(shutil.copyfile(CLI_PDF, proj / CLI_PDF.name))


def _documents(r) -> list[dict]:
    """Every document block the resumed request sent, with where it was."""
    out = []
    for b in r.blocks():
        if b.get("type") == "document":
            out.append({"where": "message", **b["source"]})
        elif b.get("type") == "tool_result" and isinstance(b.get("content"), list):
            out += [{"where": "tool_result", **x["source"]} for x in b["content"]
                    if isinstance(x, dict) and x.get("type") == "document"]
    return out


def test_a_pdf_read_is_sent_in_its_tool_result_and_strip_tools_drops_it(env, tmp_path):
    original = CLI_PDF.read_text()
    stored = next(o for o in map(json.loads, original.splitlines())
                  if isinstance(o.get("toolUseResult"), dict) and o["toolUseResult"].get("type") == "pdf")
    data = stored["message"]["content"][0]["content"][1]["source"]["data"]
    base = resume(env, "ping", workdir=tmp_path / "base")
    assert base.loaded and not base.compacted, base.summary()
    docs = _documents(base)
    assert [(d["where"], d["media_type"], d["data"]) for d in docs] == [("tool_result", "application/pdf", data)]

    rep = json.loads(run("strip-tools", env, "--only-results", "--apply", "--json", ok=True).output)
    # three pages, priced per page (the fake API bills the request at chars/4,
    # the document's base64 too, so only the block's size is checked here)
    assert rep["surgery"]["result"]["tokens_saved"] >= 3 * tokens.PDF_PAGE_TOKENS
    after = resume(env, "ping", workdir=tmp_path / "after")
    assert after.loaded and not after.compacted, after.summary()
    assert _documents(after) == []
    assert len(after.user_assistant_messages()) == len(base.user_assistant_messages())
    assert "stripped by txdb" in after.messages_text()
