"""Secrets held in the catalog's text: found by a scan (``txdb secrets
scan``, and before every redacted export) of the text no scan has read yet
(blocks, and the strings of attachment lines), stored as findings (where
and of what type, a hash of the secret, never the secret itself), masked in
a redacted export.

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

import hashlib
import re
import sqlite3
import time
from bisect import bisect_right
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Callable

import orjson

from .db import transaction
from .ingest import deep

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
_CONFIG_NAME, _CODE_NAME = "transcript.ini", "transcript.txt"
# The texts of one file from a byte offset on: its blocks', its attachments'.
SELECT_TEXTS = ("SELECT offset, idx, text FROM blocks WHERE file_id = ? AND offset >= ? "
                "AND text IS NOT NULL AND text <> ''")
SELECT_ATTACHMENTS = ("SELECT a.offset, r.raw FROM attachments a JOIN records r "
                      "ON r.file_id = a.file_id AND r.offset = a.offset WHERE a.file_id = ? AND a.offset >= ?")
ATTACHMENT_IDX = -1  # secret_findings.idx of a finding in an attachment's text
MIN_CHARS = 8  # an attachment's shorter strings are not scanned
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
    keywords: re.Pattern  # the keyword plugin's words, searched in the lowered text


@lru_cache(maxsize=1)
def _detector() -> _Detector:
    """The plugins txdb runs, and their regular expressions (imported on
    first use: only a scan pays for detect-secrets)."""
    from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
    from detect_secrets.plugins import keyword
    from detect_secrets.settings import get_plugins, transient_settings

    plugins = [{"name": c.__name__} for c in get_mapping_from_secret_type_to_class().values()
               if c.__name__ not in SKIPPED_PLUGINS]
    plugins.append({"name": "GoogleApiKeyDetector", "path": Path(__file__).with_name("secret_plugins.py").as_uri()})
    settings = {"plugins_used": plugins}
    prefilters: list[re.Pattern] = []
    with transient_settings(settings):
        get_mapping_from_secret_type_to_class.cache_clear()  # now with txdb's plugin file
        for plugin in get_plugins():
            # The library matches a line at a time: ^ and $ are a line's ends here too.
            prefilters.extend(re.compile(p.pattern, p.flags | re.MULTILINE) for p in getattr(plugin, "denylist", ()))
    # Its words are lower case; a case-sensitive search of the lowered
    # text is several times faster than an IGNORECASE one.
    words = re.compile("|".join(keyword.DENYLIST))
    return _Detector(settings, tuple(dict.fromkeys(prefilters)), words)


def scan_texts(texts: list[str]) -> list[list[Finding]]:
    """The findings in each text, in order. The expressions are searched
    once over all the texts joined by newlines (one search per call, not
    per text: most texts are short); detection is per line anyway."""
    det = _detector()
    joined = "\n".join(texts)
    candidates = _candidate_lines(joined, det)
    out: list[dict[tuple[int, int], Finding]] = [{} for _ in texts]
    if not candidates:
        return [[] for _ in texts]
    from detect_secrets.core.scan import _process_line_based_plugins
    from detect_secrets.settings import transient_settings

    starts, first_lines, pos, line_no = [], [], 0, 0  # where each text starts in `joined`
    for text in texts:
        starts.append(pos)
        first_lines.append(line_no)
        pos += len(text) + 1
        line_no += text.count("\n") + 1
    with transient_settings(det.settings):
        for number, start, line in candidates:
            i = bisect_right(starts, start) - 1
            number, start = number - first_lines[i], start - starts[i]
            found = out[i]
            name = _CONFIG_NAME if _CONFIG_LINE.match(line) else _CODE_NAME
            for secret in _process_line_based_plugins([(number, line)], name):
                for f in _locate(line, number, start, secret.type, secret.secret_value or ""):
                    # A plugin naming the secret's kind wins over the keyword plugin.
                    held = found.get((f.start, f.length))
                    if held is None or held.type == KEYWORD_TYPE:
                        found[(f.start, f.length)] = f
    return [sorted(found.values(), key=lambda f: f.start) for found in out]


def _candidate_lines(text: str, det: _Detector) -> list[tuple[int, int, str]]:
    """(line number from 1, start, line) of each line a plugin's expression hits."""
    # A match's first and last character: one may start on the newline before its line.
    hits = {i for p in det.prefilters for m in p.finditer(text) for i in (m.start(), max(m.start(), m.end() - 1))}
    lowered = text.lower()  # keeps every newline; most often every position too
    words = [m.start() for m in det.keywords.finditer(lowered)]
    word_lines: set[int] = set()
    if len(lowered) == len(text):
        hits.update(words)
    elif words:  # a character that lowers to two: count the lowered text's lines
        word_lines = _line_numbers(lowered, words)
    lines: dict[int, tuple[int, str]] = {}
    for number, p in zip(_line_numbers_list(text, sorted(hits)), sorted(hits)):
        if number not in lines:
            lines[number] = _line_at(text, p)
    if word_lines - set(lines):
        start = 0
        for number, line in enumerate(text.split("\n")):
            if number in word_lines and number not in lines:
                lines[number] = (start, line)
            start += len(line) + 1
    return [(n + 1, start, line) for n, (start, line) in sorted(lines.items())]


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


def _locate(line: str, number: int, line_start: int, kind: str, value: str):
    if not value:
        return
    for m in re.finditer(re.escape(value), line):
        end = _TOKEN_REST.match(line, m.end()).end() if _TOKEN_REST.fullmatch(value) else m.end()
        secret = line[m.start():end]
        yield Finding(kind, line_start + m.start(), len(secret), number, m.start(),
                      hashlib.sha256(secret.encode("utf-8", "surrogatepass")).hexdigest())


def _texts(conn: sqlite3.Connection, file_id: int, start_offset: int) -> list[tuple[int, int, str, str]]:
    """(offset, idx, field, text) of the file's text from ``start_offset``
    on: each block's text (field ''), and each string of an attachment
    line's ``attachment`` (idx ATTACHMENT_IDX, field its JSON path): a
    file an @-mention attached, hook output, a queued prompt."""
    out = [(offset, idx, "", text) for offset, idx, text in conn.execute(SELECT_TEXTS, (file_id, start_offset))]
    for offset, raw in conn.execute(SELECT_ATTACHMENTS, (file_id, start_offset)):
        out.extend((offset, ATTACHMENT_IDX, field, text) for field, text in _strings(_attachment(raw)))
    return out


def _attachment(raw: str):
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


def store_findings(conn: sqlite3.Connection, file_id: int, start_offset: int = 0) -> tuple[int, int, int]:
    """Scan the file's text from ``start_offset`` on (_texts) and store its
    findings: (texts, characters, findings)."""
    rows = _texts(conn, file_id, start_offset)
    if not rows:
        return 0, 0, 0
    findings = scan_texts([r[3] for r in rows])
    values = [(file_id, offset, idx, field, f.start, f.length, f.line, f.col, f.type, f.sha256)
              for (offset, idx, field, _), fs in zip(rows, findings) for f in fs]
    if values:
        conn.executemany(FINDINGS_INSERT, values)
    return len(rows), sum(len(r[3]) for r in rows), len(values)


def redactor(conn: sqlite3.Connection, file_id: int) -> Callable[[str], str] | None:
    """A function masking every secret found in the file, in any text (a
    block's, a line's raw JSON, a title) as ``[REDACTED:<type>]``; None
    when the file has no finding."""
    rows = conn.execute(
        "SELECT f.type, f.start, f.length, f.offset, f.idx, f.field, b.text FROM secret_findings f "
        "LEFT JOIN blocks b ON b.file_id = f.file_id AND b.offset = f.offset AND b.idx = f.idx "
        "WHERE f.file_id = ?", (file_id,)).fetchall()
    attachments: dict[int, dict[str, str]] = {}
    masks: dict[str, str] = {}  # secret -> its mask
    for kind, start, length, offset, idx, field, text in rows:
        if idx == ATTACHMENT_IDX:
            if offset not in attachments:
                raw = conn.execute("SELECT raw FROM records WHERE file_id = ? AND offset = ?",
                                   (file_id, offset)).fetchone()
                attachments[offset] = dict(_strings(_attachment(raw[0]))) if raw else {}
            text = attachments[offset].get(field)
        secret = (text or "")[start:start + length]
        if secret:
            masks.setdefault(secret, f"[REDACTED:{kind}]")
    if not masks:
        return None
    secrets = sorted(masks, key=len, reverse=True)
    pattern = re.compile("|".join(f"({_spelled(s)})" for s in secrets))
    return lambda value: pattern.sub(lambda m: masks[secrets[m.lastindex - 1]], value)


def _spelled(secret: str) -> str:
    """A pattern matching ``secret`` as text and as it may stand inside a
    JSON string, each character as itself or escaped (``\\u0041`` for
    ``A``, ``\\/``, ``\\n``): a line's raw JSON that spells a key in
    escapes is still that key once decoded."""
    out = []
    for ch in secret:
        forms = {re.escape(ch), re.escape(orjson.dumps(ch).decode()[1:-1])}
        if ch == "/":
            forms.add(re.escape("\\/"))
        units = [ord(ch)] if ord(ch) < 0x10000 else [0xD800 + ((ord(ch) - 0x10000) >> 10),
                                                    0xDC00 + ((ord(ch) - 0x10000) & 0x3FF)]
        forms.add("".join(r"\\u" + "".join(f"[{h.lower()}{h.upper()}]" if h.isalpha() else h
                                          for h in f"{u:04x}") for u in units))
        out.append("(?:" + "|".join(sorted(forms)) + ")")
    return "".join(out)


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
        "WHERE s.file_id IS NULL OR f.cursor > s.scanned_to ORDER BY f.id").fetchall()
    for done, (file_id,) in enumerate(todo, 1):
        with transaction(conn):  # the cursor and the blocks of one moment
            row = conn.execute("SELECT f.cursor, coalesce(s.scanned_to, 0) FROM files f LEFT JOIN secret_scans s "
                               "ON s.file_id = f.id WHERE f.id = ?", (file_id,)).fetchone()
            if row is not None:
                cursor, start = row
                texts, chars, found = store_findings(conn, file_id, start)
                conn.execute("INSERT OR REPLACE INTO secret_scans (file_id, scanned_to, scanned_at) "
                             "VALUES (?, ?, datetime('now'))", (file_id, cursor))
                report.files += 1 if texts else 0
                report.texts += texts
                report.chars += chars
                report.findings += found
        if progress:
            progress(done, len(todo))
    report.seconds = time.perf_counter() - t0
    return report
