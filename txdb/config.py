"""Where sessions and the catalog live."""

from __future__ import annotations

import os
from pathlib import Path


def claude_config_dir() -> Path:
    value = os.environ.get("CLAUDE_CONFIG_DIR")
    if value:
        return Path(value).expanduser()
    return Path.home() / ".claude"


def projects_roots(roots: tuple[str, ...] | list[str] | None = None) -> list[Path]:
    """The folders to discover sessions in: ``--root`` values, else the default."""
    if roots:
        return [Path(r).expanduser().resolve() for r in roots]
    return [(claude_config_dir() / "projects").resolve()]


def default_db_path() -> Path:
    value = os.environ.get("TXDB_DB")
    if value:
        return Path(value).expanduser()
    data_home = os.environ.get("XDG_DATA_HOME")
    base = Path(data_home).expanduser() if data_home else Path.home() / ".local" / "share"
    return base / "txdb" / "txdb.db"


def project_folder(cwd: str | os.PathLike[str]) -> str:
    """The project folder Claude Code writes a session run in ``cwd`` to:
    every character but ASCII letters and digits becomes ``-``."""
    return "".join(c if c.isascii() and c.isalnum() else "-" for c in str(cwd))
