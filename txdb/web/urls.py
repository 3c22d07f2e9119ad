"""Where txdb's pages are: the one statement of the session page's path,
read by the plugin's links and by `txdb sessions --urls`. Plain strings:
no Datasette import, so the CLI can print a URL without loading it. A
page's reference names one session file (``page_ref``)."""

from __future__ import annotations

import re

from txdb.model.paths import session_stem

HOST = "127.0.0.1"  # `txdb serve` binds only here
DEFAULT_PORT = 8001  # `txdb serve`'s default --port
REF = r"[A-Za-z0-9_-]+"  # what the session page's route takes: an id, a prefix, a file's stem or number


def session_ref(path: str, file_id: int) -> str | int:
    """What names a session file on its page: its file name's stem (the
    session id of a top-level session, ``agent-<id>`` of a subagent's);
    its number ``file_id`` when the stem has characters the route does not
    take, or is all digits (the page reads digits as a file's number first)."""
    stem = session_stem(path)
    return stem if re.fullmatch(REF, stem) and not stem.isdigit() else int(file_id)


def page_ref(conn, path: str, file_id: int, matches=None) -> str | int:
    """``session_ref`` of a catalogued file when that stem names this file
    alone (as the page resolves it: ``catalog.session_matches``, or
    ``matches``, its ``file_stem_matcher`` for many rows), else its number:
    two files both named ``full.jsonl`` get one page each."""
    from txdb.catalog.sessions import session_matches  # the catalog's reader, loaded only with a catalog open

    ref = session_ref(path, file_id)
    if isinstance(ref, str) and [r[0] for r in (matches or (lambda s: session_matches(conn, s)))(ref)] != [file_id]:
        return int(file_id)
    return ref


def session_path(ref: str | int) -> str:
    """The session page of a session id, id prefix or file stem (``ref``,
    characters of ``REF`` only), or of the file ``files.id = ref`` (an int)."""
    ref = str(ref)
    if not re.fullmatch(REF, ref):
        raise ValueError(f"not a session page reference: {ref!r}")
    return f"/-/txdb/session/{ref}"


def session_page_url(ref: str | int, port: int = DEFAULT_PORT) -> str:
    """The session page as `txdb serve` serves it (the catalog is the only database)."""
    return f"http://{HOST}:{port}{session_path(ref)}"
