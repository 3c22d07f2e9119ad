"""The sidecar contract: where persisted content lives, how it is written,
and the markers that point at it.

Layout, in the session's own folder ``<project-dir>/<sessionId>/`` (for a
subagent transcript ``<sessionId>/subagents/agent-X.jsonl``, the same
``<sessionId>/`` folder)::

    tool-results/<tool_use_id>.txt           shared with Claude Code's own
    persisted/thinking/<msg_uuid>.txt
    persisted/text/<msg_uuid>_<idx>.txt
    persisted/image/<sha256>.txt             image transcripts (migrate-persisted)
    persisted/message/<msg_uuid>.json       persist-message: the message's content;
                                             compact-range: each whole record

Rules (each one here, nowhere else):

- ``safe_name``: a name built from file content (a tool_use id, a uuid, a
  sessionId) is reduced to ``[A-Za-z0-9._-]``, no leading dot, at most
  ``MAX_NAME`` characters; any change adds a short hash of the original so
  two different ids never share a name. ``session_dir`` and ``plan`` also
  check the real path stays inside the session's folder (a symlinked
  ``persisted`` folder is refused).
- ``plan``: decide the path without writing (dry runs plan too): an existing
  file with the same bytes is reused; one with different bytes is never
  touched, the new content gets ``<name>.<sha256[:12]><ext>``. A file this
  pass has already planned counts as existing (``Writes.plan``), so three
  results sharing one tool id get three files.
- ``write``: temp file, fsync, ``link`` to the final name (which fails
  rather than replace anything), folder fsync; in batches, each batch's
  files fsynced together (``durability.fsync_all``) before any is
  linked. Never through a link (``_Folders``): each folder is opened once
  with ``O_NOFOLLOW`` from the one above, every file made, linked and
  removed relative to it, each path checked to still lead to it at the
  end; a symlink at a sidecar's name is never reused (``plan`` opens
  with ``follow=False``). Runs before the pending copy
  that refers to the file is written (``engine.run_surgery`` calls the op's
  ``write_files``), so a pending copy never points at a file not on disk;
  an abandoned pending copy leaves only files nothing live refers to.
- Markers: ``<persisted-{kind}>`` with ``Saved to: PATH (N chars)``,
  ``Summary:``, ``Preview:``; a compacted range's ``<persisted-range from=
  to= count=>`` names its folder, ``Saved to: FOLDER (N files)``, and its
  record lists the files (``RANGE_FIELD``); tool results use Claude Code's
  native ``<persisted-output>`` shape (``Output too large (N). Full output saved
  to: PATH``). PATH is absolute, as Claude Code writes its own: the model's
  Read resolves a relative path against the CLI's working directory, not the
  project folder, so only an absolute path can be read back. A moved
  projects tree is handled by ``resolve`` (the ``<sessionId>/...`` tail under
  the session's current folder) and ``migrate-persisted`` re-points markers.
- ``missing_referenced``: the markers of a file whose sidecar is not on disk
  (apply refuses a pending copy that adds one); ``unreadable_referenced``:
  those the model cannot read at the path written (verify warns).
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

from txdb.model import deep
from txdb.model.durability import (clean_stale_temps, fsync_all, fsync_dir, link_nameless, nameless_file_at, open_dir,
    temp_file_at)
from txdb.errors import SurgeryError
from txdb.model.paths import SESSION_SUFFIX, TOOL_RESULTS, session_folder, session_stem
from txdb.model.records import DROPPED_FIELD  # noqa: F401 (a record's own markers: sidecar.referenced reads them)
from txdb.model.regular import NotRegularFile, kind, open_regular

MAX_NAME = 120
PREVIEW_CHARS = 1024
TOOL_PREVIEW_CHARS = 2000
NO_SUMMARY = "[no summary provided]"
MARKER_PREFIX = "<persisted-"
NATIVE_TOOL_TAG = "persisted-output"
FILE_MODE = 0o600

_SAFE = re.compile(r"[^A-Za-z0-9._-]")
_SAVED = re.compile(r"(?:^|\n)(?:Saved to|Output too large \([^)\n]*\)\. Full output saved to): (.+?)"
                    r"(?: \(\d[\d,]* (?:chars|files?)\))?(?:\n|$)")
RANGE_TAG = "persisted-range"
RANGE_FIELD = "persistedRange"  # a range survivor's record: {"files": [names in the marker's folder]}
_RANGE_HEAD = re.compile(r'<persisted-range from="(\d+)" to="(\d+)" count="(\d+)">')


def safe_name(value: str) -> str:
    """A file name for ``value`` that cannot leave its folder (see module doc)."""
    if not isinstance(value, str):
        value = str(value)
    name = _SAFE.sub("_", value).lstrip(".")
    if name != value or len(name) > MAX_NAME or not name:
        digest = hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:12]
        name = f"{name[:MAX_NAME - 13]}.{digest}" if name else digest
    return name


def session_dir(session_file: str | Path, session_id: str | None = None) -> Path:
    """``<project-dir>/<sessionId>/`` of a session (or subagent) file. The id is
    the file's name (``claude -r`` resumes a file by it), never a sessionId
    read from inside the file, which a copied or renamed file may not match;
    ``session_id`` only when there is no such name."""
    p = Path(session_file)
    sid = session_stem(p) if SESSION_SUFFIX in p.name else session_id or p.name
    return session_folder(p, safe_name(sid))


def relative_path(kind: str, key: str, idx: int | None = None) -> str:
    """Path of a sidecar under the session folder, from content-given keys."""
    if kind == "tool":
        return f"{TOOL_RESULTS}/{safe_name(key)}.txt"
    if kind == "thinking":
        return f"persisted/thinking/{safe_name(key)}.txt"
    if kind == "text":
        return f"persisted/text/{safe_name(key)}_{int(idx or 0)}.txt"
    if kind == "image":
        return f"persisted/image/{safe_name(key)}.txt"
    if kind == "message":
        return f"persisted/message/{safe_name(key)}.json"
    raise ValueError(f"unknown sidecar kind {kind!r}")


def _inside(path: Path, root: Path) -> bool:
    try:
        Path(os.path.realpath(path)).relative_to(os.path.realpath(root))
        return True
    except ValueError:
        return False


@dataclass
class Sidecar:
    path: Path          # absolute, inside the session folder
    data: bytes
    reused: bool        # a file with these bytes is already there
    # A file given back from the catalog (restore): its bytes streamed by
    # ``chunks`` instead of ``data`` (never held whole), checked against
    # ``sha256`` and ``size`` as they are written, with its mode and mtime.
    chunks: Callable[[], Iterable[bytes]] | None = None
    size: int | None = None
    sha256: str | None = None
    mode: int | None = None
    mtime_ns: int | None = None
    mismatch: str | None = None  # the error when the bytes do not hash to sha256
    # ``write``'s fstat of the file it wrote, taken before the file had its
    # name (or of the file with these bytes it found there): what it wrote,
    # whatever a writer appends once the name appears
    written: os.stat_result | None = None

    def holds(self, fh) -> bool:
        """The open file ``fh`` has this sidecar's bytes (read in pieces)."""
        if self.chunks is None:
            return fh.read(len(self.data) + 1) == self.data
        h, n = hashlib.sha256(), 0
        while piece := fh.read(1 << 20):
            h.update(piece)
            n += len(piece)
        return n == self.size and h.hexdigest() == self.sha256

    @property
    def chars(self) -> int:
        return len(self.data.decode("utf-8", "replace"))


def plan(sdir: Path, rel: str, data: bytes, planned: dict[Path, bytes] | None = None,
         checked: dict[Path, set[str] | None] | None = None) -> Sidecar:
    """Where ``data`` goes (no write): the name, or an existing file with the same bytes,
    or a new content-addressed name beside a different existing file. ``planned``:
    the files this pass has already planned (path -> bytes), which count as
    existing files; ``checked``: the folders this pass has already checked
    for links (each is checked once; ``write`` opens them without following one),
    with the names each held then: a name not among them is free without
    opening it (a file or link that appears later is caught by ``write``'s
    link, which never replaces one nor follows one). A symlink at a name is
    never a sidecar: the name counts as taken."""
    path = sdir / rel
    folder = path.parent
    if checked is None or folder not in checked:
        _no_links(sdir, folder)
        if checked is not None:
            checked[folder] = _names(folder)
    names = checked.get(folder) if checked is not None else None
    for n in range(2):  # the name, then (only when it is taken) the content-addressed one beside it
        candidate = path if n == 0 else path.with_name(
            f"{path.stem}.{hashlib.sha256(data).hexdigest()[:12]}{path.suffix}")
        held = planned.get(candidate) if planned else None
        if held is not None:
            if held == data:
                return Sidecar(candidate, data, False)
            continue
        if names is not None and candidate.name not in names:
            return Sidecar(candidate, data, False)
        try:
            with open_regular(candidate, follow=False) as fh:
                same = fh.read(len(data) + 1) == data
        except FileNotFoundError:
            return Sidecar(candidate, data, False)
        except NotRegularFile as e:
            if stat.S_ISLNK(e.mode):
                continue  # a link is never a sidecar (nor followed): the name is taken
            raise SurgeryError(f"cannot read the existing sidecar {candidate}: {e.strerror}") from None
        except OSError as e:
            raise SurgeryError(f"cannot read the existing sidecar {candidate}: {e.strerror}") from None
        if same:
            return Sidecar(candidate, data, True)
    raise SurgeryError(f"{path.name}: two different files already hold other content for this block")


def _names(folder: Path) -> set[str] | None:
    """The names in ``folder`` (none when it does not exist yet); None when it
    cannot be listed (each name is then looked up on its own)."""
    try:
        return set(os.listdir(folder))
    except FileNotFoundError:
        return set()
    except OSError:
        return None


def _no_links(sdir: Path, folder: Path) -> None:
    """Refuse when the session folder or a folder below it on the way to
    ``folder`` is a symlink (it could lead out of the session's folder)."""
    p = folder
    while True:
        if p.is_symlink():
            raise SurgeryError(f"refusing to write a sidecar outside {sdir}: {p} is a symlink")
        if p == sdir or p == p.parent:
            return
        p = p.parent


def _mkdirs(folder: Path, made: list[Path]) -> None:
    """Create the folders above a write's root that are missing (a new project
    folder), fsyncing each one's parent: paths outside the session's folder.
    Each one made is added to ``made``."""
    missing = []
    while not folder.exists():
        missing.append(folder)
        folder = folder.parent
    for d in reversed(missing):
        try:
            os.mkdir(d, 0o700)
        except FileExistsError:
            continue
        made.append(d)
        fsync_dir(d.parent)


def _rmdirs(folders: "_Folders", made: list[Path]) -> None:
    """Remove the folders a write made (``_Folders.made``), deepest first,
    each only while empty (``rmdir``: a file another process put in one
    meanwhile keeps it); one below the root relative to its parent's
    descriptor, never through a link. A folder that was there before is
    never among them."""
    for d in sorted(made, key=lambda p: len(p.parts), reverse=True):
        try:
            if folders.sdir in d.parents:
                os.rmdir(d.name, dir_fd=folders.fd(d.parent))
            else:
                os.rmdir(d)
        except (OSError, SurgeryError):
            pass


class _Folders:
    """The folders one ``write`` goes into, each opened once and never through
    a link: the root (``sdir``) from its parent, each folder below it from the
    one above (``durability.open_dir``, ``O_NOFOLLOW``; made when missing).
    Every file is then created, linked and removed relative to those
    descriptors, so a folder renamed or swapped for a symlink while the
    write runs cannot take a file out of the session's folder; ``moved``
    names the folders whose path no longer leads to the one written."""

    def __init__(self, sdir: Path, create: bool = True):
        self.sdir = sdir
        self.create = create
        self.fds: dict[Path, int] = {}
        self.made: list[Path] = []  # the folders this one made (none there before), in order

    def _open(self, name: str, parent_fd: int, path: Path) -> int:
        made: list[str] = []
        try:
            fd = open_dir(name, parent_fd, create=self.create, made=made)
            if made:
                self.made.append(path)
            return fd
        except NotADirectoryError:
            try:
                st = os.lstat(name, dir_fd=parent_fd)
            except OSError:
                st = None
            if st is not None and stat.S_ISLNK(st.st_mode):
                raise SurgeryError(f"refusing to write a sidecar outside {self.sdir}: {path} is a symlink") from None
            raise SurgeryError(f"cannot write in {path}: it is not a folder") from None

    def fd(self, folder: Path) -> int:
        """The descriptor of ``folder`` (``sdir`` or a folder below it)."""
        got = self.fds.get(folder)
        if got is not None:
            return got
        if folder == self.sdir:
            parent = folder.parent
            if self.create:
                _mkdirs(parent, self.made)
            pfd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
            try:
                got = self._open(folder.name, pfd, folder)
            finally:
                os.close(pfd)
        else:
            if self.sdir not in folder.parents:
                raise SurgeryError(f"refusing to write in {folder}: not inside {self.sdir}")
            got = self._open(folder.name, self.fd(folder.parent), folder)
        self.fds[folder] = got
        return got

    def moved(self) -> list[Path]:
        """The folders whose path no longer leads to the folder held (renamed,
        or swapped for a symlink or another folder since they were opened)."""
        out = []
        again = _Folders(self.sdir, create=False)
        try:
            for folder, fd in self.fds.items():
                held = os.fstat(fd)
                try:
                    now = os.fstat(again.fd(folder))
                except (OSError, SurgeryError):
                    out.append(folder)
                    continue
                if (now.st_dev, now.st_ino) != (held.st_dev, held.st_ino):
                    out.append(folder)
        finally:
            again.close()
        return out

    def close(self) -> None:
        for fd in self.fds.values():
            os.close(fd)
        self.fds = {}


WRITE_BATCH = 256  # files open at once while a batch is fsynced together


def write(sdir: Path, sidecars: list[Sidecar], owner: tuple[int, int] | None = None,
          what: str = "a sidecar", made: list[Path] | None = None) -> list[Path]:
    """Write the planned sidecars (each whole or not at all); returns the files it created.

    Each folder is opened once, never through a link (``_Folders``: made
    when missing), and the temp files an earlier killed pass left in it are
    removed; every file below is made relative to those descriptors. A
    reused file (``plan``) is checked again there: a regular file with the
    same bytes (else it is written, or the write refused). Then in batches:
    every file of a batch goes to its temp file, the batch is fsynced
    together (``fsync_all``), then each temp file is linked to its name;
    each folder is fsynced once at the end, and each folder's path must
    still lead to it (a folder moved or swapped meanwhile refuses the
    write). A name only ever points at bytes already on disk, and every
    name is durable before this returns. On any error the files this call
    created are removed again, and the folders it made (``_rmdirs``), and
    ``SurgeryError`` is raised: nothing refers to them yet. ``made``: the
    folders it made are added to it (for ``remove`` to take back later)."""
    created: list[Path] = []
    folders = _Folders(sdir)
    try:
        try:
            for folder in sorted({sc.path.parent for sc in sidecars}):
                clean_stale_temps(folders.fd(folder))  # what a killed pass left here (the session lock is held)
            todo = [sc for sc in sidecars if not sc.reused or not _same_there(folders, sc)]
            for at in range(0, len(todo), WRITE_BATCH):
                _write_batch(folders, todo[at:at + WRITE_BATCH], owner, created)
            # Each folder once, after every link in it: the names are durable
            # before the pending copy that refers to them is written.
            for folder in sorted({p.parent for p in created}):
                fsync_dir(folders.fd(folder))
            moved = folders.moved()
            if moved:
                raise SurgeryError(f"{moved[0]} was moved or replaced while {what} was written in it; "
                                   "nothing was changed")
        except OSError as e:
            _remove_at(folders, created)
            _rmdirs(folders, folders.made)
            raise SurgeryError(f"cannot write {what} in {sdir}: {e.strerror or e}; nothing was changed") from None
        except BaseException:
            _remove_at(folders, created)
            _rmdirs(folders, folders.made)
            raise
    finally:
        folders.close()
    if made is not None:
        made += folders.made
    return created


def _same_there(folders: _Folders, sc: Sidecar) -> bool:
    """A reused file is still a regular file with its bytes, in the folder
    held; False when it is gone (it is written again)."""
    try:
        with open_regular(sc.path.name, dir_fd=folders.fd(sc.path.parent), follow=False) as fh:
            if sc.holds(fh):
                return True
    except FileNotFoundError:
        return False
    except NotRegularFile as e:
        raise SurgeryError(f"{sc.path} is {kind(e.mode)}: a sidecar must be a file in "
                           f"the session's folder; run the command again") from None
    raise SurgeryError(f"{sc.path} changed while writing; run the command again")


def _write_batch(folders: _Folders, batch: list[Sidecar], owner: tuple[int, int] | None,
                 created: list[Path]) -> None:
    temps: list[tuple[Sidecar, int, int, str | None]] = []
    try:
        for sc in batch:
            dfd = folders.fd(sc.path.parent)
            fd = nameless_file_at(dfd, FILE_MODE)  # no temp name to make, link and remove
            if fd is not None:
                tmp = None
            else:
                fd, tmp = temp_file_at(dfd, sc.path.name, FILE_MODE)
            temps.append((sc, dfd, fd, tmp))
            if owner is not None:
                os.fchown(fd, *owner)
            os.fchmod(fd, FILE_MODE if sc.mode is None else sc.mode & 0o777)
            if sc.chunks is None:
                _write_all(fd, sc.data)
            else:
                _write_stream(fd, sc)
            if sc.mtime_ns is not None:
                os.utime(fd, ns=(sc.mtime_ns, sc.mtime_ns))
        fsync_all([fd for _sc, _dfd, fd, _tmp in temps])
        for sc, dfd, fd, tmp in temps:
            sc.written = os.fstat(fd)
            try:
                # never replaces an existing file, never follows a link
                if tmp is None:
                    link_nameless(fd, dfd, sc.path.name)
                else:
                    os.link(tmp, sc.path.name, src_dir_fd=dfd, dst_dir_fd=dfd, follow_symlinks=False)
            except FileExistsError:
                try:
                    with open_regular(sc.path.name, dir_fd=dfd, follow=False) as fh:
                        sc.written = os.fstat(fh.fileno())
                        same = sc.holds(fh)
                except NotRegularFile as e:
                    raise SurgeryError(f"{sc.path} appeared while writing and is {kind(e.mode)}: "
                                       f"a sidecar must be a file in the session's folder; "
                                       f"run the command again") from None
                if not same:
                    raise SurgeryError(f"{sc.path} appeared with other content while writing; "
                                       f"run the command again") from None
                continue
            created.append(sc.path)
    finally:
        for _sc, dfd, fd, tmp in temps:
            os.close(fd)
            if tmp is None:
                continue  # a nameless file is gone with its descriptor unless linked
            try:
                os.unlink(tmp, dir_fd=dfd)
            except OSError:
                pass


def _write_all(fd: int, data: bytes | memoryview) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _write_stream(fd: int, sc: Sidecar) -> None:
    """Write ``sc.chunks()`` piece by piece, hashing as it goes: bytes that
    do not hash to ``sc.sha256`` (the catalog changed since they were
    checked) are never linked. The hashing and writing run on a thread
    while the next pieces are made (both release the GIL), one piece
    waiting at most: the memory stays bounded."""
    assert sc.chunks is not None
    import queue
    import threading

    h, n = hashlib.sha256(), 0
    todo: queue.Queue = queue.Queue(maxsize=1)
    failed: list[BaseException] = []

    def drain() -> None:
        while (piece := todo.get()) is not None:
            if failed:
                continue
            try:
                h.update(piece)
                _write_all(fd, piece)
            except BaseException as e:  # handed to the caller's thread below
                failed.append(e)

    worker = threading.Thread(target=drain, name="txdb-write", daemon=True)
    worker.start()
    try:
        for piece in sc.chunks():
            if failed:
                break
            n += len(piece)
            todo.put(piece)
    finally:
        todo.put(None)
        worker.join()
    if failed:
        raise failed[0]
    if sc.sha256 is not None and (h.hexdigest() != sc.sha256 or n != sc.size):
        raise SurgeryError(sc.mismatch or f"{sc.path}: the bytes written do not match the sha256 they were "
                           "checked against (the catalog changed meanwhile); nothing was changed")


def clean_leftovers(sdir: Path) -> int:
    """Remove the temp files killed passes left anywhere in a session's
    sidecar folder (``durability.clean_stale_temps``: only txdb's own temp
    names whose writer is gone), so a pass of any command cleans what a
    killed pass of another left. Walked by descriptor (``os.fwalk``), never
    through a link; the caller holds the session lock. Returns how many."""
    try:
        st = os.lstat(sdir)
    except OSError:
        return 0
    if not stat.S_ISDIR(st.st_mode):
        return 0
    n = 0
    for _root, _dirs, _files, fd in os.fwalk(sdir, follow_symlinks=False):
        n += len(clean_stale_temps(fd))
    return n


def _remove_at(folders: _Folders, paths: list[Path]) -> None:
    for p in paths:
        try:
            os.unlink(p.name, dir_fd=folders.fd(p.parent))
        except (OSError, SurgeryError):
            pass


def remove(sdir: Path, paths: list[Path], made: Iterable[Path] = ()) -> None:
    """Take back files ``write`` created under ``sdir`` (only ever before
    anything refers to them): each removed relative to its folder, opened
    from ``sdir`` without following a link (a folder swapped for a link
    since is left alone); then the folders it made (its ``made``), each
    while empty."""
    folders = _Folders(sdir, create=False)
    try:
        _remove_at(folders, paths)
        _rmdirs(folders, list(made))
    finally:
        folders.close()


class Writes:
    """What an operation that moves content to sidecars keeps between planning
    and writing (the file hooks of ``surgery.ops.Op``, for an op class that
    also derives from it): ``engine.run_surgery`` calls ``write_files`` after the gate
    and before the pending copy that names them, and ``remove_files`` when
    writing that copy failed."""

    sdir: Path | None = None

    def __init__(self, shared: "Writes | None" = None):
        self.sidecars: list[Sidecar] = []
        self.created: list[Path] = []
        self._planned: dict[Path, bytes] = {}
        self._checked: dict[Path, set[str] | None] = {}
        # An op run inside another (rescue's steps): the names the pass has
        # planned are the outer op's, so two steps never plan one name twice.
        self.shared = shared

    def plan_files(self, sdir: Path) -> None:
        """Start a pass: nothing planned yet, files go under ``sdir``."""
        self.sdir = sdir
        self.sidecars = []
        self._planned = self.shared._planned if self.shared is not None else {}
        self._checked = {}

    def plan(self, rel: str, data: bytes) -> Sidecar:
        """``plan`` for this pass: a name it already gave other bytes is taken too."""
        return plan(self.sdir, rel, data, self._planned, self._checked)

    def add(self, side: Sidecar) -> None:
        """Keep a planned file for ``write_files`` (once per path: the same bytes
        planned again, as for a repeated tool result, are one file)."""
        if side.path not in self._planned:
            self._planned[side.path] = side.data
            self.sidecars.append(side)

    def write_files(self, owner: tuple[int, int] | None = None) -> int:
        self.created = write(self.sdir, self.sidecars, owner) if self.sidecars else []
        return len(self.created)

    def remove_files(self) -> None:
        if self.created:
            remove(self.sdir, self.created)


# -- markers -------------------------------------------------------------------

def preview(text: str, limit: int = PREVIEW_CHARS) -> str:
    if len(text) <= limit:
        return text
    cut = text[:limit]
    nl = cut.rfind("\n")
    return (cut[:nl] if nl > limit // 2 else cut) + "\n..."


def human_size(n: int) -> str:
    """Claude Code's size wording ("55.3KB")."""
    if n < 1024:
        return f"{n} bytes"
    for unit in ("KB", "MB", "GB"):
        n /= 1024
        if n < 1024 or unit == "GB":
            s = f"{n:.1f}".rstrip("0").rstrip(".")
            return f"{s}{unit}"
    return f"{n}"


def marker(kind: str, path: Path, chars: int, summary: str | None, body_preview: str) -> str:
    """The ``<persisted-{kind}>`` marker (kind: thinking, text, message, image)."""
    return (f"<persisted-{kind}>\nSaved to: {path} ({chars:,} chars)\nSummary: {summary or NO_SUMMARY}\n\n"
            f"Preview:\n{body_preview}\n</persisted-{kind}>")


def range_marker(frm: int, to: int, folder: Path, summary: str | None, preview_lines: list[str],
                 count: int) -> str:
    """The ``<persisted-range>`` marker of positions ``frm``..``to`` (``count``
    records, one file each in ``folder``); ``preview_lines``: the first
    messages, one line each."""
    more = count - len(preview_lines)
    lines = preview_lines + ([f"[... {more} more]"] if more > 0 else [])
    return (f'<{RANGE_TAG} from="{frm}" to="{to}" count="{count}">\nSaved to: {folder} ({count} '
            f'{"file" if count == 1 else "files"})\nSummary: {summary or NO_SUMMARY}\n\nPreview:\n'
            + "\n".join(lines) + f"\n</{RANGE_TAG}>")


_SUMMARY_LINE = re.compile(r"\nSummary: [^\n]*\n")


def with_summary(marker_text: str, summary: str) -> str:
    """A marker with its (first) ``Summary:`` line replaced."""
    return _SUMMARY_LINE.sub(lambda _m: f"\nSummary: {summary}\n", marker_text, count=1)


def range_head(text) -> tuple[int, int, int] | None:
    """(from, to, count) of a ``<persisted-range>`` marker text, else None."""
    if not isinstance(text, str):
        return None
    m = _RANGE_HEAD.match(text.lstrip())
    return (int(m.group(1)), int(m.group(2)), int(m.group(3))) if m else None


def tool_marker(path: Path, size: int, text: str, summary: str | None) -> str:
    """Claude Code's own persisted tool-result shape (plus a Summary line when one is given)."""
    head = f"<{NATIVE_TOOL_TAG}>\nOutput too large ({human_size(size)}). Full output saved to: {path}\n"
    if summary:
        head += f"Summary: {summary}\n"
    return head + f"\nPreview (first 2KB):\n{preview(text, TOOL_PREVIEW_CHARS)}\n</{NATIVE_TOOL_TAG}>"


def is_marker(text) -> bool:
    """Already persisted (ours or Claude Code's own): skipped by every persist command."""
    return isinstance(text, str) and text.lstrip().startswith(MARKER_PREFIX)


def marker_paths(text: str) -> list[str]:
    """The sidecar paths a marker text names."""
    if MARKER_PREFIX not in text:
        return []
    return [m.group(1).strip() for m in _SAVED.finditer(text)]


def resolve(path_text: str, session_file: str | Path, session_id: str | None) -> Path | None:
    """Where the sidecar a marker names is now (a range marker's folder too):
    its path, or (a moved projects tree) the part from the session folder's
    name on, under the session's current folder. None when neither exists."""
    p = Path(path_text).expanduser()
    if p.is_absolute() and _present(p):
        return p
    sdir = session_dir(session_file, session_id)
    parts = p.parts
    if sdir.name in parts:
        tail = parts[len(parts) - 1 - parts[::-1].index(sdir.name) + 1:]
        cand = sdir.joinpath(*tail) if tail else None
        if cand is not None and _present(cand) and _inside(cand, sdir):
            return cand
    if not p.is_absolute():
        cand = Path(session_file).parent / p
        if _present(cand):
            return cand
    return None


def _present(p: Path) -> bool:
    """A sidecar file, or the folder a range marker names."""
    return p.is_file() or (p.name == "message" and p.is_dir())


def referenced(data: bytes) -> set[str]:
    """Every sidecar path named by a marker in ``data`` (a session file's bytes):
    in message content, or anywhere else in a record (an older survivor kept
    its marker as a system record's content). Only lines holding a marker are parsed."""
    from txdb.model.lines import parse_line
    out: set[str] = set()
    needle = MARKER_PREFIX.encode()
    start = 0
    while True:
        at = data.find(needle, start)
        if at < 0:
            return out
        ls = data.rfind(b"\n", 0, at) + 1
        le = data.find(b"\n", at)
        le = len(data) if le < 0 else le
        for _s, _l, obj in parse_line(data[ls:le]).objects:
            for s in deep.strings(obj):
                paths = marker_paths(s)
                out.update(paths)
                if range_head(s) is not None and paths:
                    out.update(range_files(obj, paths[0]))
        start = le + 1


def range_files(obj, folder: str) -> list[str]:
    """The saved files a range survivor lists (``persistedRange.files``) as paths
    in the marker's folder; a name that is not a plain file name is ignored."""
    rng = obj.get(RANGE_FIELD) if isinstance(obj, dict) else None
    names = rng.get("files") if isinstance(rng, dict) else None
    if not isinstance(names, list):
        return []
    return [str(Path(folder) / n) for n in names if isinstance(n, str) and n and safe_name(n) == n]


def reachable(data: bytes, session_file: str | Path, session_id: str | None) -> set[Path]:
    """The sidecar files on disk ``data``'s markers name, and those the files
    they name name in turn (a compacted record saved whole keeps the marker of
    a block an earlier pass persisted): every saved file ``data`` leads to."""
    out: set[Path] = set()
    todo = [data]
    while todo:
        for p in referenced(todo.pop()):
            where = resolve(p, session_file, session_id)
            if where is None or not where.is_file() or where in out:
                continue
            out.add(where)
            if where.suffix == ".json":
                try:
                    with open_regular(where) as fh:
                        todo.append(fh.read())
                except OSError:
                    pass
    return out


def missing_referenced(data: bytes, session_file: str | Path, session_id: str | None) -> set[str]:
    return {p for p in referenced(data) if resolve(p, session_file, session_id) is None}


def unreadable_referenced(data: bytes, session_file: str | Path,
                          session_id: str | None) -> tuple[list[str], list[str]]:
    """The marker paths of ``data`` that the model cannot read back as
    written: (found under the session's current folder, so `migrate-persisted`
    re-points them; found nowhere)."""
    moved: list[str] = []
    missing: list[str] = []
    for p in sorted(referenced(data)):
        as_written = Path(p).expanduser()
        if as_written.is_absolute() and _present(as_written):
            continue
        (missing if resolve(p, session_file, session_id) is None else moved).append(p)
    return moved, missing
