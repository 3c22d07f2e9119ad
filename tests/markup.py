"""Markup helpers the library no longer ships (nothing in txdb wraps payloads
in markup today); kept with their tests for the persist commands to come."""

from __future__ import annotations

import re

# Any "</" before a letter may start a closing tag (a payload could end with
# "</local-command-stdout" and the next write supply ">"): escape them all.
_CLOSE_TAG_RE = re.compile(r"<(\\*)/(?=[A-Za-z])")
_UNESCAPE_RE = re.compile(r"<(\\+)/(?=[A-Za-z])")
_ANSI_RE = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])")


def escape_markup(text: str) -> str:
    """Bijective escape of closing tags in a payload txdb wraps in markup:
    ``</tag>`` -> ``<\\/tag>``, ``<\\/tag>`` -> ``<\\\\/tag>``, ..."""
    return _CLOSE_TAG_RE.sub(lambda m: "<" + m.group(1) + "\\/", text)


def unescape_markup(text: str) -> str:
    return _UNESCAPE_RE.sub(lambda m: "<" + m.group(1)[1:] + "/", text)


def strip_ansi(text: str) -> str:
    return _ANSI_RE.sub("", text)

