"""One timestamp format in every view (ISO 8601 in UTC, as Claude Code
writes it), so a --where may compare a target view's time with a session
view's; `age_days` says how old a target is; --where's help names the view's
columns."""

from __future__ import annotations

import re
import sqlite3

import pytest

from conftest import run as txdb

ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,3})?Z$")


@pytest.fixture(scope="module")
def catalog(shipped_catalog):
    return shipped_catalog


def test_every_views_timestamps_are_iso_utc(catalog):
    conn = sqlite3.connect(catalog)
    views = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'view'")]
    checked = 0
    for v in views:
        cols = [r[1] for r in conn.execute(f"SELECT * FROM pragma_table_info('{v}')")]
        for c in cols:
            if not (c == "timestamp" or c.endswith("_timestamp") or c in ("first_at", "last_at", "gone_at")):
                continue
            vals = [r[0] for r in conn.execute(f'SELECT "{c}" FROM "{v}" WHERE "{c}" IS NOT NULL LIMIT 200')]
            bad = [x for x in vals if not (isinstance(x, str) and ISO.match(x))]
            assert not bad, (v, c, bad[:3])
            checked += bool(vals)
    assert checked >= 8  # the target views and the session views alike


def test_a_target_view_and_a_session_view_compare_exactly(catalog):
    conn = sqlite3.connect(catalog)
    # the same record's time reads the same in a target view and in active_chain
    rows = conn.execute("SELECT t.timestamp, c.timestamp FROM block_targets t JOIN active_chain c "
                        "ON c.file_id = t.file_id AND c.line = t.line LIMIT 50").fetchall()
    assert rows and all(a == b for a, b in rows)


def test_age_days_is_how_long_ago(catalog):
    conn = sqlite3.connect(catalog)
    for view in ("block_targets", "attachment_targets", "image_targets", "chain_targets"):
        row = conn.execute(f"SELECT timestamp, age_days, julianday('now') - julianday(timestamp) FROM {view} "
                           "WHERE timestamp IS NOT NULL LIMIT 1").fetchone()
        if row is None:
            continue
        assert row[1] == pytest.approx(row[2], abs=0.01)


def test_where_help_names_the_views_columns():
    out = txdb("strip-attachments", "--help", ok=True).output
    flat = " ".join(out.split())
    assert "The view attachment_targets has the columns:" in flat
    for col in ("type", "policy_keeps", "age_days", "timestamp", "tokens"):
        assert col in flat
    out = " ".join(txdb("strip-tools", "--help", ok=True).output.split())
    assert "The view block_targets has the columns:" in out and "tool_name" in out
