"""What a Claude Code record means: its kind, its blocks and their costs.

Shared by the catalog (which stores these as rows) and the surgery engine
(which sizes what it strips), so both read a record the same way.
"""

from __future__ import annotations

import re
from datetime import datetime, timezone
from typing import Iterable

from txdb.model import tokens
from txdb.model.deep import dumps_text
from txdb.model.policy import SYSTEM_PROMPT, attachment_cost

# Line types that take part in the parentUuid chain. progress lines carry a
# uuid but Claude Code bridges over them.
CHAIN_TYPES = frozenset({"user", "assistant", "attachment", "system"})

# Every line type txdb knows, and what it is (docs/surgery.md, "Line types"):
#   conversation  on the chain, sent as context on resume;
#   progress      carries a uuid, bridged over, never sent;
#   journal       the request journal (since CC 2.1.300): on disk only;
#   bookkeeping   the CLI's own state (titles, modes, cursors), never sent.
LINE_TYPES = {
    **dict.fromkeys(("user", "assistant", "attachment", "system"), "conversation"),
    "progress": "progress",
    **dict.fromkeys(("api-request", "api-request-blob", "api-request-shape",
                     "api-request-resumed"), "journal"),
    **dict.fromkeys((
        "summary", "custom-title", "ai-title", "agent-name", "agent-color", "agent-setting", "tag",
        "last-prompt", "mode", "permission-mode", "queue-operation", "file-history-snapshot",
        "file-history-delta", "atis-latch", "bridge-session", "continued-in", "cost-state",
        "frame-link", "fork-context-ref", "tools-used", "session-owner", "derived-from",
        "data-flow-records", "data-flow-incomplete", "resume-head-vouch",
    ), "bookkeeping"),
}

# Top-level keys of a record txdb knows (reads, or knows the CLI's meaning
# of); the view format_census names the others a release brings.
ENVELOPE_KEYS = frozenset({
    "type", "subtype", "uuid", "parentUuid", "logicalParentUuid", "leafUuid", "sessionId",
    "session_id", "timestamp", "version", "isSidechain", "isMeta", "userType", "cwd", "gitBranch",
    "entrypoint", "slug", "message", "requestId", "attachment", "rendered", "renderedRole",
    "toolUseResult", "sourceToolAssistantUUID", "sourceToolUseID", "toolUseID", "parentToolUseID",
    "agentId", "data", "content", "level", "summary", "customTitle", "aiTitle", "agentName",
    "lastPrompt", "mode", "permissionMode", "operation", "snapshot", "messageId",
    "isSnapshotUpdate", "isCompactSummary", "compactMetadata", "isVisibleInTranscriptOnly",
    "isApiErrorMessage", "forkedFrom", "strippedBy", "tools", "sum", "promptId",
    "bridgeSessionId", "totalCostUSD", "modelUsage",
})

# Content block types block_rows reads (any other is kind 'other'); names
# are GLOB patterns (known_formats matches them so).
BLOCK_TYPES = ("text", "thinking", "redacted_thinking", "tool_use", "server_tool_use", "tool_result",
               "*_tool_result", "image", "document")

# The request journal: written since CC 2.1.300, never sent as context.
# What txdb's strips leave in a record: a stripped tool result or input starts
# with MARK (``[stripped by txdb: N chars]``), a stripped thinking block holds
# THINKING_PLACEHOLDER. Written by surgery (ops), read by show and usage.
# A record's markers of the thinking the API dropped after an edit, saved to
# sidecars (surgery/thinking.py): a field the CLI never sends.
DROPPED_FIELD = "persistedThinking"
MARK = "[stripped by txdb"
THINKING_PLACEHOLDER = "[thinking stripped by txdb]"

JOURNAL_TYPES = frozenset(t for t, what in LINE_TYPES.items() if what == "journal")

# Line types bound to the original session file, never copied to a fork (as
# Claude Code's own --fork-session): the journal, the bridge and cost state,
# and resume-head-vouch (the checksum of this file's resume-head.jsonl).
SESSION_BOUND_TYPES = JOURNAL_TYPES | frozenset(
    {"bridge-session", "continued-in", "cost-state", "resume-head-vouch"})

MARKUP_TAGS = (
    "command-name",
    "command-message",
    "command-args",
    "command-contents",
    "local-command-stdout",
    "local-command-stderr",
    "local-command-caveat",
)
_MARKUP_RE = re.compile(
    r"\s*(?:<(" + "|".join(MARKUP_TAGS) + r")>.*?</\1>\s*)+", re.DOTALL
)
_WRAPPED_THINKING_RE = re.compile(r"\s*<(thinking|think)>.*</\1>\s*", re.DOTALL)


def markup_kind(body: str) -> str | None:
    """command / command_output / caveat when the whole body is envelope markup."""
    if "<" not in body[:64] or not _MARKUP_RE.fullmatch(body):
        return None
    head = body.lstrip()
    if head.startswith("<local-command-caveat>"):
        return "caveat"
    if head.startswith("<local-command-stdout>") or head.startswith("<local-command-stderr>"):
        return "command_output"
    return "command"


def is_wrapped_thinking(text: str) -> bool:
    return text.lstrip()[:1] == "<" and _WRAPPED_THINKING_RE.fullmatch(text) is not None


def _result_text(content) -> tuple[str, list[dict], list[dict]]:
    """Text, nested image sources and nested document blocks of a
    tool_result's content (a Read of a PDF returns a ``document``)."""
    if isinstance(content, str):
        return content, [], []
    if not isinstance(content, list):
        if content is None:
            return "", [], []
        return dumps_text(content), [], []
    parts: list[str] = []
    images: list[dict] = []
    documents: list[dict] = []
    for item in content:
        if not isinstance(item, dict):
            parts.append(str(item))
            continue
        t = item.get("type")
        if t == "text":
            parts.append(str(item.get("text", "")))
        elif t == "image" and isinstance(item.get("source"), dict):
            images.append(item["source"])
        elif t == "document" and isinstance(item.get("source"), dict):
            documents.append(item)
        else:
            parts.append(dumps_text(item))
    return "\n".join(parts), images, documents


def block_rows(content, role: str | None) -> list[dict]:
    """One dict per content block: kind, sizes, tokens and searchable text."""
    if isinstance(content, str):
        kind = markup_kind(content) or "text"
        return [
            {
                "idx": 0,
                "type": "text",
                "kind": kind,
                "chars": len(content),
                "tokens": tokens.text_tokens(content),
                "text": content,
            }
        ]
    if not isinstance(content, list):
        return []
    rows = []
    for idx, block in enumerate(content):
        if not isinstance(block, dict):
            continue
        btype = block.get("type")
        row = {"idx": idx, "type": btype, "kind": "other", "envelope": tokens.envelope_chars(block)}
        if btype == "text":
            text = block.get("text")
            text = text if isinstance(text, str) else ""
            row["kind"] = (
                "thinking" if is_wrapped_thinking(text) else (markup_kind(text) or "text")
            )
            row["chars"] = len(text)
            row["tokens"] = tokens.text_tokens(text)
            row["text"] = text
        elif btype in ("thinking", "redacted_thinking"):
            text = block.get("thinking") or block.get("data") or ""
            text = text if isinstance(text, str) else ""
            sig = block.get("signature") or ""
            row["kind"] = "thinking"
            row["chars"] = len(text)
            row["signature_chars"] = len(sig) if isinstance(sig, str) else 0
            row["tokens"] = tokens.thinking_tokens(text, row["signature_chars"])
            row["text"] = text
        elif btype in ("tool_use", "server_tool_use"):
            inp = dumps_text(block.get("input"))
            row["kind"] = "tool_use"
            row["tool_name"] = block.get("name")
            row["tool_use_id"] = block.get("id")
            row["chars"] = len(inp)
            row["tokens"] = tokens.text_tokens(len(inp) + len(str(block.get("name") or "")))
            row["text"] = inp
        elif btype == "tool_result" or (isinstance(btype, str) and btype.endswith("_tool_result")):
            text, images, documents = _result_text(block.get("content"))
            infos = [tokens.image_info(s) for s in images]
            img_tokens = sum(i["tokens"] for i in infos)
            img_tokens += sum(tokens.document_info(d)["tokens"] for d in documents)
            if infos:
                # The largest nested image's size: what the API's per-image limits test.
                big = max(infos, key=lambda i: (i["width"] or 0) * (i["height"] or 0))
                row["media_type"], row["width"], row["height"] = big["media_type"], big["width"], big["height"]
                if len(infos) == 1:
                    row["image_sha256"] = big["sha256"]
            row["kind"] = "tool_result"
            row["tool_use_id"] = block.get("tool_use_id")
            row["is_error"] = 1 if block.get("is_error") else 0
            row["chars"] = len(text)
            row["images"] = len(images)
            row["tokens"] = tokens.text_tokens(text) + img_tokens
            row["text"] = text
        elif btype == "image":
            source = block.get("source") if isinstance(block.get("source"), dict) else {}
            info = tokens.image_info(source)
            row["kind"] = "image"
            row["media_type"] = info["media_type"]
            row["width"] = info["width"]
            row["height"] = info["height"]
            row["image_sha256"] = info["sha256"]
            row["chars"] = len(source.get("data") or "")
            row["tokens"] = info["tokens"]
        elif btype == "document":
            info = tokens.document_info(block)
            row["kind"] = "document"
            row["media_type"] = info["media_type"]
            row["chars"] = info["base64_chars"]
            row["tokens"] = info["tokens"]
        else:
            dumped = dumps_text(block)
            row["chars"] = len(dumped)
            row["tokens"] = tokens.text_tokens(len(dumped))
        rows.append(row)
    return rows


def block_text_at(content, idx: int) -> str | None:
    """The ``text`` that ``block_rows(content, ...)`` gives block ``idx``
    (None when that block has none), without deriving the other blocks nor
    the rest of its row: what the full-text index reads of a cut block."""
    if isinstance(content, str):
        return content if idx == 0 else None
    if not isinstance(content, list) or not 0 <= idx < len(content):
        return None
    block = content[idx]
    if not isinstance(block, dict):
        return None
    btype = block.get("type")
    if btype == "text":
        text = block.get("text")
        return text if isinstance(text, str) else ""
    if btype in ("thinking", "redacted_thinking"):
        text = block.get("thinking") or block.get("data") or ""
        return text if isinstance(text, str) else ""
    if btype in ("tool_use", "server_tool_use"):
        return dumps_text(block.get("input"))
    if btype == "tool_result" or (isinstance(btype, str) and btype.endswith("_tool_result")):
        return _result_text(block.get("content"))[0]
    return None


def record_kind(obj: dict) -> tuple[str | None, str | None]:
    """(type, subtype) of a record: subtype is the system subtype or attachment type."""
    rtype = obj.get("type")
    if not isinstance(rtype, str):
        rtype = None if rtype is None else str(rtype)
    subtype = None
    if rtype == "attachment":
        att = obj.get("attachment")
        if isinstance(att, dict):
            subtype = att.get("type")
    elif rtype == "system":
        subtype = obj.get("subtype")
    elif rtype == "progress":
        data = obj.get("data")
        if isinstance(data, dict):
            subtype = data.get("type")
    if subtype is not None and not isinstance(subtype, str):
        subtype = str(subtype)
    return rtype, subtype


def message_content(obj: dict):
    """The content a record contributes to the conversation, or None."""
    rtype = obj.get("type")
    if rtype in ("user", "assistant"):
        msg = obj.get("message")
        if isinstance(msg, dict):
            return msg.get("content")
        return None
    if rtype == "system" and obj.get("subtype") == "local_command":
        content = obj.get("content")
        return content if isinstance(content, str) else None
    return None


def now_timestamp() -> str:
    """Now, as Claude Code writes a record's timestamp (UTC, milliseconds,
    ``Z``): forks, the surgeries log and the snapshot record all use it."""
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def is_system_prompt(obj: dict) -> bool:
    """A record that builds the system prompt (``policy.SYSTEM_PROMPT``)."""
    att = obj.get("attachment") if obj.get("type") == "attachment" else None
    return isinstance(att, dict) and att.get("type") in SYSTEM_PROMPT


def record_tokens(obj: dict, blocks: list[dict] | None = None, model: str | None = None,
                  opens: bool = True) -> int:
    """Estimated context tokens a record costs when it is on the chain: the
    one per-record rule (stored as ``records.tokens``; the surgery plan and
    the calibration add the same figures): its blocks' tokens plus the
    envelope each is sent in (``tokens.envelope_chars``, none for a string
    sent as one), and its message's wrapper (``tokens.MESSAGE_TOKENS``)
    when it ``opens`` one (:func:`message_link`: refresh and a surgery
    tell it from the record its parentUuid names); an
    attachment as ``policy.attachment_cost`` prices it on ``model``, the
    session's model (:func:`session_model`: refresh and a surgery price it
    alike). A system-prompt record costs 0 here: it counts once per
    session, see :func:`system_prompt_tokens`."""
    rtype = obj.get("type")
    if rtype == "attachment":
        return 0 if is_system_prompt(obj) else attachment_cost(obj, model)[0]
    content = message_content(obj)
    if blocks is None:
        blocks = block_rows(content, None) if content is not None else []
    n = sum(b.get("tokens", 0) for b in blocks)
    if not isinstance(content, str):  # a string is sent as one: no block envelope
        chars = sum(b["envelope"] for b in blocks)
        n += (chars + tokens.CHARS_PER_TOKEN // 2) // tokens.CHARS_PER_TOKEN
    return n + message_wrapper(rtype, n) if opens else n


def message_wrapper(rtype: str | None, tokens_: int) -> int:
    """The wrapper (``tokens.MESSAGE_TOKENS``) a user or assistant record of
    ``tokens_`` tokens adds when it opens a message (:func:`message_link`)."""
    return tokens.MESSAGE_TOKENS.get(rtype, 0) if tokens_ else 0


def message_facts(obj: dict) -> tuple:
    """What :func:`message_link` reads of a record: ``(type, message id,
    its tool call ids, the call ids its tool results answer)``."""
    rtype = obj.get("type")
    msg = obj.get("message")
    if not isinstance(msg, dict):
        return rtype, None, (), ()
    mid = msg.get("id")
    content = msg.get("content")
    calls = answers = ()
    if isinstance(content, list):
        if rtype == "assistant":
            calls = tuple(b["id"] for b in content if isinstance(b, dict) and b.get("type") == "tool_use"
                          and isinstance(b.get("id"), str))
        else:
            answers = tuple(b.get("tool_use_id") for b in content
                            if isinstance(b, dict) and b.get("type") == "tool_result")
    return rtype, mid if isinstance(mid, str) else None, calls, answers


def message_link(facts: tuple, parent: tuple | None, calls: dict) -> tuple[bool, tuple]:
    """Whether a record opens a message of the request (and costs its
    ``tokens.MESSAGE_TOKENS`` wrapper), and what its children read of it:
    ``(opens, link)``. ``facts``: :func:`message_facts` of the record;
    ``parent``: the link of the record its ``parentUuid`` names (None when
    there is none); ``calls``: tool call id -> whether it is its message's
    first, which the call adds to. The CLI sends the lines of one assistant
    message (one message id) as one message, consecutive user lines as one,
    and the results of one message's calls as one, however they hang
    (below the one before, below their own call, in the order they
    finished): the result of the message's first call opens it."""
    rtype, mid, ids, answers = facts
    if rtype == "assistant":
        same = parent is not None and parent[0] == "assistant" and mid is not None and parent[1] == mid
        first = not (same and parent[2])  # the message's first line with a call
        for k, tid in enumerate(ids):
            calls[tid] = first and k == 0
        return not same, (rtype, mid, bool(ids) or (same and parent[2]))
    known = [calls[a] for a in answers if a in calls]
    if known:
        return any(known), (rtype, mid, False)
    return parent is None or parent[0] != "user", (rtype, mid, False)


def session_model(models: Iterable[str | None]) -> str | None:
    """The model a session's attachments are priced on (``record_tokens``):
    its file's first assistant turn's, a synthetic one aside, as refresh
    reads it in file order (``sessions.model``). ``models``: each assistant
    record's model, in file order."""
    return next((m for m in models if m and m != "<synthetic>"), None)


THINKING_BLOCKS = ("thinking", "redacted_thinking")


def thinking_tokens(obj: dict) -> int:
    """The part of :func:`record_tokens` that is thinking (thinking and
    redacted_thinking blocks, with their envelopes): what the CLI leaves out
    of a request on a model other than the one that wrote the message
    (``estimate.unsent_thinking``). The catalog's form: ``blocks`` of those
    types, ``tokens`` + ``tokens.THINKING_BLOCK_TOKENS`` each."""
    if obj.get("type") != "assistant":
        return 0
    content = message_content(obj)
    if not isinstance(content, list):
        return 0
    return sum(b.get("tokens", 0) + tokens.THINKING_BLOCK_TOKENS
               for b in block_rows(content, "assistant") if b.get("type") in THINKING_BLOCKS)


def image_tokens(obj: dict) -> int:
    """The part of :func:`record_tokens` that is images (image blocks, and
    images in a tool result), without their envelopes: priced by pixels as
    the API bills them. The calibration fits it as its own term
    (``estimate.fit``): an API a session was recorded on may bill images
    otherwise, and what it did must not set the price of the rest."""
    content = message_content(obj) if obj.get("type") in ("user", "assistant") else None
    if not isinstance(content, list):
        return 0
    n = 0
    for block in content:
        if not isinstance(block, dict):
            continue
        btype = block.get("type")
        if btype == "image":
            source = block.get("source")
            n += tokens.image_info(source if isinstance(source, dict) else {})["tokens"]
        elif btype == "tool_result" or (isinstance(btype, str) and btype.endswith("_tool_result")):
            n += sum(tokens.image_info(s)["tokens"] for s in _result_text(block.get("content"))[1])
    return n


def system_prompt_tokens(objs: Iterable[dict]) -> int:
    """"The system prompt counts once": the rendered cost of the latest
    record of each system-prompt type among ``objs`` (file order), wherever
    it lies, since it goes with every request. The catalog's statement is
    the ``system_prompt`` view (latest offset per type)."""
    latest: dict[str, dict] = {}
    for obj in objs:
        if is_system_prompt(obj):
            latest[obj["attachment"]["type"]] = obj
    return sum(attachment_cost(o)[0] for o in latest.values())


# -- a session's title and a human prompt --------------------------------------
# Title precedence (the record format): custom-title > agent-name > the first
# summary > ai-title (newer, read last) > the first human prompt, so no session
# with a prompt is untitled. Ingest (the catalog's sessions.title, also per
# grown file), fork (its name) and the session page all read it from here.
TITLE_RANK = {"custom-title": 5, "agent-name": 4, "summary": 3, "ai-title": 2, "prompt": 1}
TITLE_KEY = {
    "custom-title": "customTitle",
    "agent-name": "agentName",
    "summary": "summary",
    "ai-title": "aiTitle",
}
FIRST_WINS = frozenset({"summary", "prompt"})  # of the others, the last line wins
PROMPT_TITLE_CHARS = 60


def _typed(text) -> bool:
    """Text a person typed: not empty, not markup (a slash command, caveat,
    reminder or ``<ide_opened_file>`` note opens with ``<``)."""
    return isinstance(text, str) and bool(text.strip()) and not text.lstrip().startswith("<")


def human_prompt(obj: dict) -> str | None:
    """The text of a prompt a person typed, or None: a user record that is
    not meta or a compaction summary, whose content is a string of typed
    text, or a list whose first text block of typed text comes after
    markup-only (or empty) text blocks alone."""
    if obj.get("type") != "user" or obj.get("isMeta") or obj.get("isCompactSummary"):
        return None
    c = message_content(obj)
    if isinstance(c, list):
        for block in c:
            if not isinstance(block, dict) or block.get("type") != "text":
                return None
            text = block.get("text")
            if _typed(text):
                return text
        return None
    return c if _typed(c) else None


def note_title(titles: dict, obj: dict) -> None:
    """Keep what ``obj`` says about the title in ``titles`` (source -> text):
    the first summary and prompt, the last of the other kinds."""
    rtype = obj.get("type")
    if rtype in TITLE_KEY:
        v = obj.get(TITLE_KEY[rtype])
        if type(v) is str and v.strip() and not (rtype in FIRST_WINS and rtype in titles):
            titles[rtype] = v
    elif rtype == "user" and "prompt" not in titles:
        p = human_prompt(obj)
        if p is not None:
            titles["prompt"] = " ".join(p.split())[:PROMPT_TITLE_CHARS]


def pick_title(titles: dict, current: tuple[str | None, str | None] = (None, None)) -> tuple[str | None, str | None]:
    """(title, source) by precedence: the best of ``titles`` against the
    ``current`` pair (what earlier lines of the file gave), later lines of
    a kind replacing earlier ones unless the first of that kind wins."""
    title, source = current
    for src, value in titles.items():
        rank, cur = TITLE_RANK[src], TITLE_RANK.get(source or "", 0)
        if rank > cur or (rank == cur and src not in FIRST_WINS):
            title, source = value, src
    return title, source


# A usage count txdb stores and prices: a JSON integer from 0 to this (a
# billion million tokens; far above any API figure, low enough that sums of
# a whole catalog never overflow SQLite's 64-bit integers).
MAX_COUNT = 999_999_999_999_999
# The count fields of an API usage object (each also inside
# cache_creation, iterations[] entries and server_tool_use, when present).
_COUNT_OBJECTS = ("cache_creation", "server_tool_use")


def usage_count(v) -> int | None:
    """A usage count as txdb stores it: the integer when it is one in range
    (0 to MAX_COUNT), else None (absent or invalid: see usage_problems)."""
    return v if type(v) is int and 0 <= v <= MAX_COUNT else None


def _problem(where: str, v) -> str | None:
    if v is None or (type(v) is int and 0 <= v <= MAX_COUNT):
        return None
    shown = dumps_text(v) if not isinstance(v, (dict, list)) else type(v).__name__
    if type(v) is int:
        why = "negative" if v < 0 else "out of range"
    else:
        why = "not an integer"
    return f"{where}={shown[:40]} ({why})"


def usage_problems(usage: dict) -> str | None:
    """The invalid counts of one API usage object (a negative, one above
    MAX_COUNT, a float, a string, a boolean), each named with its field and
    value as written, '; '-joined; None when every count is valid. A null
    or absent count is not invalid. Such a record is never priced."""
    out = []
    for k, v in usage.items():
        # a valid count (the usual case) needs no _problem call
        if k.endswith("_tokens") and v is not None and not (type(v) is int and 0 <= v <= MAX_COUNT):
            out.append(_problem(k, v))
    for name in _COUNT_OBJECTS:
        obj = usage.get(name)
        if type(obj) is dict:
            out += [_problem(f"{name}.{k}", v) for k, v in obj.items() if not isinstance(v, (dict, list, str))
                    or k.endswith("_tokens") or k.endswith("_requests")]
    its = usage.get("iterations")
    if type(its) is list:
        for i, it in enumerate(its):
            if type(it) is dict:
                out += [_problem(f"iterations[{i}].{k}", v) for k, v in it.items() if k.endswith("_tokens")]
    found = [p for p in out if p]
    return "; ".join(found) if found else None
