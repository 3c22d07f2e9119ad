"""Where txdb's pages are: the one statement of the session page's path,
read by the plugin's links and by `txdb sessions --urls`. Plain strings:
no Datasette import, so the CLI can print a URL without loading it."""

from __future__ import annotations

from urllib.parse import quote

from ..paths import session_stem

HOST = "127.0.0.1"  # `txdb serve` binds only here
DEFAULT_PORT = 8001  # `txdb serve`'s default --port


def session_ref(path: str) -> str:
    """What names a session file on its page: its file name's stem (the
    session id of a top-level session, ``agent-<id>`` of a subagent's)."""
    return session_stem(path)


def session_path(ref: str | int) -> str:
    """The session page of a session id, id prefix or file stem (``ref``),
    or of the file ``files.id = ref`` (an int: the older form)."""
    if isinstance(ref, int):
        return f"/-/txdb/session/{ref}"
    return f"/-/txdb/session/{quote(ref, safe='')}"


def session_page_url(ref: str | int, port: int = DEFAULT_PORT) -> str:
    """The session page as `txdb serve` serves it (the catalog is the only database)."""
    return f"http://{HOST}:{port}{session_path(ref)}"
