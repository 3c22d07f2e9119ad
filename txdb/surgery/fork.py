"""Fork a session the way Claude Code's /branch does, plus txdb's strippedBy stamp.

- a new sessionId (random UUID), the file ``<project-dir>/<newId>.jsonl``;
- ``forkedFrom = {sessionId, messageUuid}`` on every conversation envelope;
- records bound to the original session are not copied (bridge-session,
  continued-in, cost-state, resume-head-vouch, the api-request* journal);
- the root's parentUuid stays null;
- a ``custom-title`` line appended: the title plus `` (Stripped)``,
  ``(Stripped 2)``... on collision with a sibling session; ``title``
  overrides;
- ``strippedBy = {tool, operation, at}`` on every envelope.

Only top-level sessions fork: ``claude -r`` never finds a subagent
transcript (``<session>/subagents/agent-*.jsonl``), so ``check_forkable``
refuses one and names the parent session to fork instead.
"""

from __future__ import annotations

import re
import uuid as uuidlib
from pathlib import Path

import orjson

from ..errors import SurgeryError
from ..records import CHAIN_TYPES, SESSION_BOUND_TYPES, now_timestamp
from .transcript import Transcript, dumps

TOOL = "txdb"
_SUFFIX_RE = re.compile(r"\s*\(Stripped(?: \d+)?\)$")


def check_forkable(path: str | Path) -> None:
    """Refuse a subagent transcript: its fork could not be resumed."""
    p = Path(path)
    if p.parent.name == "subagents" and p.name.startswith("agent-"):
        parent_id = p.parent.parent.name
        parent = p.parent.parent.parent / f"{parent_id}.jsonl"
        raise SurgeryError(
            f"{p.name} is a subagent transcript and `claude -r` resumes only top-level sessions: "
            f"fork its parent session {parent_id} instead (txdb fork {parent})")


def session_title(t: Transcript) -> str | None:
    """custom-title > ai-title > summary > first user prompt (as CC lists sessions)."""
    custom = ai = summary = prompt = None
    for r in t.live():
        typ = r.type
        if typ not in ("custom-title", "ai-title", "summary", "user") or (typ == "user" and prompt is not None):
            continue
        o = r.parse()
        if typ == "custom-title" and isinstance(o.get("customTitle"), str):
            custom = o["customTitle"]
        elif typ == "ai-title" and isinstance(o.get("aiTitle"), str):
            ai = o["aiTitle"]
        elif typ == "summary" and isinstance(o.get("summary"), str) and summary is None:
            summary = o["summary"]
        elif typ == "user" and prompt is None and not o.get("isMeta"):
            c = (o.get("message") or {}).get("content") if isinstance(o.get("message"), dict) else None
            if isinstance(c, str) and c.strip() and not c.lstrip().startswith("<"):
                prompt = " ".join(c.split())[:60]
    return custom or ai or summary or prompt


def _sibling_titles(folder: Path, exclude: set[str]) -> set[str]:
    titles = set()
    if not folder.is_dir():
        return titles
    for p in folder.glob("*.jsonl"):
        if p.name in exclude:
            continue
        try:
            with open(p, "rb") as fh:
                for line in fh:
                    if b'"custom-title"' in line:
                        try:
                            o = orjson.loads(line)
                        except orjson.JSONDecodeError:
                            continue
                        if o.get("type") == "custom-title" and isinstance(o.get("customTitle"), str):
                            titles.add(o["customTitle"])
        except OSError:
            continue
    return titles


def fork_title(base: str | None, taken: set[str]) -> str:
    base = _SUFFIX_RE.sub("", base or "Untitled session")
    title = f"{base} (Stripped)"
    n = 2
    while title in taken:
        title = f"{base} (Stripped {n})"
        n += 1
    return title


def make_fork(
    t: Transcript,
    *,
    operation: str,
    folder: str | Path,
    title: str | None = None,
    new_session_id: str | None = None,
    at: str | None = None,
) -> Transcript:
    """A new Transcript (not yet written) at ``<folder>/<newId>.jsonl``."""
    folder = Path(folder)
    old_sid = t.session_id
    new_sid = new_session_id or str(uuidlib.uuid4())
    at = at or now_timestamp()
    stamp = {"tool": TOOL, "operation": operation, "at": at}
    objs = []
    for r in t.live():
        if r.type in SESSION_BOUND_TYPES:
            continue
        o = r.parse()  # a fresh dict: the fork's own
        if "sessionId" in o:
            o["sessionId"] = new_sid
        if o.get("type") in CHAIN_TYPES and isinstance(o.get("uuid"), str):
            o["forkedFrom"] = {"sessionId": old_sid, "messageUuid": o["uuid"]}
            o["strippedBy"] = dict(stamp)
        objs.append(o)
    if title is None:
        own = {t.path.name} if t.path is not None else set()
        title = fork_title(session_title(t), _sibling_titles(folder, own))
    objs.append({"type": "custom-title", "customTitle": title, "sessionId": new_sid})
    data = b"".join(dumps(o) + b"\n" for o in objs)
    fork = Transcript.from_bytes(data, folder / f"{new_sid}.jsonl")
    fork.fork_of = old_sid  # type: ignore[attr-defined]
    return fork
