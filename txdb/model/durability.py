"""Writing a file whole or not at all, and making the rename survive a crash.

A file's own fsync makes its bytes durable; the rename that publishes it
(a session's atomic write, the catalog's first-build publish) lives in the
folder, which needs its own fsync. Every temp file txdb writes is named by
``temp_file`` (with the writer's pid), so ``clean_stale_temps`` can remove
those a killed run left behind; ``prefix_sha256`` says whether a file still
begins with the bytes a write left there. ``open_dir`` and ``temp_file_at``
are the same writes relative to a folder's descriptor, never through a
link (sidecars: ``sidecar.write``).
"""

from __future__ import annotations

import hashlib
import os
import re
import threading
from pathlib import Path
from typing import Any, Iterable

from txdb.model.lock import lock_replacement
from txdb.model.regular import open_regular

FILE_MODE = 0o600
HASH_CHUNK = 1 << 18


def fsync_dir(folder: str | Path | int) -> None:
    """fsync a folder (a path, or a descriptor ``open_dir`` gave) so a rename
    or create inside it is on disk. Best effort: a folder that cannot be
    opened or synced (some filesystems refuse) is left."""
    if isinstance(folder, int):
        try:
            os.fsync(folder)
        except OSError:
            pass
        return
    try:
        fd = os.open(str(folder), os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
NEW_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


def open_dir(name: str, dir_fd: int, create: bool = False, made: list[str] | None = None) -> int:
    """A descriptor of the folder ``name`` (in the folder ``dir_fd``), never
    through a symlink at that name (``O_NOFOLLOW``: a link, or a file, there is
    ``NotADirectoryError``). ``create``: made first when missing (0700, the
    parent fsynced; its name added to ``made``). Every file created through
    it stays in that folder however its path is renamed or swapped meanwhile."""
    new = False
    if create:
        try:
            os.mkdir(name, 0o700, dir_fd=dir_fd)
            new = True
            if made is not None:
                made.append(name)
        except FileExistsError:
            pass  # there already (or another txdb made it just now)
    fd = os.open(name, DIR_FLAGS, dir_fd=dir_fd)
    if new:
        fsync_dir(dir_fd)
    return fd


def prefix_sha256(orig: Path, size: int) -> str | None:
    """sha256 of the file's first ``size`` bytes, read in chunks; None when it is shorter."""
    h = hashlib.sha256()
    view = memoryview(bytearray(HASH_CHUNK))
    left = size
    with open_regular(orig, buffering=0) as fh:
        while left > 0:
            n = fh.readinto(view[:min(HASH_CHUNK, left)])
            if not n:
                return None
            h.update(view[:n])
            left -= n
    return h.hexdigest()


TEMP_SUFFIX = ".txdb-tmp"
# ".<target name>.<writer pid>.<random>.txdb-tmp": the pid says whether the writer still runs.
_TEMP_RE = re.compile(r"^\..+\.(\d+)\.[A-Za-z0-9_]+" + re.escape(TEMP_SUFFIX) + "$")


_TEMP_FLAGS = os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0)


def temp_file(path: Path) -> tuple[int, str]:
    """(descriptor, name) of a new temp file beside ``path`` (mode 0600,
    created exclusively, as ``tempfile.mkstemp`` makes one, without its
    imports and per-call work: compact-range makes thousands), named so that
    ``clean_stale_temps`` removes it once its writer is gone: every temp
    file txdb writes (session copies; sidecars through ``temp_file_at``) is made here."""
    folder = os.fspath(path.parent)
    head = f".{path.name}.{os.getpid()}."
    for _ in range(100):
        name = os.path.join(folder, head + os.urandom(6).hex() + TEMP_SUFFIX)
        try:
            return os.open(name, _TEMP_FLAGS, FILE_MODE), name
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temp file name beside {path}")


def temp_file_at(dir_fd: int, name: str, mode: int = FILE_MODE) -> tuple[int, str]:
    """``temp_file`` in the folder ``dir_fd`` (``open_dir``): (descriptor, the
    temp file's name in that folder), created new (``O_EXCL``, ``O_NOFOLLOW``),
    never through a link."""
    while True:
        tmp = f".{name}.{os.getpid()}.{os.urandom(6).hex()}{TEMP_SUFFIX}"
        try:
            return os.open(tmp, NEW_FILE_FLAGS, mode, dir_fd=dir_fd), tmp
        except FileExistsError:
            continue


_O_TMPFILE = getattr(os, "O_TMPFILE", 0)
_PROC_FD = "/proc/self/fd"


def nameless_file_at(dir_fd: int, mode: int = FILE_MODE) -> int | None:
    """A new file in the folder ``dir_fd`` with no name yet (Linux ``O_TMPFILE``):
    nothing to clean after a kill, and about 4x faster to make than a named
    temp file (7,600 files: 1.1 s against 4.8 s); ``link_nameless`` names it.
    None where the system or filesystem has none (take ``temp_file_at``)."""
    if not _O_TMPFILE or not os.path.isdir(_PROC_FD):
        return None
    try:
        return os.open(".", os.O_WRONLY | _O_TMPFILE | getattr(os, "O_CLOEXEC", 0), mode, dir_fd=dir_fd)
    except OSError:
        return None


def link_nameless(fd: int, dir_fd: int, name: str) -> None:
    """Give a ``nameless_file_at`` file ``name`` in ``dir_fd``: never replaces a
    file there (``FileExistsError``), never follows a link at ``name``."""
    os.link(f"{_PROC_FD}/{fd}", name, dst_dir_fd=dir_fd, follow_symlinks=True)


def owner_of(st: os.stat_result) -> tuple[int, int] | None:
    """(uid, gid) to give files written for this one: only root can (and must)
    hand them back to the session's owner; anyone else writes as themselves."""
    return (st.st_uid, st.st_gid) if os.geteuid() == 0 else None


def write_atomic(path: str | Path, data: bytes | Iterable[bytes], mode: int = FILE_MODE,
                 before_replace=None, owner: tuple[int, int] | None = None) -> None:
    """Write ``data`` (bytes, or pieces streamed one by one, e.g.
    ``Transcript.chunks()``) to ``path`` whole or not at all: temp file in the same
    folder, fsync, one rename, fsync of the folder. Mode 0600 unless given;
    ``owner`` (uid, gid) is set on the temp file before the rename.
    ``before_replace`` runs between the fsync and the rename; an exception
    it raises leaves ``path`` as it was and no temp file behind. When this
    process holds ``path``'s session lock the new file is locked as well
    (``lock.lock_replacement``)."""
    path = Path(path)
    fd, tmp = temp_file(path)
    try:
        if owner is not None:
            os.fchown(fd, *owner)
        os.fchmod(fd, mode)
        lock_replacement(path, fd)  # a session's new file is locked before it takes the name
        with os.fdopen(fd, "wb") as fh:
            if isinstance(data, (bytes, bytearray, memoryview)):
                fh.write(data)
            else:
                for piece in data:
                    fh.write(piece)
            fh.flush()
            os.fsync(fh.fileno())
        if before_replace is not None:
            before_replace()
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    fsync_dir(path.parent)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # exists, owned by someone else
    return True


def clean_stale_temps(folder: str | Path | int) -> list[str]:
    """Remove temp files an earlier txdb run left in ``folder`` (a path, or a
    descriptor ``open_dir`` gave: then removed relative to it) when it was
    killed mid-write: only names of ``temp_file``'s own pattern whose
    writer process is gone. Returns the names removed."""
    removed: list[str] = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return removed
    at = folder if isinstance(folder, int) else None
    for e in entries:
        m = _TEMP_RE.match(e.name)
        if m is None or not e.is_file(follow_symlinks=False):
            continue
        pid = int(m.group(1))
        if pid == os.getpid() or _pid_alive(pid):
            continue
        try:
            os.unlink(e.name if at is not None else e.path, dir_fd=at)
            removed.append(e.name)
        except OSError:
            pass
    return removed


FSYNC_THREADS = 16
_jobs: Any = None  # the fsync threads' queue: (descriptor, batch)
_threads = 0  # how many serve it


class _Batch:
    """One ``fsync_all`` call: how many of its files are left, the first error."""

    def __init__(self, n: int):
        self.left = n
        self.error: BaseException | None = None
        self.lock = threading.Lock()
        self.done = threading.Event()

    def finished(self, error: BaseException | None) -> None:
        with self.lock:
            if error is not None and self.error is None:
                self.error = error
            self.left -= 1
            if self.left == 0:
                self.done.set()


def _fsync_worker(jobs) -> None:
    while True:
        fd, batch = jobs.get()
        try:
            os.fsync(fd)
        except BaseException as e:  # handed to the caller, which raises it
            batch.finished(e)
        else:
            batch.finished(None)


def fsync_all(fds: list[int]) -> None:
    """fsync many open files, together: from threads, so that the filesystem
    commits them in a few journal flushes rather than one flush per file
    (ext4 and xfs group concurrent fsyncs; one after another, each waits for
    its own). The threads are started once per process (no more than a
    call has files) and serve every later call (a pass writes its sidecars
    in several batches); plain threads and a queue (concurrent.futures
    would cost a pass ~4 ms of imports). Returns once every file is on
    disk; the first error is raised."""
    global _jobs, _threads
    if len(fds) < 2:
        for fd in fds:
            os.fsync(fd)
        return
    if _jobs is None:
        import queue

        _jobs, _threads = queue.SimpleQueue(), 0
    while _threads < min(len(fds), FSYNC_THREADS):  # as many as the batch can use, started once
        threading.Thread(target=_fsync_worker, args=(_jobs,), name=f"txdb-fsync-{_threads}", daemon=True).start()
        _threads += 1
    batch = _Batch(len(fds))
    for fd in fds:
        _jobs.put((fd, batch))
    batch.done.wait()
    if batch.error is not None:
        raise batch.error
