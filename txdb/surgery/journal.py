"""The swap journal: what each swap of a session did, on disk before it happens.

``apply`` and ``undo`` rename a new file onto a session. Before that rename
they add an entry to ``<session>.jsonl.swaps.json`` beside it (written with
``write_atomic``: temp file, fsync, rename, folder fsync), so the record of
the swap never depends on the catalog: a catalog that cannot be written (a
full disk) or a process killed right after the rename leaves the journal,
from which ``undo`` works and ``log.catch_up`` fills the ``surgeries`` log
later. An entry (one per swap):

- ``id`` (its key; the ``surgeries`` rows it becomes carry it as
  ``arguments.swap``), ``at``, ``command`` (``apply`` or ``undo``),
  ``session``;
- ``backup``, ``backup_size``, ``backup_sha256``, ``backup_lines``: the file
  the swap kept (``null`` with ``--no-backup``), as it was kept;
- ``result_size``, ``result_sha256``: the file the swap wrote;
- ``rows``: the ``surgeries`` rows it stands for (command, arguments,
  records_changed, tokens_before, tokens_after).

Lifecycle: a swap that fails before its rename takes its entry back; one
killed before it leaves an entry the file does not match, which catch-up
disregards. The journal is only written right before a swap: then entries
disregarded are dropped and, when every earlier entry is in the catalog,
only the newest is kept (what the next ``undo`` reads), so a refusal never
changes it. The name ends in ``.json``, never
``.jsonl``: discovery never takes it for a session.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import orjson

from ..errors import SurgeryError
from ..paths import swaps_of
from ..records import now_timestamp
from ..durability import owner_of, prefix_sha256, write_atomic

def journal_path(orig: str | Path) -> Path:
    return swaps_of(orig)


def read(orig: str | Path) -> list[dict]:
    """The journal's entries, oldest first ([] when there is none). One
    that cannot be read is refused: writing over it would lose what it holds."""
    p = journal_path(orig)
    try:
        with open(p, "rb") as fh:
            raw = fh.read()
    except FileNotFoundError:
        return []
    except OSError as e:
        raise SurgeryError(f"the swap journal {p.name} cannot be read ({e.strerror}): move it away first") from None
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError:
        doc = None
    entries = doc.get("swaps") if isinstance(doc, dict) else None
    if not isinstance(entries, list) or not all(isinstance(e, dict) and isinstance(e.get("id"), str)
                                                for e in entries):
        raise SurgeryError(f"the swap journal {p.name} is not one txdb wrote (unreadable): move it away first")
    return entries


def write(orig: str | Path, entries: list[dict]) -> None:
    """Replace the journal by ``entries`` (none: the file goes)."""
    p = journal_path(orig)
    if not entries:
        try:
            os.unlink(p)
        except FileNotFoundError:
            pass
        return
    write_atomic(p, orjson.dumps({"swaps": entries}), owner=owner_of(os.stat(orig)))


def entry(orig: str | Path, command: str, *, backup: str | None, backup_size: int | None,
          backup_sha256: str | None, backup_lines: int | None, result_size: int, result_sha256: str,
          rows: list[dict], **extra) -> dict:
    return {"id": uuid.uuid4().hex, "at": now_timestamp(), "command": command, "session": str(orig),
            "backup": backup, "backup_size": backup_size, "backup_sha256": backup_sha256,
            "backup_lines": backup_lines, "result_size": result_size, "result_sha256": result_sha256,
            "rows": rows, **extra}


def pass_rows(passes: list[dict] | None) -> list[dict]:
    """The ``surgeries`` rows of an apply: one per pass the pending copy
    recorded (its arguments plus ``pass_at``, when the pass ran)."""
    rows = []
    for p in passes or []:
        args = dict(p.get("arguments") or {})
        if p.get("at"):
            args.setdefault("pass_at", p["at"])
        rows.append({"command": p.get("command") or "apply", "arguments": args,
                     "records_changed": p.get("records_changed"), "tokens_before": p.get("tokens_before"),
                     "tokens_after": p.get("tokens_after"), "stale_from": p.get("stale_from"),
                     "fit": p.get("fit")})
    return rows


def record(orig: str | Path, new: dict, standing: list[dict] | None = None) -> list[dict]:
    """Add ``new`` (durably, before the swap it describes) after ``standing``
    (the entries to keep, from ``log.catch_up``; default all). Returns the
    entries there were, for ``take_back`` when the swap does not happen."""
    previous = read(orig)
    write(orig, (previous if standing is None else standing) + [new])
    return previous


def take_back(orig: str | Path, previous: list[dict]) -> None:
    """A swap that did not happen: put the journal back as it was (best
    effort: an entry left over is one the file does not match, dropped by
    the next catch-up)."""
    try:
        write(orig, previous)
    except OSError:
        pass


def matches(orig: str | Path, e: dict) -> bool:
    """Whether the session begins with the file entry ``e`` wrote (its swap
    happened; Claude Code may have appended since)."""
    try:
        return prefix_sha256(Path(orig), e["result_size"]) == e["result_sha256"]
    except (OSError, KeyError, TypeError):
        return False
