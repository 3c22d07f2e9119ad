"""txdb's Datasette metadata and a ready-made read-only Datasette on a catalog."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from urllib.parse import quote

SETTINGS = {
    # Views over the whole catalog can take a few hundred ms on big catalogs.
    "sql_time_limit_ms": 5000,
    "facet_time_limit_ms": 500,
    # Suggested facets re-run a view once per column: off.
    "suggest_facets": False,
}


class _Columns(dict):
    """A table's column descriptions, never copied: Datasette deep-copies
    the whole metadata for each table whose permission it checks (every
    table and view on the catalog's page: a quadratic third of that page's
    CPU); nothing writes to these."""

    def __deepcopy__(self, memo: dict) -> _Columns:
        return self


def metadata_path() -> str:
    return str(resources.files("txdb.web").joinpath("metadata.json"))


def load_metadata(database: str) -> dict:
    """txdb's metadata, keyed by the served database's name (the file stem)."""
    meta = json.loads(resources.files("txdb.web").joinpath("metadata.json").read_text(encoding="utf-8"))
    dbs = meta.get("databases", {})
    if "txdb" in dbs and database != "txdb":
        entry = dbs.pop("txdb")
        if "description_html" in entry:
            entry["description_html"] = entry["description_html"].replace(
                'href="/txdb/', f'href="/{database}/').replace('?db=txdb"', f'?db={quote(database)}"')
        dbs[database] = entry
    for entry in dbs.values():
        for table in (entry.get("tables") or {}).values():
            if isinstance(table.get("columns"), dict):
                table["columns"] = _Columns(table["columns"])
    return meta


def make_datasette(path: str | Path, **kwargs):
    """A read-only Datasette on the catalog with txdb's metadata and plugin."""
    from datasette.app import Datasette

    path = Path(path)
    settings = dict(SETTINGS)
    settings.update(kwargs.pop("settings", {}))
    metadata = load_metadata(path.stem)
    source = _price_source(path)
    if source:
        metadata["description_html"] += (f" Costs in USD: {source[0]} {source[1]}, prices dated up to {source[2]}"
                                         " (the prices table).")
    return Datasette(
        [str(path)],
        metadata=metadata,
        settings=settings,
        **kwargs,
    )


def _price_source(path: Path) -> tuple | None:
    """(library, version, data date) of the prices the catalog holds, read
    from its prices table (db.connect keeps it current), or None."""
    import sqlite3
    from html import escape

    try:
        conn = sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True)
        try:
            row = conn.execute("SELECT library, library_version, data_date FROM prices LIMIT 1").fetchone()
        finally:
            conn.close()
    except sqlite3.Error:
        return None
    return tuple(escape(str(v)) for v in row) if row else None
