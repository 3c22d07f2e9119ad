"""Token estimates, in one place.

Everything that reports or writes a token figure (the catalog's stored
columns, the SQL functions registered on every connection, ``analyze`` and
the surgery plan) calls these functions, so they never disagree.

The base rule is chars/4 of the text as a request carries it, JSON-escaped
(thinking: text + signature). Images cost (width * height) / 750 tokens, capped
at 1600, as the API bills them; base64 length says nothing about that.
A PDF document is billed per page (:func:`document_info`), a text document
as its text.
Every content block also costs its envelope on the chain, the JSON the
request wraps it in (type, ids: :func:`envelope_chars`), and each message
its role wrapper (:data:`MESSAGE_TOKENS`); a strip that keeps the block (a
marker for a tool result) keeps both.
Calibrating these raw estimates against the usage the API recorded is
``txdb.catalog.estimate``'s job (used by ``analyze`` and ``reset-usage`` alike).
"""

from __future__ import annotations

import base64
import hashlib
import math
import re
import struct

import orjson

CHARS_PER_TOKEN = 4
IMAGE_TOKEN_CAP = 1600
IMAGE_PIXELS_PER_TOKEN = 750
# The fixed cost of a content block whose envelope is not measured below
# (an image, a document, a server tool's result), whatever its size: the
# JSON it is sent in, which a strip that leaves a marker keeps.
BLOCK_TOKENS = 20
# A thinking block's envelope: {"type":"thinking","thinking":"",
# "signature":""} is 48 characters, 12 tokens of chars/4 (its signature is
# in its own tokens), what the thinking a pass drops takes with it.
THINKING_BLOCK_TOKENS = 12
# The characters of a block's envelope as the CLI sends it (compact JSON,
# the comma after it included), measured on the requests the real CLI
# sends on resume (bench/bench_truth.py; tests/test_estimate_realcli.py):
# {"type":"text","text":""} 25; {"type":"tool_use","id":"","name":"",
# "input":} 46 and {"type":"tool_result","tool_use_id":"","content":""} 52,
# each with its id as the API issues them (toolu_01 and 22 more: 30
# characters); any other key as written (``,"is_error":false``, a tool
# call's ``caller``); 26 for each item of a tool result's list (an image's 80).
ENVELOPE_CHARS = {"text": 26, "tool_use": 77, "server_tool_use": 77, "tool_result": 83,
                  "thinking": 4 * THINKING_BLOCK_TOKENS, "redacted_thinking": 4 * THINKING_BLOCK_TOKENS}
RESULT_ITEM_CHARS = {"text": 26, "image": 80}
# The keys those envelopes hold; any other a block has is sent as written.
_BLOCK_KEYS = {"text": {"type", "text"}, "tool_use": {"type", "id", "name", "input"},
               "server_tool_use": {"type", "id", "name", "input"},
               "tool_result": {"type", "tool_use_id", "content"},
               "thinking": {"type", "thinking", "signature"}, "redacted_thinking": {"type", "data"}}
# Each message of a request wraps its blocks (or its string, a prompt sent
# as one) in {"role":"user","content":...}: 29 characters with its comma,
# 34 for an assistant message (8.5: 8, as the blocks' own tokens are rounded
# up), once for the lines of one message.
MESSAGE_TOKENS = {"user": 7, "assistant": 8}


def envelope_chars(block: dict) -> int:
    """Characters of the JSON a content block is sent in beyond its content
    (its text, input, result, signature): by kind (:data:`ENVELOPE_CHARS`),
    with any other key it holds as written and a tool result's list items;
    a kind not measured, :data:`BLOCK_TOKENS` of them."""
    btype = block.get("type")
    n = ENVELOPE_CHARS.get(btype)
    if n is None:
        return CHARS_PER_TOKEN * BLOCK_TOKENS
    known = _BLOCK_KEYS[btype]
    if not block.keys() <= known:  # a key sent as written: a tool call's caller, is_error
        for key in block.keys() - known:
            try:
                n += len(orjson.dumps({key: block[key]}))  # ,"key":value
            except (orjson.JSONEncodeError, TypeError):
                n += CHARS_PER_TOKEN * BLOCK_TOKENS
    if btype == "tool_result":
        content = block.get("content")
        if isinstance(content, list):  # [..] in place of "", each item in its own envelope
            n += sum(RESULT_ITEM_CHARS.get(i.get("type"), CHARS_PER_TOKEN * BLOCK_TOKENS) if isinstance(i, dict) else 0
                     for i in content)
    return n


# Characters JSON writes as a two-character escape; other control
# characters become a six-character \u00XX.
_SHORT_ESCAPES = ("\n", '"', "\\", "\t", "\r", "\b", "\f")
_CONTROL_RE = re.compile(r"[\x00-\x07\x0b\x0e-\x1f]")


def escaped_chars(text: str) -> int:
    """Length of ``text`` once written as a JSON string in a request (without
    its quotes): a newline, tab, quote or backslash costs two characters, a
    rarer control character six. A request carries text this way, so a text
    of many short lines is longer on the wire than it looks."""
    if not text:
        return 0
    try:  # one pass in C: the escapes are what JSON adds to the UTF-8 bytes
        return len(text) + len(orjson.dumps(text)) - 2 - len(text.encode())
    except (orjson.JSONEncodeError, UnicodeEncodeError):  # a lone surrogate
        n = len(text) + sum(text.count(c) for c in _SHORT_ESCAPES)
        return n + 5 * len(_CONTROL_RE.findall(text))


def text_tokens(text: int | str) -> int:
    """Estimated tokens for a text (its JSON-escaped length, see
    :func:`escaped_chars`) or for a count of characters already measured."""
    chars = escaped_chars(text) if isinstance(text, str) else text
    if chars <= 0:
        return 0
    return math.ceil(chars / CHARS_PER_TOKEN)


def thinking_tokens(text: int | str, signature_chars: int) -> int:
    """A thinking block is sized as its text plus its signature: newer CLIs
    record thinking with empty text and only the signature, which is what
    a resumed request carries back (and what a strip removes)."""
    chars = escaped_chars(text) if isinstance(text, str) else max(0, text)
    return text_tokens(chars + max(0, signature_chars))


def image_tokens(width: int | None, height: int | None) -> int:
    """Tokens the API charges for an image of the given pixel size."""
    if not width or not height:
        return IMAGE_TOKEN_CAP
    return min(IMAGE_TOKEN_CAP, math.ceil(width * height / IMAGE_PIXELS_PER_TOKEN))


# A PDF page is billed as its extracted text plus an image of the page
# (Anthropic's PDF support docs: "1,500-3,000 tokens per page" of text-heavy
# content, and the page image at the image rule). Text: the low end of that
# range; the image: the image rule's cap (a page's pixel size is the API's
# rendering, unknown here; a letter page at the API's 1.15 megapixels is
# 1,534, at the cap's edge).
PDF_PAGE_TEXT_TOKENS = 1500
PDF_PAGE_TOKENS = PDF_PAGE_TEXT_TOKENS + IMAGE_TOKEN_CAP
# Bytes of PDF per page when the pages cannot be counted (page objects in
# compressed object streams, or a file that is not a PDF): fitted on the one
# recorded figure, a document of 154,272 bytes (205,696 chars of base64)
# billed about 13,200 tokens, 4.26 pages of PDF_PAGE_TOKENS.
PDF_BYTES_PER_PAGE = 36_000
# The most pages the API reads of one request's PDFs (its PDF support docs:
# 100 pages a request): a document that claims more is never billed more.
PDF_MAX_PAGES = 100
# In one pass: an object header (``N G obj``: its number) or a page object's
# dictionary (``/Type /Page``, not ``/Pages``).
# A header starts where a run of digits does, and its numbers are short: a
# long run of digits is passed over once, never tried from each of its digits.
_PDF_SCAN_RE = re.compile(rb"(?<!\d)(\d{1,10})\s+\d{1,5}\s+obj\b|/Type\s*/Page(?![A-Za-z])")


def pdf_pages(data: bytes) -> int | None:
    """Pages of a PDF: its ``/Type /Page`` objects, each object number once
    (an incremental update rewrites a page under the same number). None
    when none is found in the clear: pages in compressed object streams,
    or not a PDF."""
    numbers: set[bytes | int] = set()
    current: bytes | int | None = None  # the object the scan is in
    for m in _PDF_SCAN_RE.finditer(data):
        if m.group(1) is not None:
            current = m.group(1)
        else:  # a page: counted once per object (a page outside any object: by where it is)
            numbers.add(current if current is not None else m.start())
    return len(numbers) or None


def document_info(block: dict) -> dict:
    """media type, pages and tokens of a ``document`` block as the API bills
    it: a PDF per page (:data:`PDF_PAGE_TOKENS`; pages it cannot count by
    its size, :data:`PDF_BYTES_PER_PAGE`), a text document as its text, a
    document by reference (url, file id) as the block written out."""
    source = block.get("source") if isinstance(block.get("source"), dict) else {}
    stype = source.get("type")
    media_type = source.get("media_type")
    data = source.get("data")
    info = {"media_type": media_type, "pages": None,
            "base64_chars": len(data) if stype == "base64" and isinstance(data, str) else 0}
    if stype == "base64" and isinstance(data, str):
        raw = image_bytes(source)
        size = len(raw) if raw is not None else len(data) * 3 // 4
        info["pages"] = pdf_pages(raw) if raw else None
        if info["pages"]:
            info["tokens"] = min(info["pages"], PDF_MAX_PAGES) * PDF_PAGE_TOKENS
        else:
            info["tokens"] = min(math.ceil(max(1, size) * PDF_PAGE_TOKENS / PDF_BYTES_PER_PAGE),
                                 PDF_MAX_PAGES * PDF_PAGE_TOKENS)
    elif stype == "text":
        info["tokens"] = text_tokens(data if isinstance(data, str) else "")
    elif stype == "content" and isinstance(source.get("content"), (list, str)):
        content = source["content"]
        parts = [content] if isinstance(content, str) else [
            b.get("text", "") for b in content if isinstance(b, dict) and isinstance(b.get("text"), str)]
        info["tokens"] = text_tokens("\n".join(parts))
    else:
        return dict(info, tokens=text_tokens(len(orjson.dumps(block, default=str))))
    # a title and context are sent as text beside the document
    info["tokens"] += sum(text_tokens(block[k]) for k in ("title", "context") if isinstance(block.get(k), str))
    return info


def image_size(data: bytes) -> tuple[int | None, int | None]:
    """Pixel size from the header of a PNG, JPEG, GIF or WebP image."""
    if data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) >= 24:
        w, h = struct.unpack(">II", data[16:24])
        return w, h
    if data[:6] in (b"GIF87a", b"GIF89a") and len(data) >= 10:
        w, h = struct.unpack("<HH", data[6:10])
        return w, h
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP" and len(data) >= 30:
        chunk = data[12:16]
        if chunk == b"VP8 ":
            w, h = struct.unpack("<HH", data[26:30])
            return w & 0x3FFF, h & 0x3FFF
        if chunk == b"VP8L":
            b = data[21:25]
            w = 1 + (((b[1] & 0x3F) << 8) | b[0])
            h = 1 + (((b[3] & 0xF) << 10) | (b[2] << 2) | ((b[1] & 0xC0) >> 6))
            return w, h
        if chunk == b"VP8X":
            w = 1 + int.from_bytes(data[24:27], "little")
            h = 1 + int.from_bytes(data[27:30], "little")
            return w, h
    if data[:2] == b"\xff\xd8":
        i = 2
        n = len(data)
        while i + 9 < n:
            if data[i] != 0xFF:
                i += 1
                continue
            marker = data[i + 1]
            if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:
                i += 2
                continue
            seg_len = struct.unpack(">H", data[i + 2 : i + 4])[0]
            if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
                h, w = struct.unpack(">HH", data[i + 5 : i + 9])
                return w, h
            i += 2 + seg_len
    return None, None


def image_info(source: dict) -> dict:
    """media type, pixel size, sha256 of decoded bytes and tokens of an image source."""
    media_type = source.get("media_type")
    data = source.get("data")
    width = height = sha = None
    raw = image_bytes(source)
    if raw:
        sha = hashlib.sha256(raw).hexdigest()
        width, height = image_size(raw)
    return {
        "media_type": media_type,
        "width": width,
        "height": height,
        "sha256": sha,
        "tokens": image_tokens(width, height),
        "base64_chars": len(data) if isinstance(data, str) else 0,
        "valid": raw is not None,
    }


def image_bytes(source: dict) -> bytes | None:
    """The decoded bytes of a base64 image source; None when its data is not
    valid base64 (the API refuses such a block, and it has no sha256)."""
    data = source.get("data") if isinstance(source, dict) else None
    if not isinstance(data, str) or not data:
        return None
    try:
        return base64.b64decode(data, validate=True)
    except (ValueError, TypeError):
        return None
