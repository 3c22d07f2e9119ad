"""Where txdb's pages are: the one statement of the session page's path,
read by the plugin's links and by `txdb sessions --urls`. Plain strings:
no Datasette import, so the CLI can print a URL without loading it."""

from __future__ import annotations

HOST = "127.0.0.1"  # `txdb serve` binds only here
DEFAULT_PORT = 8001  # `txdb serve`'s default --port


def session_path(file_id: int) -> str:
    """The session page of the session file ``files.id = file_id``."""
    return f"/-/txdb/session/{int(file_id)}"


def session_page_url(file_id: int, port: int = DEFAULT_PORT) -> str:
    """The session page as `txdb serve` serves it (the catalog is the only database)."""
    return f"http://{HOST}:{port}{session_path(file_id)}"
