"""A cut block's whole text, read back for the full-text index and `txdb_text`
(`records.block_text_at`), is the text `block_rows` derived for it at refresh:
checked on every block of every record of tests/data and the shared corpus."""
from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from txdb.model.records import block_rows, block_text_at, message_content

HERE = Path(__file__).resolve().parent
SHARED = HERE.parent.parent / "shared" / "corpus"


def _records(root: Path):
    for path in sorted(root.rglob("*.jsonl")):
        with open(path, "rb") as fh:
            for line in fh:
                try:
                    obj = orjson.loads(line)
                except orjson.JSONDecodeError:
                    continue
                if type(obj) is dict:
                    yield obj


def _check(root: Path) -> int:
    n = 0
    for obj in _records(root):
        content = message_content(obj)
        if content is None:
            continue
        msg = obj.get("message")
        rows = block_rows(content, msg.get("role") if type(msg) is dict else None)
        for row in rows:
            assert block_text_at(content, row["idx"]) == row.get("text"), (obj.get("uuid"), row["idx"], row["type"])
            n += 1
        count = len(content) if isinstance(content, list) else 1
        assert block_text_at(content, count) is None and block_text_at(content, -1) is None
    return n


def test_every_block_of_tests_data_reads_back_as_derived():
    assert _check(HERE / "data") > 100


@pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/corpus is absent")
def test_every_block_of_the_shared_corpus_reads_back_as_derived():
    assert _check(SHARED) > 1000


def test_blocks_without_text_and_odd_content():
    content = [{"type": "text", "text": 3}, "loose", {"type": "image", "source": {"data": ""}},
               {"type": "tool_result", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
               {"type": "mcp_tool_result", "content": None}, {"type": "thinking", "data": "d"}]
    assert [block_text_at(content, i) for i in range(len(content))] == ["", None, None, "a\nb", "", "d"]
    assert [r.get("text") for r in block_rows(content, "user")] == ["", None, "a\nb", "", "d"]
    assert block_text_at("plain", 0) == "plain" and block_text_at("plain", 1) is None
