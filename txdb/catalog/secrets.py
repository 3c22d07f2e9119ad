"""Secrets held in the catalog's text: found by a scan (``txdb secrets
scan``, and before every redacted export) of the text no scan has read yet
(blocks, the strings of attachment lines, every string a raw line holds, its
keys too, and the file's own path and project folder name), stored as
findings (where and of what type, a hash of the secret, never the secret
itself), masked in a redacted export.

The scan is not part of refresh: detect-secrets costs about 0.2 s to import
(it imports requests), which every hook's refresh would pay, and its
expressions about 30 ms of CPU per MB of sessions (docs/commands-guide.md, "Secrets in the
archive").

The detectors are detect-secrets' (the maintained fork detect-secrets-plus;
its plugins, filters and verdicts; ``_process_line_based_plugins`` is its
line scan, hence the pin below 1.6), run in two steps so that a scan stays
cheap: each plugin's own regular expressions are searched over a file's
new texts (in C, one pass each), and only the lines they hit go through
detect-secrets' line scan, which decides. A line shaped like configuration
(``KEY=value``, ``key: value``, also as a Read result's numbered line) is
scanned as a config file, where a keyword's value needs no quotes; any
other line as code.
"""

from __future__ import annotations

import codecs
import hashlib
import re
import sqlite3
import time
import zlib
from bisect import bisect_left, bisect_right
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from itertools import accumulate, filterfalse
from pathlib import Path
from typing import Callable

import orjson

from txdb.catalog import spellings
from txdb.catalog.sqlutil import transaction
from txdb.model import deep
from txdb.model.paths import SESSION_SUFFIX
from txdb.catalog.ingest.chunks import WHOLE_TEXT, raw_line, raw_lines

KEYWORD_TYPE = "Secret Keyword"  # detect-secrets' KeywordDetector: a value after a word like password
# Left out: the entropy plugins (any long random-looking string: every hash,
# id and base64 image) and public IPs (not secrets); and five plugins for
# IBM Cloud, Cloudant, SoftLayer and Artifactory whose expressions (a
# look-behind before a keyword alternation, tried at every character) took
# three quarters of the scan's time on the test corpus (docs/commands-guide.md, "Secrets in the archive").
SKIPPED_PLUGINS = frozenset({"Base64HighEntropyString", "HexHighEntropyString", "IPPublicDetector",
                             "ArtifactoryDetector", "CloudantDetector", "IbmCloudIamDetector",
                             "IbmCosHmacDetector", "SoftlayerDetector"})
# A finding covers the whole token its match starts (a JWT's signature too).
_TOKEN_REST = re.compile(r"[A-Za-z0-9_\-+/=.]*")
_CONFIG_LINE = re.compile(r"^\s*(?:\d+\s*(?:\u2192|\t)\s*)?(?:export\s+)?[\"']?[A-Za-z_][\w.-]*[\"']?\s*[:=]")
# A URL escape of an ASCII character (what a secret in a query string or a
# path is written with: %5F, %2B, %2F, %3D).
_PERCENT = re.compile(r"%([0-7][0-9A-Fa-f])")
# A JSON escape of an ASCII character left in a text (a JSON document quoted
# in a prompt or a tool's output: \u005f for "_").
_U_ASCII = re.compile(r"\\u00([0-7][0-9A-Fa-f])")
_CONFIG_NAME, _CODE_NAME = "transcript.ini", "transcript.txt"
# The texts of one file from a byte offset on: its blocks', its attachments'.
# A cut block's text is decoded whole (WHOLE_TEXT): the scan reads what the file holds.
SELECT_TEXTS = (f"SELECT offset, idx, {WHOLE_TEXT.format('b')} AS text, kind FROM blocks b "
                "WHERE file_id = ? AND offset >= ? AND text IS NOT NULL AND text <> ''")
SELECT_ATTACHMENTS = "SELECT offset FROM attachments WHERE file_id = ? AND offset >= ?"
ATTACHMENT_IDX = -1  # secret_findings.idx of a finding in an attachment's text
RAW_IDX = -2  # in a record's raw line, decoded (_decoded): every string it holds, keys too
FILE_IDX = -3  # in the file's own names (offset FILE_OFFSET; field: path, root or project)
FILE_OFFSET = -1
# In a sidecar file of the session (offset: minus its sidecars.id, so a grown
# file's delete from its cursor on never takes it; field: its rel).
SIDECAR_IDX = -4
SIDECAR_PIECE = 4 << 20  # a sidecar's bytes are scanned this many at a time, cut at a newline
DECODED = "decoded"  # field of a finding in a tool call's input JSON as decoded (_decoded), not as stored
FILE_FIELDS = ("path", "root", "project")
MIN_CHARS = 8  # an attachment's shorter strings are not scanned
LONG_LINE, WINDOW = 2000, 600  # a candidate line longer than this is read WINDOW characters about each hit
MIN_TAIL = 6  # a cut-off secret's start this long, or longer, ending a title is masked (Redactor.truncated)
# A cut-off secret's start anywhere else is masked once it holds this many
# characters, and this many past the fixed start its kind shares (_LEAD):
# 8 random characters (about 48 bits) match no other text by chance, and
# are the run the planted-secrets test looks for; a bare fixed start
# (``sk-ant-api03-``, a key's BEGIN line) says nothing of the secret.
MIN_PREFIX, MIN_PREFIX_RANDOM = 12, 8
_LEAD = re.compile(r"-----BEGIN[A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----\s*|PuTTY-User-Key-File-\d:[^\n]*\s*"
                   r"|pypi-AgEIcHlwaS5vcmc|eyJ[\w-]*\.|sk-ant-[a-z]+\d*-|sq0[a-z]{3}-|xox[a-z]-"
                   r"|[a-z]{2,6}[_-](?:live_)?|A[KS]IA|AIza|SG\.")
CHUNK_CHARS = 16 << 20  # a file's texts are scanned this many characters at a time
CLEAN_CHARS = 64 << 20  # lines without a hit kept, at most, for the files scanned after (CleanLines)
PRIVATE_KEY_TYPE = "Private Key"  # detect-secrets' PrivateKeyDetector
# A private key's whole extent: its header, then its lines (base64, or
# "Name: value" headers; each maybe after a Read's line number, split by a
# newline or a JSON-escaped one) up to its END line, or while they last.
_SEP = r"(?:\r?\n|\\r\\n|\\n)"
_NUM = r"(?:[ \t]*\d+(?:\u2192|\t|\\t))?[ \t]*"
_KEY_LINE = _SEP + _NUM + r'(?:[A-Za-z0-9+/=]{4,}|[A-Za-z][\w-]*:[^\n\\"]*)?[ \t\r]*'
_KEY_END = _SEP + _NUM + r"-----END[A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----"
_KEY = re.compile(r"(?:-----)?(?:BEGIN[A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?(?:-----)?"
                  r'|PuTTY-User-Key-File-\d:[^\n\\"]*)'
                  f"(?:(?:{_KEY_LINE})*?{_KEY_END}|(?:{_KEY_LINE})*)")
# Where one may start (literal searches, the fast kind).
_KEY_STARTS = (re.compile(r"BEGIN[A-Z0-9 ]{0,40}PRIVATE KEY"), re.compile(r"PuTTY-User-Key-File-\d:"))
# Plugin expressions that are slow to search (no literal to skip ahead to),
# each replaced by a cheaper one matching on every line it does (a
# prefilter only picks the lines detect-secrets then decides on).
_CHEAPER = {r"[0-9a-z]{32}-us[0-9]{1,2}": r"-us[0-9]", r"(?:r|s)k_live_[0-9a-zA-Z]{24}": r"k_live_",
            r"\/\/.+\/:_authToken=\s*((npm_.+)|([A-Fa-f0-9-]{36})).*": r"/:_authToken=",
            r"^\d{8,10}:[0-9A-Za-z_-]{35}$": r":[0-9A-Za-z_-]{35}$",
            r"[MNO][a-zA-Z\d_-]{23,25}\.[a-zA-Z\d_-]{6}\.[a-zA-Z\d_-]{27}": r"\.[a-zA-Z\d_-]{6}\.[a-zA-Z\d_-]{27}"}
# Each keyword of the keyword plugin holds one of these: a literal search
# for each (the fast kind), then the keywords' expression tried only around
# a hit, costs a tenth of that expression searched everywhere.
_KEYWORD_LITERALS = ("key", "pass", "pwd", "secret", "contrase")
_KEYWORD_AROUND = 16  # a keyword starts this close before its literal, ends this close after
# A base64 body in a raw line (an image's or document's data, a thinking
# block's signature): binary, where no detector can see a secret; not read.
_OPAQUE = re.compile(r'("(?:data|signature)":")[A-Za-z0-9+/=]{256,}(?=")')
# detect-secrets' is_indirect_reference filter searches
# ``([^\v=!:]*)\s*(:=?|[!=]{1,3})\s*(B)`` over each candidate line (its
# empty-able lead tried at every character: most of a scan's line checks).
# Its two leading parts may match empty and every operator ends in one of
# ``:=!``, so this matches on exactly the lines it does (held by tests/test_secrets.py).
INDIRECT_REFERENCE = re.compile(r"[:=!]\s*[\w.-]+[\[(][^\v]*[\])]")
LIBRARY_INDIRECT_REFERENCE = r"([^\v=!:]*)\s*(:=?|[!=]{1,3})\s*([\w.-]+[\[\(][^\v]*[\]\)])"  # the one it replaces
RAW_CACHE_BYTES = 32 << 20  # a file's raw lines read for its attachments are kept for its raw pass up to this
FINDINGS_INSERT = ("INSERT OR REPLACE INTO secret_findings "
                   "(file_id, offset, idx, field, start, length, line, col, type, secret_sha256) "
                   "VALUES (?,?,?,?,?,?,?,?,?,?)")


@dataclass(frozen=True, slots=True)
class Finding:
    type: str  # detect-secrets' secret type ("AWS Access Key", "Secret Keyword", ...)
    start: int  # where the secret starts in the text, in characters
    length: int  # its length, in characters
    line: int  # its line in the text, from 1
    col: int  # its column in that line, in characters from 0
    sha256: str  # of the secret, hex


@dataclass(frozen=True)
class _Detector:
    settings: dict
    prefilters: tuple[re.Pattern, ...]
    # Searched in the lowered text: the keyword plugin's words, and the
    # case-insensitive expressions (made case-sensitive: several times faster).
    lowered: tuple[re.Pattern, ...]
    # The keyword plugin's words (lowered[0]) are looked for around these.
    keyword_literals: tuple[re.Pattern, ...] = ()


@lru_cache(maxsize=1)
def _detector() -> _Detector:
    """The plugins txdb runs, and their regular expressions (imported on
    first use: only a scan pays for detect-secrets)."""
    from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
    from detect_secrets.filters import heuristic
    from detect_secrets.plugins import keyword
    from detect_secrets.settings import get_plugins, transient_settings

    classes: list[type] = list(get_mapping_from_secret_type_to_class().values())
    plugins: list[dict[str, str]] = [{"name": c.__name__} for c in classes if c.__name__ not in SKIPPED_PLUGINS]
    own = Path(__file__).with_name("secret_plugins.py").as_uri()
    plugins.extend({"name": name, "path": own}
                   for name in ("GoogleApiKeyDetector", "AnthropicApiKeyDetector", "AwsSecretAccessKeyDetector"))
    settings = {"plugins_used": plugins}
    if heuristic._get_indirect_reference_regex().pattern == LIBRARY_INDIRECT_REFERENCE:  # another release: its own
        # The same verdicts in linear time; the library reads it through this name.
        setattr(heuristic, "_get_indirect_reference_regex", lambda: INDIRECT_REFERENCE)
    prefilters: list[re.Pattern] = []
    lowered: list[re.Pattern] = []
    with transient_settings(settings):
        get_mapping_from_secret_type_to_class.cache_clear()  # now with txdb's plugin file
        for plugin in get_plugins():
            for p in getattr(plugin, "denylist", ()):
                # The library matches a line at a time: ^ and $ are a line's ends here too.
                flags = p.flags | re.MULTILINE
                if flags & re.IGNORECASE:
                    lowered.append(re.compile(_lower_literals(p.pattern), flags & ~re.IGNORECASE))
                else:
                    prefilters.append(re.compile(_CHEAPER.get(p.pattern, p.pattern), flags))
    # Its words are lower case; a case-sensitive search of the lowered
    # text is several times faster than an IGNORECASE one.
    lowered.insert(0, re.compile("|".join(keyword.DENYLIST)))
    literals = () if not all(any(w in word for w in _KEYWORD_LITERALS) for word in keyword.DENYLIST) \
        else tuple(re.compile(w) for w in _KEYWORD_LITERALS)  # a word without one: searched everywhere
    return _Detector(settings, _grouped(dict.fromkeys(prefilters)), tuple(dict.fromkeys(lowered)), literals)


_LITERAL_START = re.compile(r"[A-Za-z0-9_:/=-]+")


def _grouped(patterns) -> tuple[re.Pattern, ...]:
    """The expressions, those starting with the same two literal characters
    as one alternation (Python's engine factors their common start out and
    skips ahead to it: one search in place of several)."""
    groups: dict[tuple[str, int], list[re.Pattern]] = {}
    for p in patterns:
        m = _LITERAL_START.match(p.pattern)
        lit = m.group() if m else ""
        if lit and p.pattern[len(lit):len(lit) + 1] in ("?", "*", "+", "{"):
            lit = lit[:-1]  # its last character is optional or repeated
        groups.setdefault((lit[:2] if len(lit) >= 2 else p.pattern, p.flags), []).append(p)
    return tuple(ps[0] if len(ps) == 1 else re.compile("|".join(f"(?:{q.pattern})" for q in ps), flags)
                 for (_, flags), ps in groups.items())


def _lower_literals(pattern: str) -> str:
    """A case-insensitive expression as one for lowered text: its letters
    lowered, but not an escape's (``\\S`` stays ``\\S``)."""
    return re.sub(r"\\.|[A-Z]", lambda m: m.group().lower() if len(m.group()) == 1 else m.group(), pattern)


def scan_texts(texts: list[str], clean: CleanLines | None = None, escapes: bool = True) -> list[list[Finding]]:
    """The findings in each text, in order. The expressions are searched
    once over the texts' distinct lines joined by newlines (one search per
    call, not per text: most texts are short; detection is per line, so a
    line met again is not searched again: its findings are its first
    place's), less the lines ``clean`` holds (an earlier call's lines no
    expression hit). A private key is then found over its whole extent, and
    a secret in URL or JSON escapes of its characters over its extent as
    written (``_escaped``; ``escapes=False``: not, as for those texts decoded)."""
    det = _detector()
    joined = "\n".join(texts)
    lines = joined.split("\n")
    distinct = dict.fromkeys(lines)  # in the order each first stands in `lines`
    searched = list(distinct) if clean is None or not clean.lines else list(filterfalse(clean.lines.__contains__,
                                                                                        distinct))
    del distinct
    unique = "\n".join(searched) if len(searched) < len(lines) else joined
    candidates = _candidate_lines(unique, det)
    if clean is not None:
        clean.add(searched, {c[2] for c in candidates})
    del searched
    out: dict[int, dict[tuple[int, int], Finding]] = {}  # by text, those with a finding
    starts = list(accumulate(map((1).__add__, map(len, texts)), initial=0))[:-1]  # where each text starts in `joined`
    if candidates:
        from detect_secrets.core.scan import _process_line_based_plugins

        g, at = 0, 0  # the last candidate's first place in `lines`, and where that line starts in `joined`
        counted, newlines = 0, 0  # how many newlines `joined` holds before `counted` (candidates come in order)
        with plugin_settings():
            for number, start, line, hits in candidates:
                if unique is not joined:  # back to the line's first place in `joined`
                    # Distinct lines stand in the order of their first places: each is after the last.
                    h = lines.index(line, g)
                    at += sum(map(len, lines[g:h])) + h - g
                    g = h
                    number, start = g + 1, at
                i = bisect_right(starts, start) - 1
                newlines += joined.count("\n", counted, starts[i])
                counted = starts[i]
                number, start = number - newlines, start - starts[i]
                found = out.setdefault(i, {})
                for a, b in _windows(len(line), hits):
                    part = line[a:b]
                    name = _CONFIG_NAME if a == 0 and _CONFIG_LINE.match(line) else _CODE_NAME
                    for secret in _process_line_based_plugins([(number, part)], name):
                        for f in _locate(part, number, start + a, secret.type, secret.secret_value or "", a):
                            # A plugin naming the secret's kind wins over the keyword plugin.
                            held = found.get((f.start, f.length))
                            if held is None or held.type == KEYWORD_TYPE:
                                found[(f.start, f.length)] = f
    _private_keys(joined, texts, starts, out)
    if escapes:
        if "%" in joined and _PERCENT.search(joined) is not None:
            _escaped(joined, texts, starts, out, _PERCENT)
        if "\\u" in joined and _U_ASCII.search(joined) is not None:
            _escaped(joined, texts, starts, out, _U_ASCII)
    return [sorted(out[i].values(), key=lambda f: f.start) if i in out else [] for i in range(len(texts))]


def _escaped(joined: str, texts: list[str], starts: list[int], out: dict[int, dict], escape: re.Pattern) -> None:
    """Secrets written in escapes of their ASCII characters inside the text
    (URL escapes: ``ghp%5F...``, ``%2B`` in a key; a JSON document quoted
    in a prompt or a tool's output: ``ghp\\u005f...``; ``escape``'s group
    is the character's hex): each text holding one is scanned again with
    those escapes decoded, and a finding that covers an escape is kept over
    its extent in the text as written (the escapes in it: that spelling is
    what a redactor masks)."""
    hit = sorted({bisect_right(starts, m.start()) - 1 for m in escape.finditer(joined)})
    views: list[str] = []
    escapes: list[tuple[list[int], list[int]]] = []  # each view's decoded escapes: where, and the width taken off by then
    for i in hit:
        pieces: list[str] = []
        at, taken, shift = [], [0], 0
        text, last = texts[i], 0
        for m in escape.finditer(text):
            pieces += (text[last:m.start()], chr(int(m.group(1), 16)))
            at.append(m.start() - shift)
            shift += m.end() - m.start() - 1
            taken.append(shift)
            last = m.end()
        pieces.append(text[last:])
        views.append("".join(pieces))
        escapes.append((at, taken))
    for i, (at, taken), found_in_view in zip(hit, escapes, scan_texts(views, escapes=False)):
        text = texts[i]
        for f in found_in_view:
            before, within = bisect_left(at, f.start), bisect_left(at, f.start + f.length)
            if within == before:
                continue  # no escape in it: found in the text as written
            start, stop = f.start + taken[before], f.start + f.length + taken[within]
            found = out.setdefault(i, {})
            if (start, stop - start) in found:
                continue
            secret = text[start:stop]
            line_start = text.rfind("\n", 0, start) + 1
            found[(start, stop - start)] = Finding(
                f.type, start, stop - start, text.count("\n", 0, start) + 1, start - line_start,
                hashlib.sha256(secret.encode("utf-8", "surrogatepass")).hexdigest())


class CleanLines:
    """The lines a scan of many texts (a catalog's files) met without a hit
    of any expression, so that a line another file repeats (a subagent's
    copy of its parent's prompt, a file read again, the same tool output)
    is searched once; up to ``limit`` characters of them."""

    def __init__(self, limit: int = CLEAN_CHARS):
        self.lines: set[str] = set()
        self.room = limit

    def add(self, searched: list[str], hit: set[str]) -> None:
        if self.room <= 0:
            return
        self.room -= sum(map(len, searched))
        self.lines.update(searched)
        self.lines.difference_update(hit)  # (none was held: each was searched)


_ACTIVE = [0]  # how deep plugin_settings is entered


@contextmanager
def plugin_settings():
    """detect-secrets' settings for txdb's plugins, entered once for a whole
    scan (entering them resets its caches: a tenth of a scan, per chunk)."""
    if _ACTIVE[0]:
        _ACTIVE[0] += 1
        try:
            yield
        finally:
            _ACTIVE[0] -= 1
        return
    from detect_secrets.settings import transient_settings

    with transient_settings(_detector().settings):
        _ACTIVE[0] += 1
        try:
            yield
        finally:
            _ACTIVE[0] -= 1


def _private_keys(joined: str, texts: list[str], starts: list[int], out: dict[int, dict]) -> None:
    """Each private key's whole extent as one finding (its BEGIN line's
    finding, if any, is inside it and goes)."""
    heads = sorted({m.start() for p in _KEY_STARTS for m in p.finditer(joined)})
    done = -1
    for h in heads:
        if h < done:
            continue  # inside the key before
        begin = h - 5 if h >= 5 and joined.startswith("-----", h - 5) else h
        m = _KEY.match(joined, begin)
        if m is None:
            continue
        i = bisect_right(starts, begin) - 1
        end = min(m.end(), starts[i] + len(texts[i]))  # within its own text
        done = end
        text, start, stop = texts[i], begin - starts[i], end - starts[i]
        found = out.setdefault(i, {})
        for key in [k for k, f in found.items() if f.type == PRIVATE_KEY_TYPE and start <= f.start < stop]:
            del found[key]
        secret = text[start:stop]
        line_start = text.rfind("\n", 0, start) + 1
        found[(start, stop - start)] = Finding(
            PRIVATE_KEY_TYPE, start, stop - start, text.count("\n", 0, start) + 1, start - line_start,
            hashlib.sha256(secret.encode("utf-8", "surrogatepass")).hexdigest())


def _windows(length: int, hits: list[int] | None) -> list[tuple[int, int]]:
    """The parts of a candidate line detect-secrets reads: all of it, or of
    a long one (a raw line's JSON around a string) the stretch around each
    hit (its expressions over a long line cost more than all the rest)."""
    if length <= LONG_LINE or not hits:
        return [(0, length)]
    out: list[tuple[int, int]] = []
    for h in hits:
        a, b = max(0, h - WINDOW), min(length, h + WINDOW)
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], b)
        else:
            out.append((a, b))
    return out


def _candidate_lines(text: str, det: _Detector) -> list[tuple[int, int, str, list[int] | None]]:
    """(line number from 1, start, line, hits in it or None: anywhere) of
    each line a plugin's expression hits."""
    # A match's first and last character: one may start on the newline before its line.
    hits = {i for p in det.prefilters for m in p.finditer(text) for i in (m.start(), max(m.start(), m.end() - 1))}
    lowered = text.lower()  # keeps every newline; most often every position too
    searched = det.lowered[1:] if det.keyword_literals else det.lowered
    words = [i for p in searched for m in p.finditer(lowered) for i in (m.start(), max(m.start(), m.end() - 1))]
    if det.keyword_literals:
        words.extend(_keywords(lowered, det))
    word_lines: set[int] = set()
    if len(lowered) == len(text):
        hits.update(words)
    elif words:  # a character that lowers to two: count the lowered text's lines
        word_lines = _line_numbers(lowered, words)
    lines: dict[int, tuple[int, str, list[int] | None]] = {}
    for number, p in zip(_line_numbers_list(text, sorted(hits)), sorted(hits)):
        if number not in lines:
            lines[number] = (*_line_at(text, p), [])
        if lines[number][2] is not None:
            lines[number][2].append(p - lines[number][0])
    for number in word_lines:  # where in the line is not known: all of it
        if number in lines:
            lines[number] = (*lines[number][:2], None)
    if word_lines - set(lines):
        start = 0
        for number, line in enumerate(text.split("\n")):
            if number in word_lines and number not in lines:
                lines[number] = (start, line, None)
            start += len(line) + 1
    return [(n + 1, start, line, at) for n, (start, line, at) in sorted(lines.items())]


def _keywords(lowered: str, det: _Detector) -> list[int]:
    """Where the keyword plugin's words start and end in ``lowered``: each
    is found around one of its literals (_KEYWORD_LITERALS)."""
    words, last = det.lowered[0], -1
    out: list[int] = []
    for p in det.keyword_literals:
        for m in p.finditer(lowered):
            k = words.search(lowered, max(0, m.start() - _KEYWORD_AROUND), m.end() + _KEYWORD_AROUND)
            if k is not None and k.start() != last:
                last = k.start()
                out += (k.start(), max(k.start(), k.end() - 1))
    return out


def _line_numbers_list(text: str, positions: list[int]) -> list[int]:
    """The line (from 0) of each of the sorted ``positions``, in one pass."""
    out, line, prev = [], 0, 0
    for p in positions:
        line += text.count("\n", prev, p)
        prev = p
        out.append(line)
    return out


def _line_numbers(text: str, positions: list[int]) -> set[int]:
    return set(_line_numbers_list(text, sorted(positions)))


def _line_at(text: str, pos: int) -> tuple[int, str]:
    start = text.rfind("\n", 0, pos) + 1
    end = text.find("\n", pos)
    return start, text[start:end if end >= 0 else len(text)]


def _locate(line: str, number: int, line_start: int, kind: str, value: str, col: int = 0):
    # A plugin's value may run on to the line's end (npm's `npm_.+`): in a
    # line's raw JSON or a call's input, a quote there may end the string,
    # and masking it would break the JSON; the secret stops before it.
    value = value.split('"', 1)[0]
    if not value:
        return
    for m in re.finditer(re.escape(value), line):
        end = _TOKEN_REST.match(line, m.end()).end() if _TOKEN_REST.fullmatch(value) else m.end()
        secret = line[m.start():end]
        yield Finding(kind, line_start + m.start(), len(secret), number, col + m.start(),
                      hashlib.sha256(secret.encode("utf-8", "surrogatepass")).hexdigest())


def _texts(conn: sqlite3.Connection, file_id: int, start_offset: int):
    """(offset, idx, field, text) of the file's text from ``start_offset``
    on: each block's text (field ''), each string of an attachment line's
    ``attachment`` (idx ATTACHMENT_IDX, field its JSON path: a file an
    @-mention attached, hook output, a queued prompt), each raw line
    decoded (idx RAW_IDX: toolUseResult, summaries, titles, cwd, gitBranch,
    every other string and key it holds) and, from the start, the file's
    own path, root and project folder name (FILE_OFFSET, FILE_IDX, field
    the column). Yielded, not listed: a file is scanned a chunk at a time."""
    for offset, idx, text, kind in conn.execute(SELECT_TEXTS, (file_id, start_offset)):
        if kind == "tool_use":  # its input's JSON, decoded: the lines its raw line holds too
            yield offset, idx, DECODED, _decoded(text)
        else:
            yield offset, idx, "", text
    attachments = {o for o, in conn.execute(SELECT_ATTACHMENTS, (file_id, start_offset))}
    kept: list[tuple[int, bytes]] | None = [] if attachments else None
    size = 0
    if attachments:
        for offset, raw in raw_lines(conn, file_id, start_offset):  # the attachments' strings first
            if kept is not None:
                kept.append((offset, raw))
                size += len(raw)
                if size > RAW_CACHE_BYTES:
                    kept = None  # a big file: inflated again below
            if offset in attachments:
                for field, text in _strings(_attachment(raw)):
                    yield offset, ATTACHMENT_IDX, field, text
    for offset, raw in raw_lines(conn, file_id, start_offset) if kept is None else kept:
        yield offset, RAW_IDX, "", _decoded(raw)
    if start_offset == 0:
        row = conn.execute(f"SELECT {', '.join(FILE_FIELDS)} FROM files WHERE id = ?", (file_id,)).fetchone()
        for field, value in zip(FILE_FIELDS, row or ()):
            if isinstance(value, str) and value:
                yield FILE_OFFSET, FILE_IDX, field, value


_JSON_ESCAPES = (('\\"', '"'), ("\\n", "\n"), ("\\t", "\t"), ("\\r", "\r"), ("\\/", "/"),
                 ("\\b", "\b"), ("\\f", "\f"))
_ESCAPE_LEFT = re.compile(r"\\[^\"n]")
_U_ESCAPE = re.compile(r"\\u([dD][89abAB][0-9a-fA-F]{2})\\u([dD][c-fC-F][0-9a-fA-F]{2})|\\u([0-9a-fA-F]{4})")


def _decoded(raw) -> str:
    """A raw line with its JSON escapes decoded (not parsed: a malformed
    line, or one nested deeper than any parser reads, is decoded too): each
    string it holds stands in it as its text, multi-line ones on their own
    lines, between the line's punctuation. Replacements in C, not a pass
    in Python per escape."""
    if isinstance(raw, bytes):
        raw = raw.decode("utf-8", "replace")
    if '"data":"' in raw or '"signature":"' in raw:
        raw = _OPAQUE.sub(r"\1", raw)
    if "\\" not in raw:
        return raw
    backslashes = "\\\\" in raw
    # An escaped backslash, kept out of the way (JSON text holds no NUL).
    s = raw.replace("\\\\", "\x00") if backslashes else raw
    s = s.replace('\\"', '"').replace("\\n", "\n")  # the common two; most often no other is left
    if "\\" in s:
        left = set(_ESCAPE_LEFT.findall(s))  # which escapes are left, in one pass
        for escape, char in _JSON_ESCAPES[2:]:
            if escape in left:
                s = s.replace(escape, char)
        if "\\u" in left:
            s = _U_ESCAPE.sub(_unicode, s)
    return s.replace("\x00", "\\") if backslashes else s


def _unicode(m: re.Match) -> str:
    if m.group(3):
        return chr(int(m.group(3), 16))
    hi, lo = int(m.group(1), 16), int(m.group(2), 16)
    return chr(0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00))


def _attachment(raw: bytes | str):
    try:
        value = deep.loads(raw)  # a line may nest deeper than orjson reads
    except ValueError:  # TooDeep, or a record refresh recovered: its text stays in the raw line only
        return None
    return value.get("attachment") if isinstance(value, dict) else None


def _strings(value) -> list[tuple[str, str]]:
    """(JSON path, string) of every string in ``value`` long enough to hold
    a secret, in document order (without recursion: a line may nest deep)."""
    out, stack = [], [("$", value)]
    while stack:
        path, v = stack.pop()
        if isinstance(v, str):
            if len(v) >= MIN_CHARS:
                out.append((path, v))
        elif isinstance(v, dict):
            stack.extend((f"{path}.{k}" if k.isidentifier() else f"{path}[{orjson.dumps(k).decode()}]", x)
                         for k, x in reversed(v.items()))
        elif isinstance(v, list):
            stack.extend((f"{path}[{i}]", x) for i, x in reversed(list(enumerate(v))))
    return out


def store_findings(conn: sqlite3.Connection, file_id: int, start_offset: int = 0,
                   clean: CleanLines | None = None) -> tuple[int, int, int]:
    """Scan the file's text from ``start_offset`` on (_texts) and store its
    findings: (texts, characters, findings)."""
    texts = chars = stored = 0
    for values, n, c in _findings(conn, file_id, start_offset, clean):
        if values:
            conn.executemany(FINDINGS_INSERT, values)
        texts, chars, stored = texts + n, chars + c, stored + len(values)
    return texts, chars, stored


def _findings(conn: sqlite3.Connection, file_id: int, start_offset: int, clean: CleanLines | None = None):
    """The file's findings from ``start_offset`` on, a chunk of texts at a
    time: (rows for secret_findings, texts, characters). A raw line's
    finding of a secret its record's block or attachment already gave is
    left out (the same secret, in the same place), as is one another raw
    line gave (cwd and gitBranch are on every line)."""
    seen: dict[int, set[str]] = {}  # offset -> the secrets its blocks and attachment hold; -2: raw lines
    chunk: list[tuple[int, int, str, str]] = []
    size = 0
    for row in _texts(conn, file_id, start_offset):
        chunk.append(row)
        size += len(row[3])
        if size >= CHUNK_CHARS:
            yield _scan_chunk(file_id, chunk, seen, clean), len(chunk), size
            chunk, size = [], 0
    if chunk:
        yield _scan_chunk(file_id, chunk, seen, clean), len(chunk), size


def _scan_chunk(file_id: int, rows: list, seen: dict[int, set[str]], clean: CleanLines | None = None) -> list[tuple]:
    values = []
    for (offset, idx, field, _), fs in zip(rows, scan_texts([r[3] for r in rows], clean)):
        for f in fs:
            if idx == RAW_IDX:
                in_raws = seen.setdefault(RAW_IDX, set())
                if f.sha256 in seen.get(offset, ()) or f.sha256 in in_raws:
                    continue
                in_raws.add(f.sha256)
            elif idx != FILE_IDX:
                seen.setdefault(offset, set()).add(f.sha256)
            values.append((file_id, offset, idx, field, f.start, f.length, f.line, f.col, f.type, f.sha256))
    return values


# The sidecars of a session transcript: the files of its folder (its path
# less ".jsonl", then "/"), by the path index ("0" sorts just after "/").
SELECT_SIDECARS = ("SELECT c.id, c.sha256, c.rel, b.rowid, c.refreshed_at FROM sidecars c "
                   "JOIN blobs b ON b.sha256 = c.sha256 WHERE c.path > ? AND c.path < ?")
# Session files whose folder holds a sidecar refreshed since their last scan.
_STEM = f"substr(f.path, 1, length(f.path) - {len(SESSION_SUFFIX)})"
SIDECARS_SINCE = (f"EXISTS (SELECT 1 FROM sidecars c WHERE c.path > {_STEM} || '/' "
                  f"AND c.path < {_STEM} || '0' AND c.refreshed_at >= s.scanned_at)")


def _sidecar_bounds(path: str) -> tuple[str, str] | None:
    if not path.endswith(SESSION_SUFFIX):
        return None
    stem = path[:-len(SESSION_SUFFIX)]
    return stem + "/", stem + "0"


def sidecar_pieces(conn: sqlite3.Connection, blob_rowid: int, rel: str):
    """(character offset, text) of a stored sidecar's content, inflated a
    piece at a time (cut after a newline where one is near; a ``.json``
    one's escapes decoded, as a raw line's): memory holds a piece, not the
    file. A blob that does not inflate ends the pieces where it breaks."""
    d, text, base = zlib.decompressobj(), "", 0
    utf8 = codecs.getincrementaldecoder("utf-8")("replace")
    try:
        with conn.blobopen("blobs", "data", blob_rowid, readonly=True) as blob:
            while True:
                data = d.unconsumed_tail or (b"" if d.eof else blob.read(1 << 20))
                last = not data
                text += utf8.decode(d.decompress(data, SIDECAR_PIECE) if data else b"", final=last)
                if len(text) >= SIDECAR_PIECE or (last and text):
                    cut = len(text) if last else (text.rfind("\n") + 1 or len(text))
                    piece, text = text[:cut], text[cut:]
                    piece = _decoded(piece) if rel.endswith(".json") else piece
                    yield base, piece
                    base += len(piece)
                if last and not text:
                    return
    except (zlib.error, sqlite3.Error):
        return


def _sidecar_findings(conn: sqlite3.Connection, blob_rowid: int, rel: str) -> list[Finding]:
    """The findings in a stored sidecar, their starts and lines in its whole text."""
    out: list[Finding] = []
    lines = 0
    for base, text in sidecar_pieces(conn, blob_rowid, rel):
        for f in scan_texts([text])[0]:
            out.append(Finding(f.type, base + f.start, f.length, lines + f.line, f.col, f.sha256))
        lines += text.count("\n")
    return out


def store_sidecar_findings(conn: sqlite3.Connection, file_id: int, since: str | None,
                           blobs: dict[str, list[Finding]]) -> tuple[int, int, int]:
    """Scan the sidecars of the session file ``file_id`` (those refreshed at
    or after ``since``; None: all) and store their findings under it
    (SIDECAR_IDX): (sidecars, characters, findings). ``blobs``: the findings
    of each content scanned in this scan, so each is scanned once."""
    row = conn.execute("SELECT path FROM files WHERE id = ?", (file_id,)).fetchone()
    bounds = _sidecar_bounds(row[0]) if row else None
    if bounds is None:
        return 0, 0, 0
    n = chars = stored = 0
    for sid, sha, rel, rowid, refreshed in conn.execute(SELECT_SIDECARS, bounds).fetchall():
        if since is not None and (refreshed or "") < since:
            continue
        if sha not in blobs:
            blobs[sha] = _sidecar_findings(conn, rowid, rel)
            chars += conn.execute("SELECT size FROM blobs WHERE rowid = ?", (rowid,)).fetchone()[0]
        n += 1
        conn.execute("DELETE FROM secret_findings WHERE file_id = ? AND offset = ? AND idx = ?",
                     (file_id, -sid, SIDECAR_IDX))
        conn.executemany(FINDINGS_INSERT, [(file_id, -sid, SIDECAR_IDX, rel, f.start, f.length, f.line, f.col,
                                            f.type, f.sha256) for f in blobs[sha]])
        stored += len(blobs[sha])
    return n, chars, stored


def _sidecar_secrets(conn: sqlite3.Connection, sidecar_id: int, spans: list[tuple[int, int]]) -> list[str]:
    """The texts at ``spans`` (start, length) of a stored sidecar, in order."""
    row = conn.execute("SELECT b.rowid, c.rel FROM sidecars c JOIN blobs b ON b.sha256 = c.sha256 "
                       "WHERE c.id = ?", (sidecar_id,)).fetchone()
    if row is None:
        return []
    out: list[str] = []
    todo = sorted(spans)
    for base, text in sidecar_pieces(conn, row[0], row[1]):
        while todo and todo[0][0] < base + len(text):
            start, length = todo.pop(0)
            out.append(text[start - base:start - base + length])
        if not todo:
            break
    return out


def session_files(conn: sqlite3.Connection) -> dict[int, tuple[int, ...]]:
    """Each file's id -> the files of its session (itself too): its
    transcript and its subagents' (theirs by parent_session_id, in the same
    project folder) share the cwd, the branch and the prompts."""
    groups: dict[tuple, list[int]] = {}
    for fid, key, project in conn.execute(
            "SELECT s.file_id, coalesce(s.parent_session_id, s.session_id), f.project FROM sessions s "
            "JOIN files f ON f.id = s.file_id WHERE coalesce(s.parent_session_id, s.session_id) IS NOT NULL"):
        groups.setdefault((key, project), []).append(fid)
    return {fid: tuple(ids) for ids in groups.values() for fid in ids}


def redactor(conn: sqlite3.Connection, file_id: int,
             sessions: dict[int, tuple[int, ...]] | None = None) -> Redactor | None:
    """A function masking every secret found in the file or another file of
    its session, in any text (a block's, a line's raw JSON, a title, its
    path) as ``[REDACTED:<type>]``, and a piece of one cut off at its end
    (Redactor.prefixes); None when there is no finding. Text no scan has read yet (past the
    file's ``secret_scans.scanned_to``: a refresh since) is scanned here,
    its findings used and not stored: a redacted export never holds text
    unscanned. ``sessions``: session_files, when read once for many files."""
    ids = (sessions if sessions is not None else session_files(conn)).get(file_id) or (file_id,)
    rows = conn.execute(
        f"SELECT f.file_id, f.type, f.start, f.length, f.offset, f.idx, f.field, {WHOLE_TEXT.format('b')} "
        "FROM secret_findings f "
        "LEFT JOIN blocks b ON b.file_id = f.file_id AND b.offset = f.offset AND b.idx = f.idx "
        f"WHERE f.file_id IN ({', '.join('?' * len(ids))})", ids).fetchall()
    sources: dict[tuple[int, int, int], dict[str, str]] = {}  # (file, offset, idx) -> field -> text
    masks: dict[str, str] = {}  # secret -> its mask
    in_sidecars: dict[int, list[tuple[int, int, str]]] = {}  # sidecar id -> (start, length, type)
    for fid, kind, start, length, offset, idx, field, text in rows:
        if idx == SIDECAR_IDX:
            in_sidecars.setdefault(-offset, []).append((start, length, kind))
            continue
        if field == DECODED and idx >= 0 and text is not None:
            text = _decoded(text)
        elif idx < 0:
            if (fid, offset, idx) not in sources:
                sources[(fid, offset, idx)] = _source(conn, fid, offset, idx)
            text = sources[(fid, offset, idx)].get(field)
        secret = (text or "")[start:start + length]
        if secret:
            masks.setdefault(secret, f"[REDACTED:{kind}]")
    for sid, found in in_sidecars.items():
        found.sort()
        for secret, (_, _, kind) in zip(_sidecar_secrets(conn, sid, [(a, n) for a, n, _ in found]), found):
            if secret:
                masks.setdefault(secret, f"[REDACTED:{kind}]")
    scanned = conn.execute("SELECT coalesce((SELECT scanned_to FROM secret_scans WHERE file_id = ?), -1), "
                           "(SELECT cursor FROM files WHERE id = ?)", (file_id, file_id)).fetchone()
    if scanned[1] is not None and scanned[0] < scanned[1]:
        start = max(scanned[0], 0)
        for chunk in _unscanned(conn, file_id, start):
            for (_, _, _, text), fs in zip(chunk, scan_texts([r[3] for r in chunk])):
                for f in fs:
                    masks.setdefault(text[f.start:f.start + f.length], f"[REDACTED:{f.type}]")
    masks.pop("", None)
    return Redactor(masks) if masks else None


class Redactor:
    """Masks each of a file's secrets, in any spelling (``spellings``)."""

    def __init__(self, masks: dict[str, str]):
        self.masks = masks
        self.secrets = tuple(sorted(masks, key=len, reverse=True))
        # As a title made of a prompt holds them: whitespace collapsed.
        self.collapsed = [(" ".join(s.split()), masks[s]) for s in self.secrets]
        # A field the CLI cuts short (gitBranch, a title) holds a secret's
        # start: each spelling's first identifying characters, then as many
        # more of it as follow.
        self.starts: dict[str, list[tuple[str, str]]] = {}
        for secret in self.secrets:
            lead = identifying_from(secret)
            for form in {secret, " ".join(secret.split()), orjson.dumps(secret).decode()[1:-1]}:
                n = max(MIN_PREFIX, lead + MIN_PREFIX_RANDOM)
                if len(form) > n:
                    self.starts.setdefault(form[:n], []).append((form, masks[secret]))
        self.prefixes = re.compile("|".join(map(re.escape, sorted(self.starts, key=len, reverse=True)))) \
            if self.starts else None

    def __call__(self, value: str) -> str:
        if not self.secrets:
            return value
        value = spellings.substitute(value, self.secrets, self.masks)
        if self.prefixes is None or self.prefixes.search(value) is None:
            return value
        out: list[str] = []
        at = 0
        for m in self.prefixes.finditer(value):
            if m.start() < at:
                continue
            end, mask = m.end(), ""
            for form, kind in self.starts[m.group()]:
                j, i = m.end(), m.end() - m.start()
                while j < len(value) and i < len(form) and value[j] == form[i]:
                    j, i = j + 1, i + 1
                if j >= end:
                    end, mask = j, kind
            out += (value[at:m.start()], mask)
            at = end
        out.append(value[at:])
        return "".join(out)

    def truncated(self, value: str) -> str:
        """``value`` masked, and a secret it was cut in (a title is a
        prompt's first 60 characters) masked from where it starts."""
        value = self(value)
        for form, mask in self.collapsed:
            for k in range(min(len(form), len(value)), MIN_TAIL - 1, -1):
                if value.endswith(form[:k]):
                    return value[:-k] + mask
        return value


def identifying_from(secret: str) -> int:
    """Where ``secret`` stops being the start its kind shares (0: at once)."""
    m = _LEAD.match(secret)
    return m.end() if m else 0


def _unscanned(conn: sqlite3.Connection, file_id: int, start_offset: int):
    chunk, size = [], 0
    for row in _texts(conn, file_id, start_offset):
        chunk.append(row)
        size += len(row[3])
        if size >= CHUNK_CHARS:
            yield chunk
            chunk, size = [], 0
    if chunk:
        yield chunk


def _source(conn: sqlite3.Connection, file_id: int, offset: int, idx: int) -> dict[str, str]:
    """The texts a finding with a negative idx is in, by field."""
    if idx == FILE_IDX:
        row = conn.execute(f"SELECT {', '.join(FILE_FIELDS)} FROM files WHERE id = ?", (file_id,)).fetchone()
        return {f: v for f, v in zip(FILE_FIELDS, row or ()) if isinstance(v, str)}
    raw = raw_line(conn, file_id, offset)
    if raw is None:
        return {}
    if idx == RAW_IDX:
        return {"": _decoded(raw)}
    return dict(_strings(_attachment(raw)))


@dataclass
class ScanReport:
    files: int = 0  # files with new text scanned
    texts: int = 0  # block texts and attachment strings
    chars: int = 0
    findings: int = 0  # new findings
    seconds: float = 0.0

    def summary(self) -> str:
        return (f"Scanned {self.texts:,} new texts ({self.chars / 1e6:.1f} M characters) in {self.files} files: "
                f"{self.findings} secrets found, in {self.seconds:.2f}s")


def scan_catalog(conn: sqlite3.Connection, progress: Callable[[int, int], None] | None = None) -> ScanReport:
    """Scan every file's text (blocks, attachments) that no scan has read
    yet (past its ``secret_scans.scanned_to``), one transaction per file. A file refresh
    rewrote lost its findings and its scan row with its blocks, so it is
    scanned whole again. ``progress(files_done, files_total)``."""
    t0 = time.perf_counter()
    report = ScanReport()
    todo = conn.execute(
        "SELECT f.id FROM files f LEFT JOIN secret_scans s ON s.file_id = f.id "
        f"WHERE s.file_id IS NULL OR f.cursor > s.scanned_to OR {SIDECARS_SINCE} ORDER BY f.id").fetchall()
    if todo:  # (entering the settings imports detect-secrets)
        with plugin_settings():
            _scan_files(conn, todo, report, progress, CleanLines())
    report.seconds = time.perf_counter() - t0
    return report


def _scan_files(conn: sqlite3.Connection, todo: list, report: ScanReport, progress, clean: CleanLines) -> None:
    blobs: dict[str, list[Finding]] = {}  # each sidecar content's findings, scanned once
    for done, (file_id,) in enumerate(todo, 1):
        with transaction(conn):  # the cursor and the blocks of one moment
            row = conn.execute("SELECT f.cursor, coalesce(s.scanned_to, 0), s.scanned_at FROM files f "
                               "LEFT JOIN secret_scans s ON s.file_id = f.id WHERE f.id = ?", (file_id,)).fetchone()
            if row is not None:
                cursor, start, since = row
                texts, chars, found = store_findings(conn, file_id, start, clean)
                n, c, k = store_sidecar_findings(conn, file_id, since if start else None, blobs)
                texts, chars, found = texts + n, chars + c, found + k
                conn.execute("INSERT OR REPLACE INTO secret_scans (file_id, scanned_to, scanned_at) "
                             "VALUES (?, ?, datetime('now'))", (file_id, cursor))
                report.files += 1 if texts else 0
                report.texts += texts
                report.chars += chars
                report.findings += found
        if progress:
            progress(done, len(todo))
