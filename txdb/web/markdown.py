"""A message's text as HTML for the session page: Markdown rendered by
markdown-it-py with raw HTML off (``html=False``: a ``<script>`` in a
message is shown as text), links only to http, https, mailto or within
the page (``javascript:``, ``data:`` and the rest stay text), no images
(the page fetches nothing from another host); ``<system-reminder>`` parts
collapsed with their size, in messages and in tools' output."""

from __future__ import annotations

import html
import re

import markupsafe
from markdown_it import MarkdownIt

from txdb.model.tokens import text_tokens

LINK_SCHEMES = ("http", "https", "mailto")
_SCHEME = re.compile(r"^\s*([A-Za-z][A-Za-z0-9+.\-]*)\s*:")
_REMINDER = re.compile(r"<system-reminder>(.*?)(?:</system-reminder>|\Z)", re.DOTALL)


def _allowed_link(url: str) -> bool:
    """A link kept as a link: one of LINK_SCHEMES, or no scheme (a path or
    ``#anchor``). Anything with control characters is refused."""
    if any(ord(c) < 32 or ord(c) == 127 for c in url):
        return False
    m = _SCHEME.match(url)
    return m is None or m.group(1).lower() in LINK_SCHEMES


_md = MarkdownIt("commonmark", {"html": False, "breaks": True, "typographer": False})
_md.enable(["table", "strikethrough"]).disable("image")
_md.validateLink = _allowed_link


def _md_html(text: str) -> str:
    out = _md.render(text)
    # links open elsewhere, and give the target no handle on this page
    return out.replace("<a href=", '<a rel="noopener noreferrer nofollow" href=')


def reminder(body: str) -> str:
    """A system reminder, collapsed, its size in the summary."""
    size = f"{len(body):,} chars · {text_tokens(body):,} tok"
    return (f'<details class="blk reminder"><summary>system reminder · <span class="size">{size}</span>'
            f'</summary><pre class="body">{html.escape(body.strip())}</pre></details>')


def _split(text: str, part) -> markupsafe.Markup:
    """``text`` with each reminder collapsed, the rest through ``part``."""
    parts: list[str] = []
    at = 0
    for m in _REMINDER.finditer(text):
        if text[at:m.start()].strip():
            parts.append(part(text[at:m.start()]))
        parts.append(reminder(m.group(1)))
        at = m.end()
    if text[at:].strip() or not parts:
        parts.append(part(text[at:]))
    return markupsafe.Markup("".join(parts))


def render(text: str) -> markupsafe.Markup:
    """``text`` (a message's Markdown) as safe HTML, reminders collapsed."""
    return _split(text, _md_html)


def preformatted(text: str) -> markupsafe.Markup:
    """``text`` (a tool's output) as escaped preformatted text, reminders collapsed."""
    return _split(text, lambda t: f'<pre class="body">{html.escape(t.rstrip())}</pre>')
