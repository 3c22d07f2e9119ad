"""What a wheel carries: every data file the code reads through
importlib.resources (the SQL, the Datasette parts) is package data, and the
entry points name modules that exist."""

from __future__ import annotations

import fnmatch
import importlib
import tomllib
from importlib import resources
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONFIG = tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_every_data_file_is_package_data():
    tool = CONFIG["tool"]["setuptools"]
    dirs = tool["package-dir"]
    data = tool["package-data"]
    assert set(data) <= set(tool["packages"])
    for package in tool["packages"]:
        folder = ROOT / dirs.get(package, package.replace(".", "/"))
        for f in folder.rglob("*"):
            if not f.is_file() or f.suffix in (".py", ".pyc") or "__pycache__" in f.parts:
                continue
            rel = f.relative_to(folder).as_posix()
            if any(p.startswith(package + ".") and f.is_relative_to(ROOT / dirs.get(p, p.replace(".", "/")))
                   for p in tool["packages"]):
                continue  # a subpackage's file: its own entry covers it
            assert any(fnmatch.fnmatch(rel, pat) for pat in data.get(package, [])), f"{package}: {rel}"


def test_the_sql_and_web_files_are_found_through_importlib_resources():
    sql = resources.files("txdb.sql")
    assert any(e.name.endswith(".sql") for e in sql.joinpath("migrations").iterdir())
    assert any(e.name.endswith(".sql") for e in sql.joinpath("views").iterdir())
    web = resources.files("txdb.web")
    for name in ("metadata.json", "templates/txdb_session.html", "static/txdb.css"):
        assert web.joinpath(name).is_file(), name


def test_entry_points_name_what_exists_and_every_package_ships():
    module, _, attr = CONFIG["project"]["scripts"]["txdb"].partition(":")
    assert callable(getattr(importlib.import_module(module), attr))
    plugin = importlib.import_module(CONFIG["project"]["entry-points"]["datasette"]["txdb"])
    assert hasattr(plugin, "render_cell") and hasattr(plugin, "extra_css_urls")
    found = {".".join(f.parent.relative_to(ROOT).parts) for f in (ROOT / "txdb").rglob("__init__.py")}
    assert found <= set(CONFIG["tool"]["setuptools"]["packages"])
