"""`txdb waste`: what sessions paid for that they did not need (the views
``waste_items`` and ``waste``), and the plan of the command that reclaims it."""

from __future__ import annotations

import shlex
import sqlite3

from txdb.catalog import db

GROUPS = {
    "session": ("file_id, session_id, project, title, kind", "file_id"),
    "project": ("project, kind", "project"),
    "kind": ("kind", "kind"),
}


def report(conn: sqlite3.Connection, by: str = "session", file_id: int | None = None,
           limit: int | None = None) -> list[dict]:
    """Rows of ``waste`` summed by ``by``, dollars first; ``file_id`` keeps one session."""
    cols, _ = GROUPS[by]
    where = " WHERE file_id = ?" if file_id is not None else ""
    reclaim = ", min(reclaim) AS reclaim" if by == "session" else ""
    sql = (f"SELECT {cols}, sum(items) AS items, sum(tokens) AS tokens, round(sum(usd), 6) AS usd{reclaim} "
           f"FROM waste{where} GROUP BY {cols} ORDER BY usd DESC" + (" LIMIT ?" if limit else ""))
    params = ((file_id,) if file_id is not None else ()) + ((limit,) if limit else ())
    return db.rows(conn, sql, params)


def plan_argv(reclaim: str, db_path: str) -> list[str]:
    """The reclaim command as a dry run on this catalog: its plan, writing nothing."""
    argv = shlex.split(reclaim)
    if argv[:1] != ["txdb"]:
        raise ValueError(f"not a txdb command: {reclaim}")
    return argv[1:] + ["--dry-run", "--json", "--db", db_path]


def plan_saving(plan: dict) -> int | None:
    """Tokens a plan saves per request (its sessions' estimate before less after)."""
    sessions = plan.get("sessions") or []
    if not sessions:
        return None
    return sum((s.get("tokens_before") or 0) - (s.get("tokens_after") or 0) for s in sessions)
