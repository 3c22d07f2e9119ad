"""Build small session files line by line, the way Claude Code writes them."""

from __future__ import annotations

import itertools
import uuid as uuidlib
from pathlib import Path

import orjson

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
