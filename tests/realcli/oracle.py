"""The resume oracle: what does the real CLI send to the model after
``claude -p --resume <id> <ping>``?

``resume(path)`` copies a session file (and its ``<uuid>/`` side folder) into
a scratch HOME, resumes it with the pinned CLI against a :class:`FakeAPI`
and returns a :class:`ResumeResult`. The source file is only ever read.

CLI 2.1.328 looks a ``--resume <id>`` up in *every* project folder under
``~/.claude/projects`` (not only the current cwd's), appends the new turn to
the file where it found it, and does not need the recorded cwd to exist. We
still place the copy under the munged name of the scratch cwd, like a user's
own layout.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from .driver import RunResult, Sandbox, munge
from .fake_api import FakeAPI, Reply, block_texts, last_user_text, system_text

UUID_RE = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def _dumps(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def _strings(obj: Any) -> Iterator[str]:
    if isinstance(obj, str):
        yield obj
    elif isinstance(obj, list):
        for x in obj:
            yield from _strings(x)
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from _strings(v)


def content_blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    """A message's content as a list of blocks (a string becomes one text block)."""
    c = message.get("content")
    if isinstance(c, str):
        return [{"type": "text", "text": c}]
    return [b for b in (c or []) if isinstance(b, dict)]


@dataclass
class ResumeResult:
    session_id: str
    ping: str
    run: RunResult
    requests: list[dict[str, Any]]  # raw bodies of every POST /v1/messages, in order
    kinds: list[str]  # classify() of each of them: main, compact, subagent, side...
    recorded_cwd: str | None = None
    session_file: Path | None = None  # the scratch copy (None once cleaned up)
    all_requests: list[Any] = field(default_factory=list)  # every HTTP request seen (fake_api.Request)
    sibling_files: list[Path] = field(default_factory=list)  # scratch copies of ``siblings``

    # -- the request that carried the ping
    @property
    def main_index(self) -> int | None:
        for i, (b, k) in enumerate(zip(self.requests, self.kinds)):
            if k == "main" and self.ping in last_user_text(b):
                return i
        return None

    @property
    def main_request(self) -> dict[str, Any] | None:
        i = self.main_index
        return None if i is None else self.requests[i]

    @property
    def loaded(self) -> bool:
        """The CLI exited 0 and sent a request ending with our ping."""
        return self.run.returncode == 0 and self.main_index is not None

    @property
    def compacted(self) -> bool:
        """A summarisation (/compact) request went out before the ping request."""
        i = self.main_index
        upto = self.kinds if i is None else self.kinds[:i]
        return "compact" in upto

    @property
    def messages(self) -> list[dict[str, Any]]:
        r = self.main_request
        return list(r.get("messages") or []) if r else []

    @property
    def message_sizes(self) -> list[int]:
        return [len(_dumps(m)) for m in self.messages]

    @property
    def messages_chars(self) -> int:
        return len(_dumps(self.messages))

    @property
    def system_chars(self) -> int:
        return len(system_text(self.main_request))

    def user_assistant_messages(self) -> list[dict[str, Any]]:
        return [m for m in self.messages if m.get("role") in ("user", "assistant")]

    def roles(self) -> list[str]:
        return [m.get("role", "") for m in self.messages]

    def blocks(self, type: str | None = None) -> list[dict[str, Any]]:
        out = [b for m in self.messages for b in content_blocks(m)]
        return [b for b in out if type is None or b.get("type") == type]

    def text(self) -> str:
        """Every string of every /v1/messages request body, newline-joined:
        assert that stripped content is absent with ``x not in r.text()``."""
        return "\n".join(s for body in self.requests for s in _strings(body))

    def messages_text(self) -> str:
        """The strings of the ping request's messages only."""
        return "\n".join(s for m in self.messages for s in block_texts(m.get("content")))

    def summary(self) -> str:
        return (f"session {self.session_id}: rc={self.run.returncode} loaded={self.loaded} "
                f"compacted={self.compacted} messages={len(self.messages)} "
                f"chars={self.messages_chars} kinds={self.kinds} stderr={self.run.stderr.strip()[:300]!r}")


def read_session_meta(path: Path) -> tuple[str | None, str | None]:
    """(sessionId, cwd) from the first lines of a session that carry them."""
    sid = cwd = None
    with open(path, "rb") as f:
        for raw in f:
            try:
                d = json.loads(raw)
            except ValueError:
                continue
            if not isinstance(d, dict):
                continue
            sid = sid or d.get("sessionId")
            cwd = cwd or d.get("cwd")
            if sid and cwd:
                break
    return sid, cwd


def _copy_writable(src: Path, dst: Path) -> None:
    """Copy a file or tree; the copies are owner-writable (corpus is read-only)."""
    if src.is_dir():
        shutil.copytree(src, dst, copy_function=shutil.copyfile, dirs_exist_ok=True)
        for root, dirs, files in os.walk(dst):
            os.chmod(root, 0o700)
            for n in files:
                os.chmod(os.path.join(root, n), 0o600)
    else:
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dst)
        os.chmod(dst, 0o600)


def install_session(src: Path, sandbox: Sandbox, session_id: str | None = None) -> Path:
    """Copy ``src`` (+ side folder) into the sandbox's project folder."""
    src = Path(src)
    stem = src.name[:-len(".jsonl")] if src.name.endswith(".jsonl") else src.stem
    if session_id is None:
        session_id = stem if UUID_RE.match(stem) else read_session_meta(src)[0]
    if not session_id:
        raise ValueError(f"{src}: cannot tell the session id (no uuid name, no sessionId)")
    dst = sandbox.project_dir / f"{session_id}.jsonl"
    _copy_writable(src, dst)
    side = src.parent / session_id  # <uuid>/ beside the file (also for x.jsonl.pending)
    if not side.is_dir():
        side = src.with_name(stem)
    if side.is_dir() and side != src:
        _copy_writable(side, sandbox.project_dir / session_id)
    return dst


def resume(session_file: str | os.PathLike[str], ping: str = "ping", *,
           binary: str | os.PathLike[str] | None = None,
           workdir: str | os.PathLike[str] | None = None,
           session_id: str | None = None,
           script: list[Reply] | None = None,
           extra_args: tuple[str, ...] = (),
           timeout: float = 300,
           siblings: tuple[str | os.PathLike[str], ...] = (),
           env: dict[str, str] | None = None) -> ResumeResult:
    """Resume a copy of ``session_file`` with the real CLI; report what it sent.

    ``binary``: the claude executable (default: ``claude_binary()``, which
    installs it or skips the test). ``workdir``: where the scratch HOME/cwd go
    (kept afterwards, e.g. pytest's ``tmp_path``); default a temporary folder
    that is removed (then ``session_file`` of the result is None).
    ``siblings``: other session files installed in the same project folder
    first (e.g. the original beside its fork); their scratch copies are in
    ``ResumeResult.sibling_files``. ``env``: more environment for the CLI
    (e.g. ``CLAUDE_CODE_AUTO_COMPACT_WINDOW``).
    """
    if binary is None:
        from . import claude_binary
        binary = claude_binary()
    src = Path(session_file)
    if not src.is_file():
        raise FileNotFoundError(src)
    tmp = None
    if workdir is None:
        tmp = tempfile.TemporaryDirectory(prefix="txdb-resume-")
        root = Path(tmp.name)
    else:
        root = Path(workdir)
        root.mkdir(parents=True, exist_ok=True)
        root = Path(tempfile.mkdtemp(prefix="resume-", dir=root))
    try:
        with Sandbox(Path(binary), root, FakeAPI(script or []), timeout=timeout, env_extra=dict(env or {})) as sb:
            sibs = [install_session(Path(s), sb) for s in siblings]
            copy = install_session(src, sb, session_id)
            sid = copy.name[:-len(".jsonl")]
            run = sb.run(ping, resume=sid, extra_args=extra_args)
            msgs = sb.api.message_requests()
            res = ResumeResult(
                session_id=sid, ping=ping, run=run,
                requests=[r.body for r in msgs], kinds=[r.kind for r in msgs],
                recorded_cwd=read_session_meta(src)[1],
                session_file=None if tmp else copy,
                all_requests=list(sb.api.requests),
                sibling_files=[] if tmp else sibs,
            )
        return res
    finally:
        if tmp is not None:
            tmp.cleanup()


def read_back(tool_result: dict[str, Any]) -> str:
    """The file text a Read tool_result returned: the CLI's line numbers and the
    reminder it appends taken off."""
    c = tool_result["content"]
    if isinstance(c, list):
        c = "".join(b.get("text", "") for b in c if isinstance(b, dict) and b.get("type") == "text")
    c = c.split("\n\n<system-reminder>")[0]
    return "\n".join(re.sub(r"^\s*\d+\t", "", ln, count=1) for ln in c.split("\n"))


__all__ = ["ResumeResult", "resume", "install_session", "content_blocks", "munge", "read_session_meta",
           "read_back"]
