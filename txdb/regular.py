"""Opening a file txdb reads: a regular file only, never waiting on one.

A FIFO (or a device, a socket) can sit at any name txdb opens: a session
file, a sidecar, a summaries or transcripts file. ``open()`` on a FIFO waits
for a writer, forever, holding whatever txdb holds then (a session lock,
the watcher). Everything that opens such a file opens it here: without
blocking (``O_NONBLOCK``), then checked with ``fstat`` on the open file
(no window between a check and the open), and refused as
``NotRegularFile``, an ``OSError`` naming what the file is, so every
caller's handling of an unreadable file names it and goes on.
"""

from __future__ import annotations

import fcntl
import os
import stat
from typing import BinaryIO

_KINDS = (
    (stat.S_ISFIFO, "a FIFO"), (stat.S_ISDIR, "a folder"), (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
)


class NotRegularFile(OSError):
    """The path names something other than a regular file."""

    def __init__(self, path, mode: int):
        super().__init__(None, f"{kind(mode)}, not a regular file", str(path))


def kind(mode: int) -> str:
    """What a file of ``mode`` is, in words (``a FIFO``)."""
    for test, name in _KINDS:
        if test(mode):
            return name
    return "a regular file" if stat.S_ISREG(mode) else "not a file"


def open_fd(path) -> int:
    """A read-only descriptor of the regular file at ``path`` (symlinks
    followed); NotRegularFile for anything else, at once."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotRegularFile(path, mode)
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_regular(path, buffering: int = -1) -> BinaryIO:
    """``open(path, "rb")`` for a regular file only (see ``open_fd``)."""
    return os.fdopen(open_fd(path), "rb", buffering=buffering)
