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
import uuid as uuidlib
from pathlib import Path

import orjson

DATA = Path(__file__).resolve().parent / "data"
CORPUS = DATA.parents[2] / "shared" / "corpus"
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


def pdf_bytes(pages: int, pad_to: int = 0, compressed: bool = False) -> bytes:
    """A valid PDF of ``pages`` pages, one line of text each, written by hand
    (cross-reference table and all). ``pad_to``: a comment pads the file to
    about that many bytes, so PDFs of different page counts can be the same
    size. ``compressed``: the page objects sit in a Flate-compressed object
    stream (PDF 1.5), where no ``/Type /Page`` is in the clear (the classic
    cross-reference table keeps their slots as ``null`` objects: enough for
    a reader that counts pages, where a real file has a cross-reference
    stream)."""
    import zlib

    font = 3 + 2 * pages
    objs = [b"<< /Type /Catalog /Pages 2 0 R >>",
            f"<< /Type /Pages /Kids [{' '.join(f'{3 + 2 * i} 0 R' for i in range(pages))}] "
            f"/Count {pages} >>".encode()]
    page_dicts = []
    for i in range(pages):
        page_dicts.append(f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents {4 + 2 * i} 0 R "
                          f"/Resources << /Font << /F1 {font} 0 R >> >> >>".encode())
        s = f"BT /F1 24 Tf 72 720 Td (Hello from page {i + 1}) Tj ET".encode()
        objs += [page_dicts[-1], b"<< /Length %d >>\nstream\n%s\nendstream" % (len(s), s)]
    objs.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    if compressed:  # the pages move into object stream `font + 1`; their slots are left free
        body, offs = b"", []
        for d in page_dicts:
            offs.append(len(body))
            body += d + b"\n"
        head = b" ".join(b"%d %d" % (3 + 2 * i, o) for i, o in enumerate(offs)) + b"\n"
        packed = zlib.compress(head + body)
        objs.append(b"<< /Type /ObjStm /N %d /First %d /Filter /FlateDecode /Length %d >>\nstream\n%s\nendstream"
                    % (pages, len(head), len(packed), packed))
        for i in range(pages):
            objs[2 + 2 * i] = b"null"
    out = bytearray(b"%PDF-1.5\n")
    offsets = []
    for n, o in enumerate(objs, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (n, o)
    def tail(xref: int) -> bytes:
        return (b"xref\n0 %d\n0000000000 65535 f \n" % (len(objs) + 1)
                + b"".join(b"%010d 00000 n \n" % o for o in offsets)
                + b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%010d\n%%%%EOF\n" % (len(objs) + 1, xref))

    pad = pad_to - len(out) - len(tail(0)) - 2
    if pad > 0:
        out += b"%" + b"x" * pad + b"\n"
    out += tail(len(out))
    return bytes(out)


def pdf_block(data: bytes) -> dict:
    """A ``document`` block as Claude Code writes a PDF it read."""
    import base64

    return {"type": "document", "source": {"type": "base64", "media_type": "application/pdf",
                                           "data": base64.b64encode(data).decode()}}
