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
    return meta


def make_datasette(path: str | Path, **kwargs):
    """A read-only Datasette on the catalog with txdb's metadata and plugin."""
    from datasette.app import Datasette

    path = Path(path)
    settings = dict(SETTINGS)
    settings.update(kwargs.pop("settings", {}))
    return Datasette(
        [str(path)],
        metadata=load_metadata(path.stem),
        settings=settings,
        **kwargs,
    )
