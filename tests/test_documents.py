"""A ``document`` block is sized as the API bills it: a PDF per page (its
extracted text plus an image of each page), a text document as its text;
never by its base64 (docs/architecture.md, "The context estimate")."""

from __future__ import annotations

import base64
import json
import math
from pathlib import Path

import pytest

from conftest import run
from sessions import assistant, pdf_block, pdf_bytes, user, write
from txdb.catalog import db, estimate
from txdb.model import tokens
from txdb.catalog.ingest.store import refresh

SID = "22222222-0000-0000-0000-000000000001"


def read_session(path: Path, document: dict) -> Path:
    """A prompt, a Read of a PDF whose result holds the document (as Claude
    Code writes it: a text line, then the document), and an answer."""
    u0 = user("Please read the paper", session=SID)
    a0 = assistant([{"type": "tool_use", "id": "toolu_pdf1", "name": "Read",
                     "input": {"file_path": "/home/me/paper.pdf"}}], u0["uuid"], session=SID)
    r0 = user([{"type": "tool_result", "tool_use_id": "toolu_pdf1", "content": [
        {"type": "text", "text": "PDF file read: /home/me/paper.pdf (8KB)"}, document]}],
        a0["uuid"], session=SID, toolUseResult={"type": "pdf"})
    a1 = assistant("It has a few pages.", r0["uuid"], session=SID)
    return write(path, [u0, a0, r0, a1])


def attached_session(path: Path, document: dict) -> Path:
    """A user message that carries a document beside its text (the API's
    shape for an attached PDF)."""
    u0 = user([document, {"type": "text", "text": "Summarise this"}], session=SID)
    a0 = assistant("A summary.", u0["uuid"], session=SID)
    return write(path, [u0, a0])


@pytest.fixture
def env(tmp_path, monkeypatch):
    monkeypatch.setenv("TXDB_DB", str(tmp_path / "catalog.db"))
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "claude"))
    proj = tmp_path / "claude" / "projects" / "-home-me-app"
    proj.mkdir(parents=True)
    return proj


def _result_tokens(env: Path, document: dict) -> int:
    """The tool_result's tokens in the catalog, less its text line's."""
    read_session(env / f"{SID}.jsonl", document)
    assert run("refresh").exit_code == 0
    row = json.loads(run("query", "select tokens, text from blocks where kind = 'tool_result'", "--json").output)
    [(t, text)] = [(r["tokens"], r["text"]) for r in row]
    assert "JVBER" not in text                      # the base64 is not searchable text either
    return t - tokens.text_tokens(text)


def test_a_pdf_in_a_read_result_is_sized_per_page_not_by_its_base64(env):
    data = pdf_bytes(3, pad_to=60_000)
    doc = pdf_block(data)
    base64_estimate = math.ceil(len(doc["source"]["data"]) / 4)
    assert _result_tokens(env, doc) == 3 * tokens.PDF_PAGE_TOKENS
    assert 3 * tokens.PDF_PAGE_TOKENS < base64_estimate / 2  # what it was sized at before


def test_one_page_and_ten_pages_of_the_same_size_differ_by_pages(env, tmp_path):
    one, ten = pdf_bytes(1, pad_to=8000), pdf_bytes(10, pad_to=8000)
    assert abs(len(one) - len(ten)) < 100
    sizes = {}
    for pages, data in ((1, one), (10, ten)):
        read_session(env / f"{SID}.jsonl", pdf_block(data))
        assert run("refresh").exit_code == 0
        rep = json.loads(run("analyze", SID, "--json").output)
        sizes[pages] = next(r["raw_tokens"] for r in rep["by_type"] if r["category"] == "tool_result")
    assert sizes[10] - sizes[1] == 9 * tokens.PDF_PAGE_TOKENS


def test_an_attached_pdf_is_its_own_kind_in_analyze(env):
    doc = pdf_block(pdf_bytes(2))
    attached_session(env / f"{SID}.jsonl", doc)
    assert run("refresh").exit_code == 0
    rep = json.loads(run("analyze", SID, "--json").output)
    [row] = [r for r in rep["by_type"] if r["category"] == "document"]
    assert row["items"] == 1
    assert row["raw_tokens"] == 2 * tokens.PDF_PAGE_TOKENS
    assert row["chars"] == len(doc["source"]["data"])
    # and the session's raw size holds it at that figure, not its base64
    chain = json.loads(run("query", f"select chain_tokens from sessions where session_id = '{SID}'",
                           "--json").output)[0]["chain_tokens"]
    assert 2 * tokens.PDF_PAGE_TOKENS < chain < 2 * tokens.PDF_PAGE_TOKENS + 200


def test_pages_in_compressed_object_streams_fall_back_to_the_size_guess():
    """The issue's one measured point: 205,696 chars of base64 (154,272
    bytes) billed about 13,200 tokens; chars/4 said 51,424."""
    data = pdf_bytes(3, pad_to=154_272, compressed=True)
    assert tokens.pdf_pages(data) is None and tokens.pdf_pages(pdf_bytes(3)) == 3
    info = tokens.document_info(pdf_block(data))
    assert info["pages"] is None
    assert info["tokens"] == math.ceil(len(data) * tokens.PDF_PAGE_TOKENS / tokens.PDF_BYTES_PER_PAGE)
    assert abs(info["tokens"] - 13_200) / 13_200 < 0.05


def test_a_page_rewritten_by_an_incremental_update_counts_once():
    data = pdf_bytes(2)
    update = data + b"3 0 obj\n<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] >>\nendobj\n"
    assert tokens.pdf_pages(update) == 2
    assert tokens.pdf_pages(data.replace(b"/Type /Page ", b"/Type/Page ")) == 2


def test_a_pdf_claiming_a_million_pages_is_billed_at_most_the_apis_page_limit():
    # A hostile line: page objects the API would never read past its limit.
    claims = b"%PDF-1.4\n" + b"".join(b"%d 0 obj <</Type /Page>> endobj\n" % i for i in range(1, 1_000_001))
    assert tokens.pdf_pages(claims) == 1_000_000
    assert tokens.document_info(pdf_block(claims))["tokens"] == tokens.PDF_MAX_PAGES * tokens.PDF_PAGE_TOKENS
    huge = pdf_bytes(3, pad_to=20_000_000, compressed=True)  # no page in the clear: the size guess
    assert tokens.document_info(pdf_block(huge))["tokens"] == tokens.PDF_MAX_PAGES * tokens.PDF_PAGE_TOKENS


def test_page_dictionaries_outside_any_object_are_each_a_page_in_one_scan():
    # 200,000 bare dictionaries: each its own page (the scan reads the bytes once;
    # it searched back to the start for each one, minutes on this line).
    assert tokens.pdf_pages(b"%PDF" + b"/Type /Page\n" * 200_000) == 200_000


def test_a_text_document_is_sized_as_its_text():
    body = "line of the contract\n" * 400
    doc = {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": body},
           "title": "contract.txt"}
    assert tokens.document_info(doc)["tokens"] == tokens.text_tokens(body) + tokens.text_tokens("contract.txt")


def _usage(context: int) -> dict:
    return {"input_tokens": 10, "output_tokens": 50, "cache_creation_input_tokens": 200,
            "cache_read_input_tokens": context - 210}


def long_session_with_a_pdf(path: Path, pages: int, pad_to: int) -> tuple[Path, dict]:
    """Eight turns of about 540 tokens each (2,000 characters of prompt and
    its envelope), each recorded as such, then a Read of a PDF that the API
    billed per page, then one more turn: the recorded usage a calibration
    fits on, as a real session's. The first turn records what a real CLI
    sends at least (its system prompt and tools, ``EMPTY_SESSION_OVERHEAD``)
    and 6,000 more: a figure under that floor is one no content explains,
    and the bounded fit meets it by lowering its factor to the bottom of its
    range (0.7), which then prices the pages at 0.7 of what was billed."""
    doc = pdf_block(pdf_bytes(pages, pad_to=pad_to))
    objs, parent, context = [], None, estimate.EMPTY_SESSION_OVERHEAD + 6_000
    for k in range(8):
        u = user(f"question {k} " + "word " * 400, parent, session=SID)
        context += 540
        a = assistant(f"answer {k}", u["uuid"], session=SID, usage=_usage(context))
        objs += [u, a]
        parent = a["uuid"]
    u = user("Please read the paper", parent, session=SID)
    a0 = assistant([{"type": "tool_use", "id": "toolu_pdf1", "name": "Read",
                     "input": {"file_path": "/home/me/paper.pdf"}}], u["uuid"], session=SID,
                   usage=_usage(context + 30))
    r0 = user([{"type": "tool_result", "tool_use_id": "toolu_pdf1", "content": [
        {"type": "text", "text": "PDF file read: /home/me/paper.pdf (120KB)"}, doc]}],
        a0["uuid"], session=SID, toolUseResult={"type": "pdf"})
    context += 30 + 40 + pages * tokens.PDF_PAGE_TOKENS  # as billed: per page
    a1 = assistant("It has two pages.", r0["uuid"], session=SID, usage=_usage(context))
    u2 = user("thanks " + "word " * 400, a1["uuid"], session=SID)
    a2 = assistant("welcome", u2["uuid"], session=SID, usage=_usage(context + 540))
    return write(path, objs + [u, a0, r0, a1, u2, a2]), doc


def test_strip_tools_on_a_pdf_read_predicts_the_saving_per_page(env):
    """The plan's saving, calibrated on the session's recorded usage, is the
    pages the API billed: within 10% of them (not the 40,000 tokens of the
    document's base64). With the first turn under the overhead floor (the
    6,000 this session once recorded), the fit's factor is held at 0.7 and
    the saving reads 4,360: the floor, not the page price, is what a fit
    refuses there (test_a_first_turn_under_the_floor_holds_the_fit_at_its_lowest_factor)."""
    f, doc = long_session_with_a_pdf(env / f"{SID}.jsonl", pages=2, pad_to=120_000)
    assert math.ceil(len(doc["source"]["data"]) / 4) > 6 * 2 * tokens.PDF_PAGE_TOKENS
    assert run("refresh").exit_code == 0
    before = f.read_bytes()
    r = run("strip-tools", f, "--only-results", "--dry-run", "--json")
    assert r.exit_code == 0, r.output
    rep = json.loads(r.output)
    billed = 2 * tokens.PDF_PAGE_TOKENS
    assert abs(rep["result"]["tokens_saved"] - billed) <= 30   # the block, less the marker left
    saved = rep["tokens_before"] - rep["tokens_after"]
    assert abs(saved - billed) <= 0.1 * billed, rep
    assert f.read_bytes() == before


def test_a_first_turn_under_the_floor_holds_the_fit_at_its_lowest_factor(env):
    """A session whose first turn recorded less than any real CLI sends (the
    6,000 a synthetic session once recorded): the fit keeps its overhead at
    the floor and meets the turns with the lowest factor of its range."""
    from txdb.model.transcript import Transcript
    from txdb.surgery.usage import calibration

    f, _ = long_session_with_a_pdf(env / f"{SID}.jsonl", pages=2, pad_to=120_000)
    lines = f.read_text().splitlines()
    shift = estimate.EMPTY_SESSION_OVERHEAD
    low = []
    for line in lines:
        o = json.loads(line)
        u = o.get("message", {}).get("usage") if o.get("type") == "assistant" else None
        if u:
            u["cache_read_input_tokens"] -= shift
        low.append(json.dumps(o))
    f.write_text("\n".join(low) + "\n")
    fit = calibration(Transcript.load(f))
    assert fit.overhead >= estimate.EMPTY_SESSION_OVERHEAD and fit.factor == estimate.FACTOR_RANGE[0]


def test_the_migration_re_reads_files_holding_a_document(tmp_path):
    """Migration 025 marks the files that hold a document for a re-read, so
    an older catalog's stored sizes follow the rule; other files are not
    read again."""
    proj = tmp_path / "projects" / "-home-me-app"
    proj.mkdir(parents=True)
    doc = pdf_block(pdf_bytes(2, pad_to=20_000))
    read_session(proj / f"{SID}.jsonl", doc)
    write(proj / "33333333-0000-0000-0000-000000000001.jsonl",
          [user("no document here", session="33333333-0000-0000-0000-000000000001")])
    conn = db.connect(tmp_path / "c.db")
    refresh(conn, [tmp_path / "projects"])
    right = conn.execute("SELECT sum(tokens) FROM records").fetchone()[0]
    # As the older rule left it: the document's JSON as the result's text
    # (and in the search index), sized by it.
    from txdb.catalog.ingest.store import FTS_INDEX, FTS_UNINDEX
    file_id = conn.execute("SELECT id FROM files WHERE session_id = ?", (SID,)).fetchone()[0]
    conn.execute(FTS_UNINDEX, (file_id, 0))
    conn.execute("UPDATE blocks SET text = ?, tokens = ? WHERE kind = 'tool_result'",
                 (json.dumps(doc), math.ceil(len(json.dumps(doc)) / 4)))
    conn.execute(FTS_INDEX, (file_id, 0))
    conn.execute("UPDATE records SET tokens = tokens + 9999 WHERE type = 'user' AND txdb_json(file_id, offset) LIKE '%toolu_pdf1%'"
                 " AND txdb_json(file_id, offset) LIKE '%tool_result%'")
    conn.execute("DELETE FROM _txdb_migrations WHERE name LIKE '025%'")
    conn.close()
    conn = db.connect(tmp_path / "c.db")
    stale = dict(conn.execute("SELECT session_id, inode IS NULL FROM files"))
    assert stale == {SID: 1, "33333333-0000-0000-0000-000000000001": 0}
    refresh(conn, [tmp_path / "projects"])
    assert conn.execute("SELECT sum(tokens) FROM records").fetchone()[0] == right
    assert conn.execute("SELECT tokens FROM blocks WHERE kind = 'tool_result'").fetchone()[0] == \
        2 * tokens.PDF_PAGE_TOKENS + tokens.text_tokens("PDF file read: /home/me/paper.pdf (8KB)")


CLI_PDF = next((Path(__file__).parent / "data" / "documents" / "-tmp-txdb-cli-fixtures-pdf-demo").glob("*.jsonl"))


def test_a_pdf_the_real_cli_read_is_sized_per_page(env):
    """Claude Code 2.1.328 stores a Read of a PDF (tests/realcli/scenarios.py
    pdf_session, 3 pages) as a tool_result holding a text line and a
    ``document`` block with the base64 PDF (its ``toolUseResult`` repeats the
    base64, which is never sent); the catalog sizes that result by pages."""
    import shutil

    f = Path(shutil.copyfile(CLI_PDF, env / CLI_PDF.name))
    [(content, tur)] = [(o["message"]["content"][0]["content"], o["toolUseResult"])
                        for o in map(json.loads, f.read_text().splitlines())
                        if isinstance(o.get("toolUseResult"), dict) and o["toolUseResult"].get("type") == "pdf"]
    assert [b["type"] for b in content] == ["text", "document"]
    source = content[1]["source"]
    assert (source["type"], source["media_type"]) == ("base64", "application/pdf")
    assert tokens.pdf_pages(base64.b64decode(source["data"])) == 3
    assert tur["file"]["base64"] == source["data"]
    assert run("refresh").exit_code == 0
    [row] = json.loads(run("query", "select tokens, text from blocks where kind = 'tool_result' "
                                    "and text like 'PDF file read%'", "--json").output)
    assert row["tokens"] == 3 * tokens.PDF_PAGE_TOKENS + tokens.text_tokens(row["text"])


async def test_the_session_page_shows_a_document_by_its_billed_tokens(tmp_path):
    from txdb.web.metadata import make_datasette

    proj = tmp_path / "p" / "-home-me-app"
    proj.mkdir(parents=True)
    doc = pdf_block(pdf_bytes(2))
    attached_session(proj / f"{SID}.jsonl", doc)
    conn = db.connect(tmp_path / "c.db")
    refresh(conn, [tmp_path / "p"])
    conn.close()
    d = make_datasette(tmp_path / "c.db")
    await d.invoke_startup()
    page = (await d.client.get(f"/-/txdb/session/{SID}")).text
    conv = page[page.index('id="conversation"'):]
    assert (f'<div class="blk image document">document application/pdf · {len(doc["source"]["data"]):,} chars '
            f'of base64 · {2 * tokens.PDF_PAGE_TOKENS:,} tok</div>') in conv


def test_a_long_run_of_digits_is_passed_over_once():
    # An object header's pattern tried from each digit of the run: 100,000 digits
    # held a refresh 91 s; now one pass over the bytes.
    assert tokens.pdf_pages(b"%PDF-1.4\n" + b"1" * 1_000_000 + b" 0 obj <</Type /Page>>") == 1
