"""Making a rename survive a crash: the one directory fsync.

A file's own fsync makes its bytes durable; the rename that publishes it
(a session's atomic write, the catalog's first-build publish) lives in the
folder, which needs its own fsync.
"""

from __future__ import annotations

import os
from pathlib import Path


def fsync_dir(folder: str | Path) -> None:
    """fsync a folder so a rename or create inside it is on disk. Best effort:
    a folder that cannot be opened or synced (some filesystems refuse) is left."""
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


FSYNC_THREADS = 16


def fsync_all(fds: list[int]) -> None:
    """fsync many open files, together: from threads, so that the filesystem
    commits them in a few journal flushes rather than one flush per file
    (ext4 and xfs group concurrent fsyncs; one after another, each waits for
    its own). Returns once every file is on disk; the first error is raised."""
    if len(fds) < 2:
        for fd in fds:
            os.fsync(fd)
        return
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(min(FSYNC_THREADS, len(fds))) as pool:
        for done in [pool.submit(os.fsync, fd) for fd in fds]:
            done.result()
