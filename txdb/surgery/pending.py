"""Copy-first: the pending copy, its snapshot record, and ``apply``.

Mutating commands never write a session file. They work on
``<session>.jsonl.pending``, a copy taken by ``snapshot`` (complete lines
only: a line the CLI is still writing is left out), with a sidecar
``<session>.jsonl.pending.json`` recording the original's size and the
sha256 of that prefix, and the size of the copy each pass wrote
(``copy_size``). Every command that reads the pending copy compares the
open file's size with that record (and with ``copy_limit`` of the snapshot,
for a record of an earlier release or a forged one) before it reads a byte
(``read_pending``). ``apply`` is the one write to the real file:

1. settle: the original must not change during 400 ms (a live CLI appends
   every 100 ms); one that has grown past the snapshot and changed in the
   last ``LIVE_QUIET_SECONDS`` must stay quiet until it has been quiet that
   long (a writer pausing up to a second between lines is seen); what apply
   then reads must be the file as the settle saw it;
2. prefix hash: the original must still begin with the snapshot's bytes
   (else it was rewritten and the copy no longer descends from it);
3. whole: the pending copy's last line must be complete (a pending copy is
   never being written; one cut short is refused);
4. nothing lost (``gate``): every record on the original's active chain
   that no recorded pass removed is still on the copy's active chain, in
   order;
5. verify: the pending copy must not fail ``verify`` in any way the
   original did not already fail;
6. one enumerated backup (``.bak``, ``.bak.1``, ...) unless ``backup=False``;
7. the checked bytes go to a temp file in the same folder, fsync; right
   before the one ``os.replace`` onto the original the original is stat'ed
   again and must not have changed since it was read (else the backup and
   the temp file are removed and apply refuses); fsync of the folder.

Lines appended to the original after the snapshot are discarded, counted
as of the rename (read from the old inode). A refusal raises
``SurgeryError`` and changes no file. A process killed at any point leaves
the old file or the new one, whole; the next run removes its temp file.

A session that is a symlink is operated on through the link: pending copy,
sidecar, backups and temp files live beside the real file, the link stays a
link. The result and the backup keep the original's mode, and its owner
when txdb runs as root.
"""

from __future__ import annotations

import collections
import hashlib
import os
import re
import stat
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Iterable

import orjson

from txdb.errors import SurgeryError
from txdb.model.paths import backup_of, original_path, own_session_path, pending_meta_of, pending_of, session_path, session_stem, working_file  # noqa: F401 - session_path, working_file: pend.* callers
from txdb.model.lines import is_whole_object
from txdb.model.lock import session_lock
from txdb.model import journal
from txdb.surgery import gate
from txdb.model.transcript import Transcript
from txdb.model.durability import clean_stale_temps, owner_of, prefix_sha256, write_atomic
from txdb.model.regular import NotRegularFile, kind, open_fd, open_regular, read_regular

if TYPE_CHECKING:
    from txdb.model.verify import Report

SETTLE_SECONDS = 0.4
# A file that grew past its snapshot this recently may have a writer pausing
# between lines (up to ~1 s): it must be quiet this long, 1 s of scheduling to spare.
LIVE_QUIET_SECONDS = 2.0
_SHA256 = re.compile(r"[0-9a-f]{64}")
READ_CHUNK = 1 << 20

# Tests set this to a callable(step) to act at each step of apply
# ("checked", "backup", "temp", "renaming", "swapped") and of a later surgery
# pass ("pass recorded", before its copy is written): kill the process,
# append to the original in the window... Never set in use.
_step_hook = None


def _step(name: str) -> None:
    if _step_hook is not None:
        _step_hook(name)


def pending_path(path: str | Path) -> Path:
    return pending_of(original_path(path))


def meta_path(path: str | Path) -> Path:
    return pending_meta_of(original_path(path))


def complete_prefix(data: bytes) -> int:
    """Length of ``data`` up to its last complete line. A final line without
    a newline counts when it is a whole JSON object (a published file); a
    line the CLI is still writing does not parse and is left out."""
    if not data or data.endswith(b"\n"):
        return len(data)
    cut = data.rfind(b"\n") + 1
    # the rule ingest reads a file by (ingest.lines.read_lines)
    return len(data) if is_whole_object(data[cut:]) else cut


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass
class Snapshot:
    original: str
    pending: str
    size: int
    sha256: str
    created: bool  # False when an existing pending copy was reused
    left_out_bytes: int = 0  # an unfinished last line not copied

    def as_dict(self) -> dict:
        return asdict(self)


# A snapshot record holds the passes' arguments and removed uuids (megabytes
# for a session of a million records): a larger file is not one txdb wrote.
MAX_META_BYTES = 256 << 20


def _pass_problem(p) -> str | None:
    if not isinstance(p, dict):
        return "a pass is not an object"
    if not isinstance(p.get("command") or "", str) or not isinstance(p.get("arguments") or {}, dict) \
            or not isinstance(p.get("at") or "", str):
        return "a pass's command, arguments or time are not ones txdb writes"
    if not isinstance(p.get("removed") or [], list):
        return "a pass's removed records are not a list"
    for k in ("records_changed", "tokens_before", "tokens_after"):
        v = p.get(k)
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or abs(v) >= 1 << 63):
            return f"a pass's {k} is not a count"
    if not isinstance(p.get("stale_from") or "", str):
        return "a pass's stale_from is not a uuid"
    if not _is_count(p.get("copy_size", 0)):
        return "a pass's copy_size is not a count"
    return None


def _is_count(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 1 << 63


def load_meta(path: str | Path) -> tuple[dict | None, str | None]:
    """(the snapshot record beside the session, None: why there is none
    txdb can use). Read as hostile input (anyone who can write the folder
    can write it): a regular file only, never a FIFO, a link or a folder, of
    at most ``MAX_META_BYTES``, with the fields and types txdb writes, naming
    this session as its original."""
    orig = original_path(path)
    try:
        raw = read_regular(meta_path(orig), MAX_META_BYTES, follow=False)
    except FileNotFoundError:
        return None, "missing"
    except OSError as e:
        return None, f"cannot be read: {e.strerror}"
    try:
        meta = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None, "not JSON"
    if not isinstance(meta, dict):
        return None, "not an object"
    size, digest_ = meta.get("size"), meta.get("sha256")
    if not isinstance(size, int) or isinstance(size, bool) or not 0 <= size < 1 << 63 \
            or not isinstance(digest_, str) or not _SHA256.fullmatch(digest_):
        return None, "no size and sha256 of the snapshot"
    if meta.get("original", str(orig)) != str(orig):
        return None, "it names another session file as its original"
    if not _is_count(meta.get("copy_size", 0)):
        return None, "its copy_size is not a count"
    left = meta.get("left_out_bytes", 0)
    if not isinstance(left, int) or isinstance(left, bool) or left < 0:
        return None, "its left_out_bytes is not a count"
    passes = meta.get("passes")
    if passes is not None:
        if not isinstance(passes, list):
            return None, "its passes are not a list"
        for p in passes:
            if (why := _pass_problem(p)) is not None:
                return None, why
    return meta, None


def read_meta(path: str | Path) -> dict | None:
    """The snapshot record (``load_meta``), None when there is none txdb can use."""
    return load_meta(path)[0]


def take_snapshot(path: str | Path) -> tuple[bytes, dict]:
    """(complete-line bytes of the original, the sidecar record), written nowhere."""
    orig = original_path(path)
    if not orig.is_file():
        raise SurgeryError(f"no session file at {orig}")
    with open_regular(orig) as fh:
        data = fh.read()
        st = os.fstat(fh.fileno())
    size = complete_prefix(data)
    digest = sha256(data[:size])
    meta = {"original": str(orig), "size": size, "sha256": digest, "copy_size": size,
            "taken_at": time.time(), "left_out_bytes": len(data) - size, "tool": "txdb"}
    if st.st_size == len(data):
        _READ_AS[str(orig)] = (quiet_identity(st), digest)
    return data[:size], meta


# A file last changed this long before it was read: any later write gives it another mtime or ctime.
QUIET_NS = 2_000_000_000
# Per original read by take_snapshot in this process: (its stat identity, None if it was
# changing as it was read; the snapshot's sha256).
_READ_AS: dict[str, tuple[tuple | None, str]] = {}


def quiet_identity(st: os.stat_result) -> tuple | None:
    """The file's identity as its stat gives it, when it had not changed for
    ``QUIET_NS`` before this stat (a write within the clock's granularity of
    the read could leave mtime and ctime as they were: git's racy-clean rule)."""
    if time.time_ns() - max(st.st_mtime_ns, st.st_ctime_ns) < QUIET_NS:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def write_snapshot(path: str | Path, data: bytes | Iterable[bytes], meta: dict) -> None:
    """Sidecar first, then the pending copy: a crash in between leaves a
    sidecar without a copy, which the next snapshot overwrites. Both go to
    the session's owner (when root writes them)."""
    write_meta(path, meta)
    write_pending(path, data)


def write_pending(path: str | Path, data: bytes | Iterable[bytes]) -> None:
    write_atomic(pending_path(path), data, owner=owner_of(os.stat(original_path(path))))


def write_meta(path: str | Path, meta: dict) -> None:
    write_atomic(meta_path(path), orjson.dumps(meta), owner=owner_of(os.stat(original_path(path))))


def record_pass(path: str | Path, entry: dict) -> None:
    """Remember in the sidecar which command produced (this pass of) the
    pending copy, so that ``apply`` can log it. Never touches the copy.
    Written before the copy it describes: a process killed in between leaves
    a recorded pass whose removals are still on the copy, which ``apply``
    accepts (the reverse order would leave removals no pass explains)."""
    meta = read_meta(path)
    if meta is None:
        return
    meta["passes"] = list(meta.get("passes") or []) + [entry]
    write_meta(path, meta)


def unreadable_meta(orig: Path) -> SurgeryError:
    """The refusal when a pending copy lies beside a snapshot record that is
    missing or unreadable: the copy's passes cannot be checked, and taking a
    new snapshot over it would lose them."""
    why = load_meta(orig)[1] or "missing or unreadable"
    return SurgeryError(f"the snapshot record {meta_path(orig).name} of the pending copy "
                        f"{pending_path(orig).name} is not one txdb wrote ({why}): "
                        f"run `txdb snapshot --refresh {orig}` to start again from the session")


def applied_copy(orig: Path, e: dict | None) -> bool:
    """Whether the pending copy beside ``orig`` is the one journal entry
    ``e``'s apply swapped in already (killed before it removed the copy):
    the copy is what the session became, taken of what the backup holds."""
    pending, meta = pending_path(orig), read_meta(orig)
    if not e or e.get("command") != "apply" or meta is None or not e.get("backup") or not pending.is_file():
        return False
    try:
        with open_regular(pending, follow=False) as fh:
            if os.fstat(fh.fileno()).st_size != e.get("result_size") or sha256(fh.read()) != e["result_sha256"]:
                return False
        return prefix_sha256(Path(e["backup"]), meta["size"]) == meta["sha256"] and journal.matches(orig, e)
    except OSError:
        return False


def drop_applied_copy(orig: Path) -> bool:
    """Remove a pending copy (and its record) that its apply swapped in
    already, killed before it removed them (``applied_copy`` of the
    journal's newest entry): a later pass starts from the session, as it
    would have. Call it under the session lock. Whether it removed one."""
    try:
        entries = journal.read(orig)
    except SurgeryError:
        return False
    if not entries or not applied_copy(orig, entries[-1]):
        return False
    for p in (pending_path(orig), meta_path(orig)):
        try:
            os.unlink(p)
        except OSError:
            pass
    return True


# The most a pending copy may hold, whatever its record says: twice the
# snapshot (a marker is longer than the short text it replaces) and 16 MiB
# (a --summary). No pass writes more (``engine``), so a copy over it is not txdb's.
COPY_GROWTH = 2
COPY_SLACK = 16 << 20


def copy_limit(snapshot_size: int) -> int:
    """The largest pending copy a pass may make of a snapshot of ``snapshot_size`` bytes."""
    return COPY_GROWTH * snapshot_size + COPY_SLACK


def copy_sizes(meta: dict) -> set[int] | None:
    """The sizes the pending copy may have by its record: the last pass's
    copy (the snapshot's, before any pass), or the one before it (a pass
    killed between recording itself and writing its copy). None when the
    record does not say (written by an earlier release)."""
    sizes = [meta.get("copy_size")] + [p.get("copy_size") for p in meta.get("passes") or []]
    last = sizes[-2:] if len(sizes) > 1 else sizes
    return None if any(s is None for s in last) else {int(s) for s in last if s is not None}


def copy_problem(orig: Path, meta: dict | None, size: int) -> str | None:
    """Why a pending copy of ``size`` bytes cannot be the one ``meta`` describes, None if it can."""
    base = meta["size"] if meta is not None else None
    try:
        now = os.stat(orig).st_size
        base = now if base is None else min(base, now)  # a forged record's size is no bigger than the file
    except OSError:
        base = base or 0
    expected = copy_sizes(meta) if meta is not None else None
    if expected is not None and size not in expected:
        return "its record says " + " or ".join(f"{n:,}" for n in sorted(expected, reverse=True))
    if size > copy_limit(base):
        return (f"more than any pass makes of the {base:,}-byte snapshot "
                f"(at most {COPY_GROWTH} x it + {COPY_SLACK >> 20} MiB)")
    return None


def _not_the_copy(orig: Path, size: int, why: str) -> SurgeryError:
    return SurgeryError(f"the pending copy {pending_path(orig).name} is {size:,} bytes, {why}: not the copy txdb "
                        f"wrote (none of it read, nothing changed); run `txdb snapshot --refresh {orig}` "
                        "to start again from the session")


def read_pending(orig: Path, meta: dict | None) -> bytes:
    """The pending copy's bytes, its size checked (``copy_problem``) on the
    open file before a byte is read; a link, a FIFO or a folder there is refused too."""
    pend = pending_path(orig)
    try:
        fh = open_regular(pend, follow=False)
    except NotRegularFile as e:
        raise SurgeryError(f"{pend.name} is {kind(e.mode)}, not a pending copy txdb wrote: "
                           "remove it and redo the surgery") from None
    except FileNotFoundError:
        raise SurgeryError(f"no pending copy for {orig.name}: a surgery command makes one first") from None
    except OSError as e:
        raise SurgeryError(f"the pending copy {pend.name} cannot be read: {e.strerror}") from None
    with fh:
        size = os.fstat(fh.fileno()).st_size
        if (why := copy_problem(orig, meta, size)) is not None:
            raise _not_the_copy(orig, size, why)
        data = fh.read(size + 1)
    if len(data) != size:
        raise SurgeryError(f"the pending copy {pend.name} changed while it was read ({size:,} bytes, then "
                           f"{len(data):,}): a pending copy is never being written; run "
                           f"`txdb snapshot --refresh {orig}` and redo the surgery")
    return data


def check_pending_size(orig: Path, meta: dict | None) -> None:
    """``read_pending``'s check, reading nothing (a command that reuses the copy as it is)."""
    try:
        fd = open_fd(pending_path(orig), follow=False)
    except OSError:
        return  # not there, or not a file: the caller's own checks say so
    try:
        size = os.fstat(fd).st_size
    finally:
        os.close(fd)
    if (why := copy_problem(orig, meta, size)) is not None:
        raise _not_the_copy(orig, size, why)


def check_pending_kind(orig: Path) -> None:
    """Refuse a pending copy's name held by anything but a regular file (a
    link, a FIFO, a folder): never txdb's, and never read through."""
    try:
        st = os.lstat(pending_path(orig))
    except FileNotFoundError:
        return
    if not stat.S_ISREG(st.st_mode):
        raise SurgeryError(f"{pending_path(orig).name} is {kind(st.st_mode)}, not a pending copy txdb wrote: "
                           "remove it and redo the surgery")


def snapshot(path: str | Path, refresh: bool = False) -> Snapshot:
    """Create the pending copy, or reuse the one there (``refresh`` discards it)."""
    orig = own_session_path(path)
    pend = pending_path(orig)
    if not orig.is_file():
        raise SurgeryError(f"no session file at {orig}")
    with session_lock(orig):
        if not refresh:
            check_pending_kind(orig)
        meta = read_meta(orig)
        if pend.exists() and meta is None and not refresh:
            raise unreadable_meta(orig)
        if pend.exists() and meta is not None and not refresh:
            check_pending_size(orig, meta)
            return Snapshot(str(orig), str(pend), meta["size"], meta["sha256"], False,
                            meta.get("left_out_bytes", 0))
        data, meta = take_snapshot(orig)
        clean_stale_temps(orig.parent)
        write_snapshot(orig, data, meta)
        return Snapshot(str(orig), str(pend), meta["size"], meta["sha256"], True, meta["left_out_bytes"])


def check_descends(orig: Path, meta: dict, data: bytes | None = None) -> None:
    """Refuse unless the original (``data``, its bytes, or the file read in
    chunks) still begins with the snapshot."""
    size = meta["size"]
    if data is None:
        ident, digest = _READ_AS.get(str(orig), (None, None))
        if ident is not None and digest == meta["sha256"] and quiet_identity(os.stat(orig)) == ident:
            return  # the very file this process read, untouched since (no second read of 100 MB)
        digest = prefix_sha256(orig, size)
    else:
        digest = sha256(memoryview(data)[:size]) if len(data) >= size else None
    if digest != meta["sha256"]:
        raise SurgeryError(
            f"{orig.name} was rewritten since the snapshot (prefix hash differs); "
            f"the pending copy no longer descends from it: run `txdb snapshot --refresh {orig}`"
        )


def new_errors(before: Report, after: Report) -> list[str]:
    """Error findings of ``after`` beyond those ``before`` already had (by code)."""
    had = collections.Counter(f.code for f in before.findings if f.severity == "error")
    now = collections.Counter(f.code for f in after.findings if f.severity == "error")
    out = []
    for f in after.findings:
        if f.severity == "error" and now[f.code] > had[f.code]:
            out.append(f"{f.code}: {f.message}")
    return out


def next_backup(orig: Path) -> Path:
    cand = backup_of(orig)
    n = 1
    while cand.exists() or cand.is_symlink():
        cand = backup_of(orig, n)
        n += 1
    return cand


@dataclass
class ApplyReport:
    original: str
    pending: str
    dry_run: bool
    backup: str | None
    size_before: int
    size_after: int
    discarded_lines: int
    discarded_bytes: int
    errors_before: int
    errors_after: int
    applied: bool
    passes: list = None  # the commands that produced the pending copy (from its sidecar)
    result_sha256: str | None = None  # of the file the apply wrote (what `undo` expects to find)
    swap: str | None = None  # its entry in the swap journal
    catalog_error: str | None = None  # the swap is done but the catalog could not be updated
    entry: dict | None = None  # the swap journal's entry (not in as_dict)
    warnings: list[str] = field(default_factory=list)  # journal entries disregarded (not txdb's)
    settled_seconds: float = 0.0  # how long the original was watched before it was read (``settle_seconds``)

    def as_dict(self) -> dict:
        d = asdict(self)
        d.pop("entry")
        return d


def _read_range(fd: int, size: int):
    """The first ``size`` bytes of an open file, in chunks."""
    pos = 0
    while pos < size:
        chunk = os.pread(fd, min(READ_CHUNK, size - pos), pos)
        if not chunk:
            return
        yield chunk
        pos += len(chunk)


def _tail(fd: int, start: int) -> tuple[int, int]:
    """(lines, bytes) of an open file from ``start`` to its end, streamed."""
    lines = size = 0
    last = b"\n"
    pos = start
    while True:
        chunk = os.pread(fd, READ_CHUNK, pos)
        if not chunk:
            break
        lines += chunk.count(b"\n")
        size += len(chunk)
        last = chunk[-1:]
        pos += len(chunk)
    return lines + (1 if last != b"\n" else 0), size


def _fingerprint(st: os.stat_result) -> tuple:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def file_state(path: str | Path) -> tuple[int, int] | None:
    """(size, mtime_ns) of a file, None when it cannot be stat'ed: the settle
    check compares it before and after ``SETTLE_SECONDS`` of quiet."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_size, st.st_mtime_ns


def settle_seconds(state: tuple[int, int] | None, meta: dict | None, settle: float = SETTLE_SECONDS) -> float:
    """How long apply watches the original (``state``: its ``file_state``)
    before reading it: ``settle``, or, when it has grown past the snapshot
    and last changed less than ``LIVE_QUIET_SECONDS`` ago, until it has been
    quiet that long. ``settle`` 0 (the caller watched it) stays 0."""
    if not settle or state is None or meta is None or state[0] <= meta["size"]:
        return settle
    age = time.time() - state[1] / 1e9
    return round(min(LIVE_QUIET_SECONDS, max(settle, LIVE_QUIET_SECONDS - age)), 3)


def being_written(orig: Path, settle: float) -> SurgeryError:
    """The refusal of a settle check that saw the original change."""
    return SurgeryError(
        f"{orig.name} is being written right now (it changed during a {settle * 1000:.0f} ms settle check): "
        "a live Claude Code is appending; stop it (or wait) and apply again")


def _refuse_changed(orig: Path, when: str) -> SurgeryError:
    return SurgeryError(f"{orig.name} changed {when}: a live Claude Code is appending; "
                        "nothing was changed: stop it and apply again")


def _missing_sidecars(orig: Path, data: bytes) -> set[str]:
    """The sidecar paths ``data``'s markers name that are not on disk."""
    from txdb.model import sidecar
    return sidecar.missing_referenced(data, orig, session_stem(orig))


def _check_sidecars(orig: Path, had_missing: set[str], new: bytes, *, what: str = "the pending copy",
                    advice: str = "run the pass that wrote it again (txdb snapshot --refresh first)") -> None:
    """Refuse a file about to take the session's place (``what``: the pending
    copy, or the backup undo restores) whose markers point at a sidecar not
    on disk (unless the session already pointed at it: ``had_missing``)."""
    missing = _missing_sidecars(orig, new) - had_missing
    if missing:
        first = sorted(missing)[0]
        raise SurgeryError(f"{what} refers to a sidecar that is not on disk: {first}"
                           + (f" (+{len(missing) - 1} more)" if len(missing) > 1 else "")
                           + f"; {advice}")


def digest(fd: int, size: int) -> tuple[str, int]:
    """(sha256, lines) of an open file's first ``size`` bytes, streamed."""
    h = hashlib.sha256()
    lines, last = 0, b"\n"
    for chunk in _read_range(fd, size):
        h.update(chunk)
        lines += chunk.count(b"\n")
        last = chunk[-1:]
    return h.hexdigest(), lines + (1 if size and last != b"\n" else 0)


def apply(path: str | Path, *, dry_run: bool = False, backup: bool = True,
          settle: float = SETTLE_SECONDS, rows: list[dict] | None = None,
          journal_entries: list[dict] | None = None, settled: tuple[int, int] | None = None) -> ApplyReport:
    """Swap the pending copy in for the original, after every check. See the module doc.

    ``rows``: the ``surgeries`` rows the swap journal records for it
    (default: one per recorded pass); ``journal_entries``: the journal's
    entries to keep before it (``log.catch_up``; default all); ``settled``:
    the original's ``file_state`` at the end of a settle check the caller
    made (``select.apply_all``), which it must still have."""
    orig = own_session_path(path)
    pend = pending_path(orig)
    if not orig.is_file():
        raise SurgeryError(f"no session file at {orig}")
    check_pending_kind(orig)
    if not pend.is_file():
        raise SurgeryError(f"no pending copy for {orig.name}: a surgery command (strip-*, persist-*, compact-range, ...) makes one first")
    meta = read_meta(orig)
    if meta is None:
        raise unreadable_meta(orig)
    if not dry_run:
        clean_stale_temps(orig.parent)
    st1 = settled if settled is not None else file_state(orig)
    wait = 0.0 if settled is not None else settle_seconds(st1, meta, settle)
    time.sleep(wait)
    if file_state(orig) != st1:
        raise being_written(orig, wait or settle)
    # The two files are never held at once: the original's side of every
    # check is taken first (its verify report, chain and missing sidecars),
    # then its bytes go and the pending copy is read.
    size = meta["size"]
    with open_regular(orig) as fh:
        data = fh.read(size)  # the snapshot's part; what was appended after it is only counted
        discarded_lines, discarded_bytes = _tail(fh.fileno(), len(data))
        seen = os.fstat(fh.fileno())
    if seen.st_size != len(data) + discarded_bytes:
        raise _refuse_changed(orig, "while apply read it")
    if (seen.st_size, seen.st_mtime_ns) != st1:
        raise being_written(orig, wait or settle)  # changed after the settle, before the read: still live
    check_descends(orig, meta, data)
    from txdb.model.verify import verify_transcript  # apply's check: a pass that only writes the copy loads no verify

    original = Transcript.from_bytes(data, orig)
    before = verify_transcript(original)
    original_chain = gate.original_chain(original)
    had_missing = _missing_sidecars(orig, data)
    del original, data
    new = read_pending(orig, meta)
    whole = complete_prefix(new)
    if whole != len(new):
        raise SurgeryError(
            f"the pending copy {pend.name} ends in an unfinished line ({len(new) - whole:,} bytes after its last "
            f"newline): it was cut short; run `txdb snapshot --refresh {orig}` and redo the surgery")
    result = Transcript.from_bytes(new, pend)
    gate.check_chain(original_chain, result, gate.recorded_removals(meta), what="the pending copy")
    _check_sidecars(orig, had_missing, new)
    after = verify_transcript(result)
    del result
    added = new_errors(before, after)
    if added:
        raise SurgeryError(f"the pending copy fails verify where the original did not: {added[0]}"
                           + (f" (+{len(added) - 1} more)" if len(added) > 1 else ""))
    report = ApplyReport(str(orig), str(pend), dry_run, None, seen.st_size, len(new), discarded_lines,
                         discarded_bytes, before.counts()["error"], after.counts()["error"], False,
                         list(meta.get("passes") or []), sha256(new), settled_seconds=wait)
    if dry_run:
        return report
    _step("checked")
    if _fingerprint(os.stat(orig)) != _fingerprint(seen):
        raise _refuse_changed(orig, "while apply was checking it")
    owner = owner_of(seen)
    mode = stat.S_IMODE(seen.st_mode)
    bak = None
    old = open_fd(orig)  # the old inode: what it holds at the rename is what is discarded

    def last_check():
        _step("temp")
        if _fingerprint(os.stat(orig)) != _fingerprint(seen) or _fingerprint(os.fstat(old)) != _fingerprint(seen):
            raise _refuse_changed(orig, "while apply was writing the new file")
        _step("renaming")

    try:
        if backup:
            bak = next_backup(orig)
            try:
                os.link(orig, bak)  # the original inode itself: instant, whole, same owner and mode
            except OSError:
                # a copy of the bytes checked, read again from the old inode (last_check holds it unchanged)
                write_atomic(bak, _read_range(old, seen.st_size), mode=mode, owner=owner)
            report.backup = str(bak)
        _step("backup")
        bak_sha, bak_lines = digest(old, seen.st_size) if bak is not None else (None, None)
        entry = journal.entry(orig, "apply", backup=report.backup,
                              backup_size=None if bak is None else seen.st_size, backup_sha256=bak_sha,
                              backup_lines=bak_lines, result_size=len(new), result_sha256=report.result_sha256,
                              rows=rows if rows is not None else journal.pass_rows(report.passes))
        previous = None
        try:
            previous = journal.record(orig, entry, journal_entries)  # durable before the rename
            write_atomic(orig, new, mode=mode, owner=owner, before_replace=last_check)
        except BaseException:
            if _fingerprint(os.stat(orig))[:2] != _fingerprint(seen)[:2]:
                raise  # the rename happened (interrupted after it): the journal and backup stand
            if previous is not None:
                journal.take_back(orig, previous)
            if bak is not None:
                try:
                    os.unlink(bak)  # a link to (or copy of) the untouched original
                except OSError:
                    pass
            raise
        report.swap, report.entry = entry["id"], entry
        _step("swapped")
        report.discarded_lines, report.discarded_bytes = _tail(old, size)
        report.size_before = size + report.discarded_bytes
    finally:
        os.close(old)
    for p in (pend, meta_path(orig)):
        try:
            os.unlink(p)
        except OSError:
            pass
    report.applied = True
    return report
