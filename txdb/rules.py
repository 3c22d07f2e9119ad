"""The version of the rules behind the figures refresh stores (token sizes,
estimates, chain findings), and what each change of them re-derives.

A rule change that only re-derives stored figures is not a migration: it
bumps ``RULES_VERSION`` and says here what the catalog must do, and the
open of a catalog whose recorded version (``_txdb_meta.rules_version``) is
older does it once (``db.rederive``; docs/architecture.md, "Schema
changes"). Migrations 008-027 did the same by SQL of their own; they stay,
as every migration does.
"""

from __future__ import annotations

from typing import NamedTuple


class Bump(NamedTuple):
    """What one version of the rules re-derives in a catalog made before it."""

    version: int
    why: str
    reread: str | None = None  # files read again from their start: a condition on `files` ('' = every file)
    estimates: bool = False  # every session's estimate computed again from the catalog (no file read)


# Oldest first; the last one's version is RULES_VERSION. Version 0 is the
# rules migrations 001-027 brought the catalog to.
BUMPS: tuple[Bump, ...] = (
    Bump(1, "a surgery's result is priced at the factor it logged while the file is what it wrote "
            "(estimate.at_factor)", estimates=True),
    Bump(2, "a transcript's session (its parent, for an agent transcript beside the sessions) is the first of "
            "its lines naming one, however it grew (a grown file took it from its new lines)",
         reread="id IN (SELECT s.file_id FROM sessions s WHERE coalesce(s.parent_session_id, s.session_id) IS NOT "
                "coalesce((SELECT r.session_id FROM records r WHERE r.file_id = s.file_id AND r.session_id <> '' "
                "ORDER BY r.offset LIMIT 1), s.session_id))"),
)

RULES_VERSION = BUMPS[-1].version if BUMPS else 0


def since(version: int, bumps: tuple[Bump, ...] | None = None) -> list[Bump]:
    """The bumps a catalog at ``version`` has not had yet."""
    return [b for b in (BUMPS if bumps is None else bumps) if b.version > version]
