"""JSON nested deeper than orjson goes.

orjson reads 1,024 levels and writes 254. Claude Code reads any depth, and
it records a tool's input even when validation fails, so a valid session
line can nest hundreds or thousands of levels (in a tool input, a tool
result, an attachment, the envelope). The standard library's ``json`` reads
and writes as deep as the interpreter's recursion limit allows; ``nesting``
raises that limit for the duration of one call, by ``MAX_DEPTH`` levels,
which each cost a few hundred bytes of C stack (a thread's 8 MB holds ten
times that). Deeper than that a line is not handled: it is a parse error.
The limit is counted on the decoded value (``depth``), never left to the
room the stack has left, and what walks a decoded value (the scrub of lone
surrogates) does so without recursion.
"""

from __future__ import annotations

import json
import sys
from contextlib import contextmanager

import orjson

MAX_DEPTH = 5000



def _number(digits: str) -> int | float:
    """An integer literal as JavaScript's JSON.parse reads one: a number,
    exact while Python converts it in linear time (Python refuses integers
    of over 4,300 digits, whose conversion is quadratic), else the nearest
    double (infinity past its range)."""
    return int(digits) if len(digits) <= 4300 else float(digits)


_decoder = json.JSONDecoder(strict=False, parse_int=_number)
_strict = json.JSONDecoder(parse_int=_number)


class TooDeep(ValueError):
    """Nested deeper than MAX_DEPTH levels."""

    def __init__(self):
        super().__init__(f"nesting deeper than {MAX_DEPTH:,} levels")


@contextmanager
def nesting():
    """Room for MAX_DEPTH more levels of recursion (a RecursionError inside
    becomes TooDeep)."""
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(old + MAX_DEPTH + 100)
    try:
        yield
    except RecursionError:
        raise TooDeep() from None
    finally:
        sys.setrecursionlimit(old)


def raw_decode(text: str, pos: int = 0):
    """(object, end) of the JSON value at ``pos`` of ``text``, at any depth up
    to MAX_DEPTH, TooDeep beyond (lenient about control characters in
    strings, as Claude Code's JSON.parse is not, so that nothing readable is
    refused). The limit is counted, not left to whatever room the
    interpreter's stack has left: the same line is read, or refused, by
    every command."""
    with nesting():
        obj, end = _decoder.raw_decode(text, pos)
    if depth(obj) > MAX_DEPTH:
        raise TooDeep()
    return obj, end


def depth(value) -> int:
    """Levels of arrays and objects in ``value`` (0 for a scalar), counted
    without recursion."""
    most = 0
    stack = [(value, 1)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, dict):
            v = v.values()
        elif not isinstance(v, list):
            continue
        most = max(most, d)
        stack.extend((c, d + 1) for c in v if isinstance(c, (dict, list)))
    return most


def loads(data: bytes | str):
    """orjson.loads, and deeper than orjson reads."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        text = data.decode("utf-8") if isinstance(data, (bytes, bytearray, memoryview)) else data
        with nesting():
            return _strict.decode(text)


def dumps(obj) -> bytes:
    """Compact JSON, UTF-8, key order kept (as Claude Code writes it); what
    orjson refuses (too deep, integers beyond 64 bits, lone surrogates) goes
    through the standard library."""
    try:
        return orjson.dumps(obj)
    except (TypeError, orjson.JSONEncodeError):
        with nesting():
            text = json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
        return text.encode("utf-8", "surrogatepass")


def dumps_text(obj) -> str:
    """``dumps`` as text (lone surrogates replaced)."""
    try:
        return orjson.dumps(obj).decode()
    except (TypeError, orjson.JSONEncodeError):
        return dumps(obj).decode("utf-8", "replace")


def strings(value):
    """Every string value in a parsed JSON value, in document order, at any
    depth (a line may nest thousands deep: no recursion)."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            yield v
        elif isinstance(v, dict):
            stack.extend(reversed(list(v.values())))
        elif isinstance(v, list):
            stack.extend(reversed(v))
