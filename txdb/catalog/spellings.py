"""Where a secret stands in a text, in any of its spellings.

A line's raw JSON may spell a secret with its characters escaped (``\\/``,
``\\n``, ``\\u0041`` in either case of hex digit), and it is still that
secret once decoded, so a redactor masks each spelling. The expression
that matches every spelling puts a group of alternatives in place of each
character; compiling it for a private key (thousands of characters) costs
more than masking a whole export with it. So only each secret's first
``HEAD`` characters are compiled (to find where one may start), and a
start is followed over the rest of the secret here, character by
character. The result is the one that expression gives: the leftmost
start, the first secret in the given order that matches there, each
character's spellings tried in the expression's order (only ``\\``, which
is a prefix of its own escapes, ever needs another try).
"""

from __future__ import annotations

import re
from functools import lru_cache

import orjson

# How many characters of each secret the start expression spells out: enough
# that a common first letter does not make every position a candidate.
HEAD = 8


@lru_cache(maxsize=4096)
def char_forms(ch: str) -> tuple[tuple[str, str | None], ...]:
    """``ch``'s spellings as ``(expression, literal)`` in the order the
    expression of all spellings tries them (sorted by expression text, as
    :func:`char_expression` writes it); ``literal`` None for the ``\\u``
    escape, whose hex digits match in either case (:func:`_u_end`)."""
    try:
        literals = {ch, orjson.dumps(ch).decode()[1:-1]}
    except orjson.JSONEncodeError:  # a lone surrogate: only ever as itself, or its \u escape
        literals = {ch}
    if ch == "/":
        literals.add("\\/")
    forms: dict[str, str | None] = {re.escape(s): s for s in literals}
    # (a control character's JSON escape is its \\u escape, when no hex letter is in it: one spelling)
    forms.setdefault("".join(r"\\u" + "".join(f"[{h.lower()}{h.upper()}]" if h.isalpha() else h for h in f"{u:04x}")
                             for u in _units(ch)), None)
    return tuple(sorted(forms.items()))


def _units(ch: str) -> list[int]:
    """``ch`` as UTF-16 code units (a character past U+FFFF is a surrogate pair)."""
    o = ord(ch)
    return [o] if o < 0x10000 else [0xD800 + ((o - 0x10000) >> 10), 0xDC00 + ((o - 0x10000) & 0x3FF)]


def char_expression(ch: str) -> str:
    """The expression of every spelling of ``ch``."""
    return "(?:" + "|".join(e for e, _ in char_forms(ch)) + ")"


def _u_end(value: str, j: int, ch: str) -> int:
    """Where ``ch``'s ``\\u`` escape starting at ``j`` in ``value`` ends, or -1."""
    for u in _units(ch):
        if value[j:j + 2] != "\\u":
            return -1
        j += 2
        for h in f"{u:04x}":
            c = value[j:j + 1]
            if c != h and not (h.isalpha() and c == h.upper()):
                return -1
            j += 1
    return j


def match_at(value: str, start: int, secret: str) -> int:
    """Where a spelling of ``secret`` starting at ``start`` in ``value``
    ends (the first the expression of its spellings finds), or -1."""
    if value.startswith(secret, start):
        # each character as itself: the path the expression tries first
        # (itself sorts first wherever two spellings can both match: ``\\``)
        return start + len(secret)
    n = len(secret)
    ends = [start] + [0] * n  # ends[i]: where character i starts
    tried = [0] * n  # which spelling of character i the path uses
    # (character, place) pairs from which the rest cannot match: tried once,
    # so a run of backslashes costs what its length does, not 1.6 ** length
    failed: set[tuple[int, int]] = set()
    i, alt = 0, 0
    while i < n:
        forms = char_forms(secret[i])
        j = ends[i]
        if alt == 0 and (i, j) in failed:
            alt = len(forms)
        while alt < len(forms):
            literal = forms[alt][1]
            e = (j + len(literal) if value.startswith(literal, j) else -1) if literal is not None \
                else _u_end(value, j, secret[i])
            if e >= 0:
                tried[i], ends[i + 1] = alt, e
                i, alt = i + 1, 0
                break
            alt += 1
        else:
            failed.add((i, j))
            if i == 0:
                return -1
            i -= 1
            alt = tried[i] + 1
    return ends[n]


@lru_cache(maxsize=8)
def _starts(secrets: tuple[str, ...]) -> re.Pattern:
    """Where one of ``secrets`` may start: their first HEAD characters in
    every spelling, compiled once for the files of a session."""
    heads = dict.fromkeys("".join(map(char_expression, s[:HEAD])) for s in secrets)
    return re.compile("|".join(heads))


def substitute(value: str, secrets: tuple[str, ...], masks: dict[str, str]) -> str:
    """``value`` with each spelling of each of ``secrets`` (longest first:
    the order they are tried in at a start) replaced by its mask, leftmost
    first, never overlapping: what ``re.sub`` of the expression of all
    their spellings gives."""
    starts = _starts(secrets)
    m = starts.search(value)
    if m is None:
        return value
    out: list[str] = []
    at = 0
    while m is not None:
        p = m.start()
        for s in secrets:
            end = match_at(value, p, s)
            if end >= 0:
                out += (value[at:p], masks[s])
                at = end
                m = starts.search(value, end)
                break
        else:
            m = starts.search(value, p + 1)
    out.append(value[at:])
    return "".join(out)
