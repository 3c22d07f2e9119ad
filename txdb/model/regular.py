"""Opening a file txdb reads: a regular file only, never waiting on one.

A FIFO (or a device, a socket) can sit at any name txdb opens: a session
file, a sidecar, a summaries or transcripts file. ``open()`` on a FIFO waits
for a writer, forever, holding whatever txdb holds then (a session lock,
the watcher). Everything that opens such a file opens it here: without
blocking (``O_NONBLOCK``), then checked with ``fstat`` on the open file
(no window between a check and the open), and refused as
``NotRegularFile``, an ``OSError`` naming what the file is, so every
caller's handling of an unreadable file names it and goes on.

That holds for every file txdb opens in a session's folder, its own ones
included (the swap journal, the snapshot record, the pending copy, the
backups), since anyone who can write there may have put anything at those
names: txdb's own small files are read with ``read_regular``, which also
refuses a file over a size limit (``TooLarge``) rather than reading it.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
from typing import BinaryIO

_KINDS = (
    (stat.S_ISLNK, "a symlink"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISDIR, "a folder"), (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
)


class NotRegularFile(OSError):
    """The path names something other than a regular file."""

    def __init__(self, path, mode: int):
        super().__init__(None, f"{kind(mode)}, not a regular file", str(path))
        self.mode = mode


class TooLarge(OSError):
    """The file is larger than any txdb writes at that name."""

    def __init__(self, path, size: int, limit: int):
        super().__init__(errno.EFBIG, f"{size:,} bytes, over the {limit:,} bytes txdb ever writes there", str(path))


def kind(mode: int) -> str:
    """What a file of ``mode`` is, in words (``a FIFO``)."""
    for test, name in _KINDS:
        if test(mode):
            return name
    return "a regular file" if stat.S_ISREG(mode) else "not a file"


def open_fd(path, dir_fd: int | None = None, follow: bool = True) -> int:
    """A read-only descriptor of the regular file at ``path`` (in the folder
    ``dir_fd`` when given); NotRegularFile for anything else, at once.
    Symlinks are followed unless ``follow`` is False: then a symlink at
    ``path`` is ``NotRegularFile`` too (a sidecar must be a file in its folder)."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags, dir_fd=dir_fd)
    except OSError as e:
        if follow or e.errno != errno.ELOOP:
            raise
        st = os.lstat(path, dir_fd=dir_fd)
        if not stat.S_ISLNK(st.st_mode):
            raise
        raise NotRegularFile(path, st.st_mode) from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotRegularFile(path, mode)
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_regular(path, buffering: int = -1, dir_fd: int | None = None, follow: bool = True) -> BinaryIO:
    """``open(path, "rb")`` for a regular file only (see ``open_fd``)."""
    return os.fdopen(open_fd(path, dir_fd, follow), "rb", buffering=buffering)


def read_regular(path, limit: int | None = None, dir_fd: int | None = None, follow: bool = True) -> bytes:
    """The bytes of the regular file at ``path`` (see ``open_fd``); with
    ``limit``, ``TooLarge`` for a file over it (checked on the open file, and
    on what the read returns: it may grow meanwhile)."""
    with open_regular(path, dir_fd=dir_fd, follow=follow) as fh:
        if limit is None:
            return fh.read()
        size = os.fstat(fh.fileno()).st_size
        if size > limit:
            raise TooLarge(path, size, limit)
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise TooLarge(path, len(data), limit)
    return data


# The files SQLite keeps beside a database (its rollback journal, its WAL
# and the WAL's index), which it opens by name and reads without a check.
SQLITE_SIDE_SUFFIXES = ("-journal", "-wal", "-shm")


def check_sqlite_side_files(database) -> None:
    """NotRegularFile for the first of a database's SQLite side files that
    is there and is not a regular file (a FIFO there makes SQLite wait
    forever; a symlink or a folder sends its writes elsewhere or fails it)."""
    for suffix in SQLITE_SIDE_SUFFIXES:
        side = f"{os.fspath(database)}{suffix}"
        try:
            mode = os.lstat(side).st_mode
        except (FileNotFoundError, NotADirectoryError):  # not there (a file in its folder's place: said on open)
            continue
        if not stat.S_ISREG(mode):
            raise NotRegularFile(side, mode)
