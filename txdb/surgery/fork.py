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

Records the operation then creates in the fork (compact's boundary and
summary, a compact-range survivor) get the same two fields from
``stamp_created``: ``forkedFrom.messageUuid`` is then the record's own
uuid (it has no other original), ``strippedBy`` the fork's stamp.

Only top-level sessions fork: ``claude -r`` never finds a subagent
transcript (``<session>/subagents/agent-*.jsonl``), so ``check_forkable``
refuses one and names the parent session to fork instead.
"""

from __future__ import annotations

import re
import uuid as uuidlib
from pathlib import Path

import orjson

from txdb.errors import SurgeryError
from txdb.model.paths import SESSION_SUFFIX, is_subagent, parent_session, parent_session_id
from txdb.model.records import CHAIN_TYPES, SESSION_BOUND_TYPES, TITLE_KEY, note_title, now_timestamp, pick_title
from txdb.model.transcript import Transcript, dumps
from txdb.model.regular import open_regular

TOOL = "txdb"
# The fields a fork puts on every conversation envelope.
FORK_FIELDS = ("forkedFrom", "strippedBy")
_SUFFIX_RE = re.compile(r"\s*\(Stripped(?: \d+)?\)$")


def check_forkable(path: str | Path) -> None:
    """Refuse a subagent transcript: its fork could not be resumed."""
    p = Path(path)
    if is_subagent(p):
        parent_id, parent = parent_session_id(p), parent_session(p)
        raise SurgeryError(
            f"{p.name} is a subagent transcript and `claude -r` resumes only top-level sessions: "
            f"fork its parent session {parent_id} instead (txdb fork {parent})")


def session_title(t: Transcript) -> str | None:
    """The session's title as the catalog states it (``records.pick_title``)."""
    titles: dict = {}
    for r in t.live():
        if r.type in TITLE_KEY or (r.type == "user" and "prompt" not in titles):
            note_title(titles, r.parse())
    return pick_title(titles)[0]


def _sibling_titles(folder: Path, exclude: set[str]) -> set[str]:
    titles: set[str] = set()
    if not folder.is_dir():
        return titles
    for p in folder.glob("*.jsonl"):
        if p.name in exclude:
            continue
        try:
            with open_regular(p) as fh:
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
        _stamp(o, old_sid, stamp, force=True)
        objs.append(o)
    if title is None:
        own = {t.path.name} if t.path is not None else set()
        title = fork_title(session_title(t), _sibling_titles(folder, own))
    objs.append({"type": "custom-title", "customTitle": title, "sessionId": new_sid})
    data = b"".join(dumps(o) + b"\n" for o in objs)
    fork = Transcript.from_bytes(data, folder / (new_sid + SESSION_SUFFIX))
    fork.fork_of = old_sid
    fork.fork_stamp = stamp
    return fork


def _stamp(o: dict, old_sid: str | None, stamp: dict, *, force: bool) -> bool:
    """Put ``forkedFrom`` and ``strippedBy`` on a conversation envelope (``force``:
    replace the ones it has; else only when it lacks them). True when set."""
    if o.get("type") not in CHAIN_TYPES or not isinstance(o.get("uuid"), str):
        return False
    if not force and isinstance(o.get("forkedFrom"), dict) and isinstance(o.get("strippedBy"), dict):
        return False
    o["forkedFrom"] = {"sessionId": old_sid, "messageUuid": o["uuid"]} \
        if force or not isinstance(o.get("forkedFrom"), dict) else o["forkedFrom"]
    o["strippedBy"] = dict(stamp)
    return True


def stamp_created(fork: Transcript) -> int:
    """Stamp the records an operation created in a fork made by ``make_fork``
    (they carry no ``forkedFrom``/``strippedBy``); how many were stamped."""
    stamp = fork.fork_stamp
    if stamp is None:
        return 0
    n = 0
    for r in fork.live():
        if r.type not in CHAIN_TYPES or not r.uuid:
            continue
        if all(f'"{k}"'.encode() in r.raw for k in FORK_FIELDS):
            continue  # copied by make_fork (cheap test first: most records are)
        o = r.parse()
        if _stamp(o, fork.fork_of, stamp, force=False):
            fork.touch(r, o)
            n += 1
    return n
