"""Session files for tests: where the shipped and the corpus sessions are,
and small ones built line by line, the way Claude Code writes them.

Shipped in ``tests/data`` (present in every clone; see ``tests/data/README.md``):

- ``cli/``: sessions the pinned CLI wrote for these tests;
- ``generated/``: sessions of ``../shared/corpus/generated`` (CLI 2.1.328);
- ``projects/`` and ``real/``: real sessions from MIT-licensed repositories.

``../shared/corpus`` (developers' machines only) holds the large corpus;
tests that need it skip without it. :func:`session_path` prefers the copy
shipped here, so a test naming a corpus session runs in any clone when that
session is shipped.
"""

from __future__ import annotations

import itertools
import os
import uuid as uuidlib
from pathlib import Path

import orjson

from realcli.scenarios import pdf_bytes  # noqa: F401  (one PDF generator: the CLI scenarios use it too)

DATA = Path(__file__).resolve().parent / "data"
CORPUS = Path(os.environ.get("TXDB_CORPUS") or DATA.parents[2] / "shared" / "corpus")  # TXDB_CORPUS: a worktree elsewhere
_SHIPPED = {"cli": ("cli",), "generated": ("generated",), "real": ("projects", "real")}


def shipped_files(kind: str) -> list[Path]:
    """Every ``.jsonl`` of one kind (``cli``, ``generated``, ``real``) shipped
    in tests/data, subagent transcripts included."""
    return sorted(p for d in _SHIPPED[kind] for p in (DATA / d).rglob("*.jsonl"))


def is_main_session(p: Path, min_size: int = 1024) -> bool:
    """A top-level session file (not a subagent's), big enough to resume."""
    return "subagents" not in p.parts and not p.name.startswith("agent-") and p.stat().st_size >= min_size


def shipped_sessions(kind: str) -> list[Path]:
    """The top-level sessions of one kind shipped in tests/data."""
    return [p for p in shipped_files(kind) if is_main_session(p)]


def corpus_files(kind: str) -> list[Path]:
    """Every ``.jsonl`` of ``../shared/corpus/<kind>`` (``generated`` or
    ``real``) that tests/data does not ship a copy of; [] without the corpus."""
    root = CORPUS / kind
    if not root.is_dir():
        return []
    shipped = {p.name for p in shipped_files(kind)}
    return sorted(p for p in root.rglob("*.jsonl") if p.name not in shipped)


def session_path(corpus_rel: str) -> Path:
    """A corpus session named by its path under ``../shared/corpus``: the copy
    shipped in tests/data when there is one, else the corpus path (which may
    not exist: callers skip then)."""
    kind, name = corpus_rel.split("/", 1)[0], Path(corpus_rel).name
    shipped = [p for p in shipped_files(kind) if p.name == name] if kind in _SHIPPED else []
    return shipped[0] if shipped else CORPUS / corpus_rel


_counter = itertools.count()


def new_uuid() -> str:
    return str(uuidlib.uuid4())


def ts(i: int) -> str:
    return f"2026-11-01T10:{i // 60 % 60:02d}:{i % 60:02d}.000Z"


def user(text, parent=None, uid=None, session="s-1", i=None, **extra) -> dict:
    i = next(_counter) if i is None else i
    d = {
        "parentUuid": parent,
        "isSidechain": False,
        "type": "user",
        "message": {"role": "user", "content": text},
        "uuid": uid or new_uuid(),
        "timestamp": ts(i),
        "cwd": "/home/me/app",
        "sessionId": session,
        "version": "2.1.300",
        "gitBranch": "main",
    }
    d.update(extra)
    return d


def assistant(content, parent, uid=None, session="s-1", msg_id=None, usage=None, i=None,
              model="claude-opus-5", **extra) -> dict:
    i = next(_counter) if i is None else i
    if isinstance(content, str):
        content = [{"type": "text", "text": content}]
    d = {
        "parentUuid": parent,
        "isSidechain": False,
        "type": "assistant",
        "message": {
            "role": "assistant",
            "model": model,
            "id": msg_id or f"msg_{next(_counter):06d}",
            "content": content,
            "usage": usage or {"input_tokens": 10, "output_tokens": 5,
                               "cache_read_input_tokens": 100, "cache_creation_input_tokens": 20},
        },
        "requestId": f"req_{i}",
        "uuid": uid or new_uuid(),
        "timestamp": ts(i),
        "sessionId": session,
    }
    d.update(extra)
    return d


def attachment(att, parent, uid=None, session="s-1", i=None, rendered=None) -> dict:
    i = next(_counter) if i is None else i
    d = {
        "parentUuid": parent,
        "isSidechain": False,
        "attachment": att,
        "type": "attachment",
        "uuid": uid or new_uuid(),
        "timestamp": ts(i),
        "sessionId": session,
    }
    if rendered is not None:
        d["rendered"] = rendered
    return d


def dumps(obj) -> bytes:
    return orjson.dumps(obj)


def conversation(n_turns: int, session="s-1") -> list[dict]:
    """user/assistant turns chained root to leaf, with a Bash tool call each."""
    out = []
    parent = None
    for t in range(n_turns):
        u = user(f"prompt {t}", parent, session=session)
        tid = f"toolu_{t:04d}"
        a = assistant([{"type": "tool_use", "id": tid, "name": "Bash",
                        "input": {"command": f"echo {t}"}}], u["uuid"], session=session)
        r = user([{"type": "tool_result", "tool_use_id": tid, "content": f"out {t}\n" * 20}],
                 a["uuid"], session=session)
        a2 = assistant(f"done {t}", r["uuid"], session=session)
        out += [u, a, r, a2]
        parent = a2["uuid"]
    return out


def write(path: Path, objs: list[dict], trailing_newline=True) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = b"\n".join(dumps(o) for o in objs)
    if trailing_newline and objs:
        data += b"\n"
    path.write_bytes(data)
    return path


def append(path: Path, *objs: dict) -> None:
    with open(path, "ab") as fh:
        for o in objs:
            fh.write(dumps(o) + b"\n")


def pdf_block(data: bytes) -> dict:
    """A ``document`` block as Claude Code writes a PDF it read."""
    import base64

    return {"type": "document", "source": {"type": "base64", "media_type": "application/pdf",
                                           "data": base64.b64encode(data).decode()}}


def with_prompt_usage(src: Path, dst: Path, extra: int = 12000) -> Path:
    """``src`` copied to ``dst`` with ``extra`` cache-read tokens on every
    recorded turn: the system prompt and tools every real request carries
    (9,500+ tokens on the CLI releases measured), which a small hand-made
    fixture's usage leaves out and the bounded fit's overhead floor expects."""
    import re

    data = re.sub(rb'"cache_read_input_tokens":(\d+)', lambda m: b'"cache_read_input_tokens":%d' % (int(m[1]) + extra),
                  Path(src).read_bytes())
    Path(dst).parent.mkdir(parents=True, exist_ok=True)
    Path(dst).write_bytes(data)
    return Path(dst)


def edit_pending_copy(session: Path, data: bytes) -> None:
    """Replace a session's pending copy by ``data`` and record its size as the
    pass that wrote it would (``copy_size``), so that apply's later checks
    (a whole last line, the chain gate, verify) judge the edit, not the size check."""
    copy = Path(f"{session}.pending")
    meta = Path(f"{session}.pending.json")
    copy.write_bytes(data)
    doc = orjson.loads(meta.read_bytes())
    passes = doc.get("passes") or []
    (passes[-1] if passes else doc)["copy_size"] = len(data)
    meta.write_bytes(orjson.dumps(doc))
