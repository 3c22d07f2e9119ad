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
