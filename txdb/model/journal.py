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

Anyone who can write the projects tree can write this file too, so it is
read as hostile input (``load``): only a regular file (never a FIFO, a link,
a folder) of at most ``MAX_BYTES``, and each entry checked for the fields
and types txdb writes and for naming the session's own files (the session
itself, a backup by the name txdb gives it, in its folder: ``paths``). An
entry that fails is named in one warning and disregarded (the next swap
writes the journal without it); a file that is not a journal at all is
refused by the session's own apply and undo, and named by refresh.
"""

from __future__ import annotations

import os
import re
import uuid
from pathlib import Path

import orjson

from txdb.errors import SurgeryError
from txdb.model.paths import backup_number, swaps_of
from txdb.model.records import now_timestamp
from txdb.model.regular import read_regular

# A journal holds the few swaps the catalog lacks (kilobytes): a larger file is not one txdb wrote.
MAX_BYTES = 64 << 20
_SHA256 = re.compile(r"[0-9a-f]{64}")
_INT64 = 1 << 63  # what an SQLite integer holds

def journal_path(orig: str | Path) -> Path:
    return swaps_of(orig)


def _count(v, nullable: bool = True) -> bool:
    """A count txdb writes: an int an SQLite column holds (or None)."""
    if v is None:
        return nullable
    return isinstance(v, int) and not isinstance(v, bool) and -_INT64 <= v < _INT64


def _sha(v, nullable: bool = False) -> bool:
    return (v is None and nullable) or (isinstance(v, str) and _SHA256.fullmatch(v) is not None)


def _opt_str(v) -> bool:
    return v is None or isinstance(v, str)


def _row_problem(r) -> str | None:
    if not isinstance(r, dict):
        return "a row is not an object"
    if not _opt_str(r.get("command")) or not isinstance(r.get("arguments") or {}, dict):
        return "a row's command or arguments are not ones txdb writes"
    for k in ("records_changed", "tokens_before", "tokens_after"):
        if not _count(r.get(k)):
            return f"a row's {k} is not a count"
    if not _opt_str(r.get("stale_from")):
        return "a row's stale_from is not a uuid"
    return None


def problem(orig: str | Path, e) -> str | None:
    """Why ``e`` is not an entry txdb wrote for the session ``orig`` (its
    real path), None when it is: the fields and types ``entry`` writes, the
    session itself and a backup of its own (``paths.backup_number``)."""
    if not isinstance(e, dict):
        return "not an object"
    if not isinstance(e.get("id"), str) or not 0 < len(e["id"]) <= 64:
        return "no id"
    if not isinstance(e.get("at"), str):
        return "no time ('at')"
    if e.get("command") not in ("apply", "undo"):
        return "its command is neither apply nor undo"
    if e.get("session") != str(orig):
        return "it names another session file" if isinstance(e.get("session"), str) else "no session"
    if not _count(e.get("result_size"), False) or e["result_size"] < 0 or not _sha(e.get("result_sha256")):
        return "no size and sha256 of the file it wrote"
    bak = e.get("backup")
    if bak is not None:
        if not isinstance(bak, str) or backup_number(orig, bak) is None:
            return "its backup is not one of the session's own (a .bak beside it)"
        # (txdb writes a backup's sha256 with every backup: undo checks it)
        if not _count(e.get("backup_size"), False) or e["backup_size"] < 0 or not _sha(e.get("backup_sha256")) \
                or not _count(e.get("backup_lines")):
            return "no size and sha256 of its backup"
    rows = e.get("rows")
    if not isinstance(rows, list):
        return "its rows are not a list"
    for r in rows:
        if (why := _row_problem(r)) is not None:
            return why
    return None


def load(orig: str | Path) -> tuple[list[dict], list[str]]:
    """(the journal's entries that are txdb's, oldest first; a warning for
    each other one, by place and id). ([], []) when there is none. A file
    that is no journal (not a regular file, over ``MAX_BYTES``, not JSON,
    no list of swaps) is refused: writing over it would lose what it holds."""
    orig = Path(os.path.realpath(orig))
    p = journal_path(orig)
    try:
        raw = read_regular(p, MAX_BYTES, follow=False)
    except FileNotFoundError:
        return [], []
    except OSError as err:
        raise SurgeryError(f"the swap journal {p} cannot be read ({err.strerror}): move it away first") from None
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError:
        doc = None
    entries = doc.get("swaps") if isinstance(doc, dict) else None
    if not isinstance(entries, list):
        raise SurgeryError(f"the swap journal {p} is not one txdb wrote (no list of swaps): move it away first")
    good, warnings = [], []
    for i, e in enumerate(entries, 1):
        why = problem(orig, e)
        if why is None:
            good.append(e)
            continue
        ident = e.get("id") if isinstance(e, dict) and isinstance(e.get("id"), str) else None
        warnings.append(f"entry {i} of the swap journal {p}" + (f" ({ident[:64]!r})" if ident else "")
                        + f" is not one txdb wrote ({why}): disregarded (the next swap drops it)")
    return good, warnings


def read(orig: str | Path) -> list[dict]:
    """The journal's entries txdb wrote (``load`` without its warnings)."""
    return load(orig)[0]


def write(orig: str | Path, entries: list[dict]) -> None:
    """Replace the journal by ``entries`` (none: the file goes)."""
    p = journal_path(orig)
    if not entries:
        try:
            os.unlink(p)
        except FileNotFoundError:
            pass
        return
    from txdb.model.durability import owner_of, write_atomic  # (a refresh reads journals, never writes one)

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


def logged_factor(orig: str | Path, size: int | None, sha256: str | None) -> float | None:
    """The factor the newest swap's last row priced its result at (its
    ``fit``, ``[overhead, factor]``), when the session's bytes (``size``,
    ``sha256``) are what that swap wrote; None otherwise, or when the
    journal cannot be read. What the catalog reads from the same rows
    (``estimate.session_estimate``), for a pass's own figures."""
    try:
        entries, _bad = load(orig)
    except SurgeryError:
        return None
    if not entries or entries[-1]["result_size"] != size or entries[-1]["result_sha256"] != sha256:
        return None
    rows = entries[-1]["rows"]
    fit = rows[-1].get("fit") if rows else None
    if isinstance(fit, list) and len(fit) == 2 and isinstance(fit[1], (int, float)) and not isinstance(fit[1], bool):
        return float(fit[1])
    return None


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
    from txdb.model.durability import prefix_sha256

    try:
        return prefix_sha256(Path(orig), e["result_size"]) == e["result_sha256"]
    except (OSError, KeyError, TypeError):
        return False
