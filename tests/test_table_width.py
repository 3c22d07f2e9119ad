"""Tables fit the terminal: text columns are cut first, then the rightmost
columns go; --wide keeps them whole; piped text is never cut."""

from __future__ import annotations

import pytest

from conftest import copy_fixture_sessions
from conftest import run as txdb
from sessions import assistant, user, write


@pytest.fixture(scope="module")
def catalog(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("width")
    root = copy_fixture_sessions(tmp / "projects")
    u = user("A title long enough to be cut when the terminal is narrow: " + "words " * 20, session="s-wide")
    write(root / "-home-me-a-rather-long-project-folder-name" / "s-wide.jsonl",
          [u, assistant([{"type": "text", "text": "ok"}], u["uuid"], session="s-wide")])
    db = tmp / "c.db"
    txdb("refresh", "--root", root, "--db", db, ok=True)
    return db


@pytest.mark.parametrize("columns", [80, 100, 120])
def test_sessions_fits_the_terminal(catalog, monkeypatch, columns):
    monkeypatch.setenv("COLUMNS", str(columns))
    out = txdb("sessions", "--db", catalog, "--table", ok=True).output
    lines = out.splitlines()
    assert len(lines) > 3
    assert max(len(ln) for ln in lines) <= columns
    head = lines[0].split()
    # what a user decides by stays longest: the id, the title, the estimate, the window, the cost
    assert head[:2] == ["session_id", "title"] and {"est_context_tokens", "of_window", "cost_usd"} <= set(head)
    assert "secrets" not in head  # the first column given up
    assert "\u2026" in out  # something was cut to fit
    title = lines[2][len(lines[2].split("  ")[0]):].strip()
    assert len(title.split("  ")[0]) >= 16  # the title is cut, never to nothing


def test_wide_keeps_every_column_and_piped_text_is_whole(catalog, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    wide = txdb("sessions", "--db", catalog, "--table", "--wide", ok=True).output
    assert max(len(ln) for ln in wide.splitlines()) > 80
    assert wide.splitlines()[0].split()[-1] == "secrets"
    assert "A title long enough to be cut" in wide
    monkeypatch.delenv("COLUMNS")
    piped = txdb("sessions", "--db", catalog, "--table", ok=True).output  # CliRunner's stdout is no terminal
    assert piped == wide


def test_search_keeps_the_excerpt_readable_at_80_columns(catalog, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    out = txdb("search", "terminal narrow", "--db", catalog, "--table", ok=True).output
    lines = out.splitlines()
    assert max(len(ln) for ln in lines) <= 80
    assert lines[0].split()[0] == "session_id"


def test_fit_table_cuts_the_widest_text_column_first():
    from txdb.cli.output import fit_table

    cells = [["abc", "x" * 50, "y" * 30, "1,234"]]
    out, heads, aligns = fit_table(cells, ["id", "long", "mid", "n"], ["left", "left", "left", "right"], 60)
    widths = [max(len(h), len(str(r[i]))) for i, h in enumerate(heads) for r in out]
    assert sum(widths) + 2 * (len(heads) - 1) <= 60
    assert out[0][0] == "abc" and out[0][3] == "1,234"  # short text and numbers whole
    assert out[0][1].endswith("\u2026") and len(out[0][1]) < 50
    # too narrow for every column even cut: the rightmost columns go
    out, heads, _ = fit_table(cells, ["id", "long", "mid", "n"], ["left", "left", "left", "right"], 20)
    assert heads[0] == "id" and len(heads) < 4


def test_txdb_alone_prints_its_help_and_succeeds():
    r = txdb()
    assert r.exit_code == 0
    assert r.output.startswith("Usage: ") and "Commands:" in r.output and "refresh" in r.output
