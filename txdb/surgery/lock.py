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
"""

from __future__ import annotations

import errno
import fcntl
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from ..errors import SurgeryError
from ..ingest.discover import is_session_path


_NO_LOCKS = {errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EINVAL}


@contextmanager
def session_lock(session: str | Path) -> Iterator[None]:
    """Hold the lock of ``session`` for the block. Only a session file is ever
    locked for writing: a backup or a pending copy (also reached through a link
    named like a session) is refused here, whoever the caller is."""
    path = Path(session)
    if not is_session_path(path) or not is_session_path(os.path.realpath(path)):
        raise SurgeryError(f"{path} is not a session file (a backup, a pending copy or another file): "
                           f"txdb never changes it")
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise SurgeryError(f"no session file at {path}") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise SurgeryError(f"another txdb command is working on {path.name} right now (a surgery pass, "
                               f"apply or undo); run this one again when it has finished") from None
        except OSError as e:
            if e.errno not in _NO_LOCKS:
                raise
            # A filesystem without flock (some network mounts): go on unlocked, as
            # before this lock existed; every other check still holds.
        yield
    finally:
        os.close(fd)
