"""Read a JSONL file as lines with byte offsets, and parse each line.

Reading streams: memory is bounded by the longest line, never the file.
Parsing is strict first (orjson) and forgiving second, so that what the JSON
grammar allows but orjson refuses (lone surrogate escapes, nesting deeper
than 1,024 levels) is not lost, and two objects glued on one line are split
as a recovery step.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import BinaryIO, Iterator

import orjson

from txdb.model import deep

BOM = b"\xef\xbb\xbf"
READ_BUFFER = 1 << 20
HEAD_BYTES = 4096
TAIL_BYTES = 256
# The error of a line that held only whole objects glued together (every one read).
GLUED = "JSON objects glued on one line; split"


@dataclass(slots=True)
class Line:
    number: int  # 1-based line number in the file
    offset: int  # byte offset of the line's first byte
    raw: bytes  # the line's bytes, without the line ending
    length: int  # bytes consumed, line ending included (the ending is the last length - len(raw) bytes)


def read_lines(
    fh: BinaryIO, start_offset: int = 0, start_number: int = 1, final_partial: bool = True,
    every_byte: bool = False,
) -> Iterator[Line]:
    """Yield complete lines from ``start_offset``.

    A last line without a newline is yielded only when ``final_partial`` is
    true and it parses as a whole JSON object (published files often lack the
    final newline; a line Claude Code is still writing does not parse). When
    such a line was read earlier and its newline arrives later, that newline
    is consumed here without counting a line. With ``every_byte`` a last
    line without a newline is always yielded (surgery keeps every byte of
    the copy it rewrites).
    """
    ends_previous = False
    if start_offset > 0:
        fh.seek(start_offset - 1)
        ends_previous = fh.read(1) != b"\n"
    fh.seek(start_offset)
    offset = start_offset
    number = start_number
    readline = fh.readline
    while True:
        chunk = readline()
        if not chunk:
            return
        if ends_previous:
            ends_previous = False
            if chunk in (b"\n", b"\r\n"):
                offset += len(chunk)
                continue
        if chunk[-1:] != b"\n":
            if every_byte or (final_partial and is_whole_object(chunk)):
                yield Line(number, offset, chunk.rstrip(b"\r"), len(chunk))
            return
        body = chunk[:-1]
        if body[-1:] == b"\r":
            body = body[:-1]
        yield Line(number, offset, body, len(chunk))
        offset += len(chunk)
        number += 1


def _sha_at(fh, start: int, length: int) -> str:
    fh.seek(start)
    return hashlib.sha256(fh.read(length)).hexdigest()


def head_tail(fh, cursor: int) -> tuple[str, str]:
    """Hashes of the first bytes and of the bytes before ``cursor``: a file
    whose hashes still match at its old cursor has only grown."""
    head = _sha_at(fh, 0, min(cursor, HEAD_BYTES))
    tail_start = max(0, cursor - TAIL_BYTES)
    tail = _sha_at(fh, tail_start, cursor - tail_start)
    return head, tail


def is_whole_object(chunk: bytes) -> bool:
    """Whether a last line without its newline is complete: it holds a whole
    JSON object (a published file), not a line still being written. The one
    rule: the reader and the pending copy's prefix both use it."""
    text = chunk.strip()
    if not text.endswith(b"}"):
        return False
    try:
        return isinstance(orjson.loads(text), dict)
    except orjson.JSONDecodeError:
        try:
            return bool(parse_line(chunk).objects)
        except Exception:
            return False


@dataclass
class Parsed:
    # (byte offset within the line, byte length, object) for each object found
    objects: list[tuple[int, int, dict]]
    error: str | None = None  # why the line (or part of it) could not be parsed
    recovered: bool = False  # parsed only by the forgiving path


def _scrub_str(value: str) -> str:
    try:
        value.encode("utf-8")
        return value
    except UnicodeEncodeError:
        return value.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def _scrub(value):
    """Replace lone surrogates (legal JSON escapes, illegal UTF-8) with U+FFFD,
    in place, at any depth (no recursion: a line the decoder read is never
    refused here)."""
    if isinstance(value, str):
        return _scrub_str(value)
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, dict):
            items = list(v.items())
            if any(type(k) is str and _scrub_str(k) is not k for k, _ in items):
                v.clear()
                v.update((_scrub_str(k), c) for k, c in items)
                items = list(v.items())
            for k, c in items:
                if isinstance(c, str):
                    v[k] = _scrub_str(c)
                elif isinstance(c, (dict, list)):
                    stack.append(c)
        elif isinstance(v, list):
            for i, c in enumerate(v):
                if isinstance(c, str):
                    v[i] = _scrub_str(c)
                elif isinstance(c, (dict, list)):
                    stack.append(c)
    return value


def _json_kind(value) -> str:
    """What JSON calls a parsed value (``null``, not Python's ``NoneType``)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    return {str: "string", list: "array"}.get(type(value), type(value).__name__)


def parse_line(raw: bytes) -> Parsed:
    """Parse one line into zero or more JSON objects."""
    body = raw[3:] if raw.startswith(BOM) else raw
    shift = len(raw) - len(body)
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError:
        pass
    else:
        if isinstance(obj, dict):
            return Parsed([(shift, len(body), obj)])
        return Parsed([], f"line is a JSON {_json_kind(obj)}, not an object")

    if not body.strip():
        return Parsed([], "blank line")
    text = body.decode("utf-8", "replace")
    lossy = text.encode("utf-8") != body
    objects: list[tuple[int, int, dict]] = []
    pos = 0
    n = len(text)
    error = None
    while pos < n:
        while pos < n and text[pos] in " \t\r\n":
            pos += 1
        if pos >= n:
            break
        try:
            obj, end = deep.raw_decode(text, pos)
            obj = _scrub(obj)
        except deep.TooDeep as e:
            error = str(e)
            break
        except json.JSONDecodeError as e:
            error = f"invalid JSON: {e.msg} at column {e.colno}"
            break
        if not isinstance(obj, dict):
            error = f"line holds a JSON {_json_kind(obj)}, not an object"
            break
        if lossy:
            # Replacement characters break the char-to-byte mapping: the
            # object spans the line, or is located approximately.
            byte_start, byte_len = (0, len(body)) if pos == 0 and end >= len(text.rstrip()) else (pos, end - pos)
        else:
            byte_start = len(text[:pos].encode("utf-8"))
            byte_len = len(text[pos:end].encode("utf-8"))
        objects.append((shift + byte_start, byte_len, obj))
        pos = end
    if error and objects:
        error = f"{error} (after {len(objects)} object(s))"
    if lossy and not error:
        error = "invalid UTF-8 replaced with U+FFFD"
    if len(objects) > 1 and not error:
        error = f"{len(objects)} {GLUED}"
    return Parsed(objects, error, recovered=True)
