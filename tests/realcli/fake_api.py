"""A loopback-only fake of the Anthropic Messages API, good enough for the
real Claude Code CLI.

The server records every request (method, path, parsed JSON body) in order
and answers ``POST /v1/messages`` from a script of :class:`Reply` objects.
Requests the CLI makes on its own behalf (title generation, /compact
summaries, small helper calls) are recognised by :func:`classify` and
answered without consuming the script. Requests made by a subagent (the
Agent tool) are answered from the ``subagent`` replies attached to the
Agent tool call that spawned it (matched by its prompt text), else with a
short text reply.

Usage numbers are derived from the request size (chars / 4) so that the
CLI's own auto-compact arithmetic sees plausible figures.
"""

from __future__ import annotations

import itertools
import json
import threading
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

# --------------------------------------------------------------------------
# Scripted replies


@dataclass
class Reply:
    """One assistant response: a list of content blocks.

    ``subagent``: replies for the subagent an ``Agent`` tool_use in this reply
    spawns (the subagent's requests are recognised by the Agent prompt).
    """

    blocks: list[dict[str, Any]]
    stop_reason: str | None = None
    subagent: list["Reply"] = field(default_factory=list)

    def final_stop_reason(self) -> str:
        if self.stop_reason:
            return self.stop_reason
        if any(b.get("type") == "tool_use" for b in self.blocks):
            return "tool_use"
        return "end_turn"

    def __add__(self, other: "Reply") -> "Reply":
        return Reply(self.blocks + other.blocks, other.stop_reason or self.stop_reason,
                     self.subagent + other.subagent)


_tool_ids = itertools.count(1)


def _tool_id() -> str:
    return f"toolu_fake{next(_tool_ids):04d}{uuid.uuid4().hex[:12]}"


def text(s: str) -> Reply:
    return Reply([{"type": "text", "text": s}])


def thinking(s: str, signature: str | None = None) -> Reply:
    sig = signature or ("sigFAKE" + uuid.uuid4().hex * 4)
    return Reply([{"type": "thinking", "thinking": s, "signature": sig}])


def tool_use(name: str, input: dict[str, Any], id: str | None = None) -> Reply:
    return Reply([{"type": "tool_use", "id": id or _tool_id(), "name": name, "input": input}])


def bash(command: str, description: str = "Run a command") -> Reply:
    return tool_use("Bash", {"command": command, "description": description})


def read(file_path: str) -> Reply:
    return tool_use("Read", {"file_path": file_path})


def write(file_path: str, content: str) -> Reply:
    return tool_use("Write", {"file_path": file_path, "content": content})


def edit(file_path: str, old_string: str, new_string: str) -> Reply:
    return tool_use("Edit", {"file_path": file_path, "old_string": old_string,
                             "new_string": new_string, "replace_all": False})


def agent(prompt: str, description: str = "Helper task",
          subagent_type: str = "general-purpose",
          replies: list[Reply] | None = None) -> Reply:
    r = tool_use("Agent", {"description": description, "prompt": prompt,
                           "subagent_type": subagent_type})
    r.subagent = list(replies or [])
    return r


FALLBACK = Reply([{"type": "text", "text": "OK."}])

# --------------------------------------------------------------------------
# Recorded requests


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: Any  # parsed JSON, or None
    raw_len: int
    kind: str = ""  # "main", "subagent", "compact", "title", "side", "count_tokens", "other"

    @property
    def messages(self) -> list[dict[str, Any]]:
        return (self.body or {}).get("messages") or [] if isinstance(self.body, dict) else []

    @property
    def system_text(self) -> str:
        return system_text(self.body)


def system_text(body: Any) -> str:
    if not isinstance(body, dict):
        return ""
    s = body.get("system")
    if isinstance(s, str):
        return s
    if isinstance(s, list):
        return "\n".join(b.get("text", "") for b in s if isinstance(b, dict))
    return ""


def block_texts(content: Any) -> list[str]:
    """Every string inside a message content (text, tool_result, thinking...)."""
    out: list[str] = []
    if isinstance(content, str):
        out.append(content)
    elif isinstance(content, list):
        for b in content:
            if isinstance(b, str):
                out.append(b)
            elif isinstance(b, dict):
                for k in ("text", "thinking", "content"):
                    v = b.get(k)
                    if isinstance(v, str):
                        out.append(v)
                    elif isinstance(v, list):
                        out.extend(block_texts(v))
    return out


def last_user_text(body: Any) -> str:
    msgs = body.get("messages") if isinstance(body, dict) else None
    for m in reversed(msgs or []):
        if m.get("role") == "user":
            return "\n".join(block_texts(m.get("content")))
    return ""


def first_user_text(body: Any) -> str:
    msgs = body.get("messages") if isinstance(body, dict) else None
    for m in msgs or []:
        if m.get("role") == "user":
            return "\n".join(block_texts(m.get("content")))
    return ""


COMPACT_MARKERS = (
    "create a detailed summary of the conversation",
    "Your task is to create a detailed summary",
    "summary of the conversation so far",
)


def classify(body: Any, agent_prompts: dict[str, list[Reply]] | None = None) -> str:
    """Tell the main-loop request from the CLI's own side requests."""
    if not isinstance(body, dict):
        return "other"
    sys_t = system_text(body)
    last = last_user_text(body)
    # /compact and auto-compact append the summarisation instructions as the
    # last user message (CLI 2.1.328: "CRITICAL: Respond with TEXT ONLY. ...
    # Your task is to create a detailed summary of the conversation so far")
    if any(m in last for m in COMPACT_MARKERS):
        return "compact"
    tools = body.get("tools") or []
    if agent_prompts:
        first = first_user_text(body)
        for p in agent_prompts:
            if p and p in first:
                return "subagent"
    if not tools:
        low = sys_t.lower()
        if "title" in low:
            return "title"
        return "side"
    return "main"


# --------------------------------------------------------------------------
# SSE rendering


def _chars(obj: Any) -> int:
    return len(json.dumps(obj, ensure_ascii=False)) if obj is not None else 0


def billed_context(body: Any) -> int:
    """The context this fake API bills a request: chars / 4 of its system,
    messages and tools as ``json.dumps`` writes them (``", "`` and ``": "``
    separators, so a few percent above the compact JSON the CLI sends). The
    usage a CLI-made session records is in these units: a benchmark or test
    comparing txdb's estimate with "what the CLI sends" measures with this."""
    if not isinstance(body, dict):
        return 1
    return max(1, (_chars(body.get("system")) + _chars(body.get("messages")) + _chars(body.get("tools"))) // 4)


def usage_for(body: Any, output_tokens: int) -> dict[str, int]:
    """Plausible usage: total context = :func:`billed_context`, mostly cache reads."""
    total = billed_context(body)
    msgs = body.get("messages") if isinstance(body, dict) else None
    last = _chars(msgs[-1]) // 4 if msgs else total
    fresh = min(total, max(1, last))
    prefix = total - fresh
    cache_read = prefix * 9 // 10
    cache_creation = prefix - cache_read
    return {
        "input_tokens": fresh,
        "cache_creation_input_tokens": cache_creation,
        "cache_read_input_tokens": cache_read,
        "output_tokens": max(1, output_tokens),
    }


def _sse(event: str, data: dict[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n".encode()


def render_message(reply: Reply, body: Any, model: str) -> dict[str, Any]:
    out_tokens = sum(_chars(b) for b in reply.blocks) // 4
    return {
        "id": "msg_fake" + uuid.uuid4().hex[:20],
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": reply.blocks,
        "stop_reason": reply.final_stop_reason(),
        "stop_sequence": None,
        "usage": usage_for(body, out_tokens),
    }


def render_sse(reply: Reply, body: Any, model: str) -> bytes:
    msg = render_message(reply, body, model)
    usage = msg["usage"]
    start = dict(msg, content=[], stop_reason=None,
                 usage=dict(usage, output_tokens=1))
    parts = [_sse("message_start", {"type": "message_start", "message": start})]
    for i, b in enumerate(reply.blocks):
        t = b.get("type")
        if t == "text":
            parts.append(_sse("content_block_start", {"type": "content_block_start", "index": i,
                                                      "content_block": {"type": "text", "text": ""}}))
            s = b["text"]
            for j in range(0, len(s), 200) or [0]:
                parts.append(_sse("content_block_delta", {"type": "content_block_delta", "index": i,
                                                          "delta": {"type": "text_delta", "text": s[j:j + 200]}}))
        elif t == "thinking":
            parts.append(_sse("content_block_start", {"type": "content_block_start", "index": i,
                                                      "content_block": {"type": "thinking", "thinking": "", "signature": ""}}))
            parts.append(_sse("content_block_delta", {"type": "content_block_delta", "index": i,
                                                      "delta": {"type": "thinking_delta", "thinking": b["thinking"]}}))
            parts.append(_sse("content_block_delta", {"type": "content_block_delta", "index": i,
                                                      "delta": {"type": "signature_delta", "signature": b["signature"]}}))
        elif t == "tool_use":
            parts.append(_sse("content_block_start", {"type": "content_block_start", "index": i,
                                                      "content_block": {"type": "tool_use", "id": b["id"], "name": b["name"], "input": {}}}))
            js = json.dumps(b["input"], ensure_ascii=False)
            for j in range(0, len(js), 100) or [0]:
                parts.append(_sse("content_block_delta", {"type": "content_block_delta", "index": i,
                                                          "delta": {"type": "input_json_delta", "partial_json": js[j:j + 100]}}))
        else:
            raise ValueError(f"unsupported block type {t!r}")
        parts.append(_sse("content_block_stop", {"type": "content_block_stop", "index": i}))
    parts.append(_sse("message_delta", {"type": "message_delta",
                                        "delta": {"stop_reason": msg["stop_reason"], "stop_sequence": None},
                                        "usage": usage}))
    parts.append(_sse("message_stop", {"type": "message_stop"}))
    return b"".join(parts)


# --------------------------------------------------------------------------
# The server


def default_side_reply(kind: str, body: Any) -> Reply:
    if kind == "compact":
        return text("<analysis>Reviewed the conversation.</analysis>\n<summary>\n"
                    "1. Primary Request and Intent: the user ran a scripted test session.\n"
                    "2. Current Work: nothing pending.\n</summary>")
    if kind == "title":
        return text('{"title": "Scripted test session"}')
    return text("OK")


class FakeAPI:
    """Threaded loopback server. Use as a context manager.

    ``script``: replies for main-loop requests, consumed in order;
    ``fallback``: the reply once the script is exhausted.
    """

    def __init__(self, script: list[Reply] | None = None, fallback: Reply = FALLBACK,
                 side_replies: dict[str, Reply] | None = None):
        self.script: list[Reply] = list(script or [])
        self.fallback = fallback
        self.side_replies = dict(side_replies or {})
        self.requests: list[Request] = []
        self.agent_prompts: dict[str, list[Reply]] = {}
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- script control
    def push(self, *replies: Reply) -> None:
        with self._lock:
            self.script.extend(replies)

    def clear(self) -> None:
        with self._lock:
            self.requests.clear()

    # -- views on what was recorded
    def message_requests(self, kind: str | None = None) -> list[Request]:
        return [r for r in self.requests
                if r.path.split("?")[0].rstrip("/") == "/v1/messages" and (kind is None or r.kind == kind)]

    @property
    def base_url(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> "FakeAPI":
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a: Any) -> None:  # quiet
                pass

            def _read_body(self) -> tuple[Any, int]:
                n = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(n) if n else b""
                if not raw and self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    raw = self._read_chunked()
                try:
                    return (json.loads(raw) if raw else None), len(raw)
                except ValueError:
                    return None, len(raw)

            def _read_chunked(self) -> bytes:
                out = b""
                while True:
                    line = self.rfile.readline().strip()
                    size = int(line.split(b";")[0], 16)
                    if size == 0:
                        self.rfile.readline()
                        return out
                    out += self.rfile.read(size)
                    self.rfile.readline()

            def _send(self, code: int, payload: bytes, ctype: str = "application/json") -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(payload)))
                self.send_header("request-id", "req_fake" + uuid.uuid4().hex[:16])
                self.end_headers()
                self.wfile.write(payload)

            def _record(self, method: str) -> Request:
                body, n = self._read_body() if method in ("POST", "PUT", "PATCH") else (None, 0)
                hdrs = {k: v for k, v in self.headers.items()
                        if k.lower() not in ("x-api-key", "authorization")}
                req = Request(method, self.path, hdrs, body, n)
                with api._lock:
                    api.requests.append(req)
                return req

            def do_GET(self) -> None:
                req = self._record("GET")
                req.kind = "other"
                self._send(404, b'{"type":"error","error":{"type":"not_found_error","message":"not here"}}')

            do_DELETE = do_GET

            def do_HEAD(self) -> None:
                self._record("HEAD").kind = "other"
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_POST(self) -> None:
                req = self._record("POST")
                path = self.path.split("?")[0].rstrip("/")
                if path == "/v1/messages/count_tokens":
                    req.kind = "count_tokens"
                    tokens = usage_for(req.body, 0)
                    total = tokens["input_tokens"] + tokens["cache_read_input_tokens"] + tokens["cache_creation_input_tokens"]
                    self._send(200, json.dumps({"input_tokens": total}).encode())
                    return
                if path != "/v1/messages":
                    req.kind = "other"
                    self._send(404, b'{"type":"error","error":{"type":"not_found_error","message":"not here"}}')
                    return
                reply = api._choose(req)
                model = (req.body or {}).get("model", "claude-test") if isinstance(req.body, dict) else "claude-test"
                if isinstance(req.body, dict) and req.body.get("stream"):
                    self._send(200, render_sse(reply, req.body, model), "text/event-stream")
                else:
                    self._send(200, json.dumps(render_message(reply, req.body, model)).encode())

            do_PUT = do_POST
            do_PATCH = do_POST

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def _choose(self, req: Request) -> Reply:
        with self._lock:
            kind = classify(req.body, self.agent_prompts)
            req.kind = kind
            if kind == "main":
                reply = self.script.pop(0) if self.script else self.fallback
            elif kind == "subagent":
                first = first_user_text(req.body)
                queue = next(q for p, q in self.agent_prompts.items() if p and p in first)
                reply = queue.pop(0) if queue else text("Subagent finished: nothing more to do.")
            else:
                reply = self.side_replies.get(kind) or default_side_reply(kind, req.body)
            for b in reply.blocks:
                if b.get("type") == "tool_use" and b.get("name") in ("Agent", "Task"):
                    self.agent_prompts[b["input"].get("prompt", "")] = list(reply.subagent)
            return reply

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> "FakeAPI":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
