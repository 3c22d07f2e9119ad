"""One txdb command at a time on a session.

A pass reads the pending copy (or the session), changes it in memory and
writes the copy back; two passes at once would each write a copy without
the other's change, and the surgeries log would list both. So every
command that writes a session's pending copy, its backups or the session
itself (a surgery pass, ``apply``, ``undo``, ``snapshot``) holds an
exclusive ``flock`` on the session file while it works. Claude Code takes
no lock, so its appends are never held up (the settle and descent checks
deal with those); a second txdb command on the same session is refused at
once rather than left waiting on positions the first may move. The lock
goes with the process: a killed txdb leaves none behind.

A flock belongs to an inode, and ``apply`` and ``undo`` put a new inode at
the session path. So the new file is locked too before it is renamed into
place (``write_atomic`` calls ``lock_replacement`` on its temp file) and
stays locked until the command ends: the session path is never an unlocked
file while a command still works on it. A lock won on an inode that has
meanwhile been renamed away is let go and taken again on the file now there.
"""

from __future__ import annotations

import errno
import fcntl
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from txdb.errors import SurgeryError
from txdb.model.paths import is_session_path
from txdb.model.regular import open_fd


_NO_LOCKS = {errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EINVAL}
_ATTEMPTS = 3  # a lock won on a replaced inode is taken again this many times at most

# session path (real) -> the descriptors this process holds its lock through
# (the session file as opened, then every file written in its place).
_held: dict[str, list[int]] = {}


def _busy(path: Path) -> SurgeryError:
    return SurgeryError(f"another txdb command is working on {path.name} right now (a surgery pass, "
                        f"apply or undo); run this one again when it has finished")


def _same_file(fd: int, path: Path) -> bool:
    try:
        a, b = os.fstat(fd), os.stat(path)
    except OSError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


@contextmanager
def session_lock(session: str | Path) -> Iterator[None]:
    """Hold the lock of ``session`` for the block. Only a session file is ever
    locked for writing: a backup or a pending copy (also reached through a link
    named like a session) is refused here, whoever the caller is."""
    path = Path(session)
    if not is_session_path(path) or not is_session_path(os.path.realpath(path)):
        raise SurgeryError(f"{path} is not a session file (a backup, a pending copy or another file): "
                           f"txdb never changes it")
    key = os.path.realpath(path)
    fds: list[int] = []
    try:
        for _ in range(_ATTEMPTS):
            try:
                fd = open_fd(path)
            except FileNotFoundError:
                raise SurgeryError(f"no session file at {path}") from None
            fds.append(fd)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise _busy(path) from None
            except OSError as e:
                if e.errno not in _NO_LOCKS:
                    raise
                # A filesystem without flock (some network mounts): go on unlocked, as
                # before this lock existed; every other check still holds.
                break
            if _same_file(fd, path):
                _held[key] = fds  # locked: later replacements of the file are locked too
                break
            # Won on a file another command has just renamed away: try the one now there.
            os.close(fds.pop())
        else:
            raise _busy(path)
        yield
    finally:
        if _held.get(key) is fds:
            del _held[key]
        for fd in fds:
            os.close(fd)


def lock_replacement(path: str | Path, fd: int) -> None:
    """``fd`` is a new file about to be renamed onto ``path``: when this
    process holds ``path``'s session lock, lock the new file too and keep it
    locked for as long as that lock is held."""
    fds = _held.get(os.path.realpath(path))
    if fds is None:
        return
    dup = os.dup(fd)  # outlives the writer's own descriptor; the lock is on the file, shared by both
    try:
        fcntl.flock(dup, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BaseException:
        os.close(dup)
        raise
    fds.append(dup)
