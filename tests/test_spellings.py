"""The redactor finds each secret's spellings without compiling one group
per character (txdb/catalog/spellings.py), and masks exactly what the
expression of every spelling masked (``re.sub`` of it, kept here as the
reference): the same starts, the same secret chosen at each, the same
extent, whatever the escapes, their hex case, surrogates and backslashes."""

from __future__ import annotations

import re

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from txdb.catalog import spellings
from txdb.catalog.secrets import Redactor


def _reference_char(ch: str) -> str:
    """One character's spellings, as the redactor's expression spelled them."""
    try:
        forms = {re.escape(ch), re.escape(orjson.dumps(ch).decode()[1:-1])}
    except orjson.JSONEncodeError:
        forms = {re.escape(ch)}
    if ch == "/":
        forms.add(re.escape("\\/"))
    units = [ord(ch)] if ord(ch) < 0x10000 else [0xD800 + ((ord(ch) - 0x10000) >> 10),
                                                0xDC00 + ((ord(ch) - 0x10000) & 0x3FF)]
    forms.add("".join(r"\\u" + "".join(f"[{h.lower()}{h.upper()}]" if h.isalpha() else h for h in f"{u:04x}")
                      for u in units))
    return "(?:" + "|".join(sorted(forms)) + ")"


def reference(value: str, masks: dict[str, str]) -> str:
    secrets = sorted(masks, key=len, reverse=True)
    pattern = re.compile("|".join(f"({''.join(map(_reference_char, s))})" for s in secrets))
    return pattern.sub(lambda m: masks[secrets[m.lastindex - 1]], value)


def _spelling(ch: str, pick: int) -> str:
    """One of ``ch``'s spellings (``pick`` chooses), the \\u one in a mixed hex case."""
    forms = [lit for _, lit in spellings.char_forms(ch) if lit is not None]
    units = [ord(ch)] if ord(ch) < 0x10000 else [0xD800 + ((ord(ch) - 0x10000) >> 10),
                                                0xDC00 + ((ord(ch) - 0x10000) & 0x3FF)]
    forms.append("".join("\\u" + (f"{u:04x}" if pick % 3 else f"{u:04X}") for u in units))
    return forms[pick % len(forms)]


# Characters whose spellings differ, and the backslash that prefixes its own escapes.
ALPHABET = st.sampled_from(list("ab/\\\"\nuA0-_ \t") + ["é", "😀", "\ud800", "\x01"])
SECRET = st.text(ALPHABET, min_size=1, max_size=14)


@st.composite
def texts(draw):
    secrets = draw(st.lists(SECRET, min_size=1, max_size=4, unique=True))
    parts = []
    for _ in range(draw(st.integers(0, 6))):
        kind = draw(st.integers(0, 3))
        if kind == 0:
            parts.append(draw(st.text(ALPHABET, max_size=8)))
        else:
            s = draw(st.sampled_from(secrets))
            picks = draw(st.lists(st.integers(0, 5), min_size=len(s), max_size=len(s)))
            spelled = "".join(_spelling(c, p) for c, p in zip(s, picks))
            if kind == 3:  # cut short or broken: must not be masked unless whole
                spelled = spelled[:draw(st.integers(0, len(spelled)))]
            parts.append(spelled)
    masks = {s: f"[M{i}]" for i, s in enumerate(secrets)}
    return "".join(parts), masks


@settings(max_examples=2000, deadline=None)
@given(texts())
def test_each_spelling_is_masked_as_the_expression_of_every_spelling_masks_it(case):
    value, masks = case
    secrets = tuple(sorted(masks, key=len, reverse=True))
    assert spellings.substitute(value, secrets, masks) == reference(value, masks)


def test_a_long_key_is_masked_in_any_spelling_without_its_expression():
    """A 4,000-character key: as written, JSON-escaped (its newlines as \\n,
    its slashes as \\/), and with some characters in \\u escapes; a copy
    cut short is left (the scan finds the whole one)."""
    body = "".join("ABCDEFGHabcdefgh0123456789+/"[(i * 7) % 28] for i in range(3_960))
    key = "-----BEGIN RSA PRIVATE KEY-----\n" + "\n".join(body[i:i + 64] for i in range(0, len(body), 64))
    escaped = orjson.dumps(key).decode()[1:-1].replace("/", "\\/")
    mixed = "".join(f"\\u{ord(c):04X}" if i % 97 == 5 and c.isalnum() else orjson.dumps(c).decode()[1:-1]
                    for i, c in enumerate(key))
    r = Redactor({key: "[REDACTED:Private Key]"})
    for spelled in (key, escaped, mixed):
        text = f'{{"text":"before {spelled} after"}}'
        assert r(text) == '{"text":"before [REDACTED:Private Key] after"}'
        assert r(text) == reference(text, r.masks)
    cut = key[:-10]  # (the redactor masks a cut start apart: Redactor.prefixes)
    assert spellings.substitute(cut, r.secrets, r.masks) == reference(cut, r.masks) == cut


def test_a_run_of_backslashes_costs_its_length():
    """A secret of 60 backslashes against 200 of them and no end: each
    backslash's spellings (itself, ``\\\\``, ``\\u005c``) are prefixes of
    one another, so without remembering what failed the search takes
    1.6 ** 60 steps; it answers at once, as the expression does."""
    secret = "\\" * 60 + "Z"
    value = "\\" * 200 + "Y"
    assert spellings.match_at(value, 0, secret) == -1
    assert spellings.substitute(value, (secret,), {secret: "[M]"}) == value
    # 61 of them and the end: one pair read as an escaped backslash, as the expression reads it
    assert spellings.substitute("\\" * 61 + "Z", (secret,), {secret: "[M]"}) == reference("\\" * 61 + "Z", {secret: "[M]"})
