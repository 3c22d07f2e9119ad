"""`txdb export DIR --format parquet`: every row of every table, partitioned
by project and month, and the same answers in DuckDB as in SQLite."""

from __future__ import annotations

import os
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import copy_fixture_sessions
from sessions import conversation, write
from txdb.catalog import db
from txdb.cli import cli
from txdb.catalog.export import TABLES
from txdb.catalog.ingest.store import refresh

pq = pytest.importorskip("pyarrow.parquet")
duckdb = pytest.importorskip("duckdb")

TXDB = [sys.executable, "-m", "txdb.cli"]

# Tokens by model and day: the question both engines answer.
BY_MODEL_AND_DAY = """
    select model, substr(timestamp, 1, 10) as day,
           sum(input_tokens) as input, sum(output_tokens) as output,
           sum(cache_read_input_tokens) as cache_read, sum(cache_creation_input_tokens) as cache_creation,
           count(*) as messages
    from {usage} group by model, day order by model, day
"""


def build_catalog(tmp_path: Path, name: str, extra_turns: int = 0) -> Path:
    """A catalog of the shipped sessions, plus a session of a second month and
    a fork (so `surgeries` has a row)."""
    root = copy_fixture_sessions(tmp_path / f"{name}-projects")
    later = conversation(2 + extra_turns, session=f"later-{name}")
    for o in later:
        o["timestamp"] = "2026-12-0" + o["timestamp"][9:]  # another month
    write(root / "-home-me-app" / f"later-{name}.jsonl", later)
    path = tmp_path / f"{name}.db"
    conn = db.connect(path)
    refresh(conn, [root])
    conn.close()
    r = CliRunner().invoke(cli, ["fork", f"later-{name}", "--db", str(path)])
    assert r.exit_code == 0, r.output
    return path


def export(db_path: Path, out: Path, *args) -> subprocess.CompletedProcess:
    r = subprocess.run([*TXDB, "export", str(out), "--format", "parquet", "--db", str(db_path), *args],
                       capture_output=True, text=True)
    return r


def catalog_rows(db_path: Path, sql: str) -> list[tuple]:
    conn = sqlite3.connect(db_path)
    try:
        return [tuple(r) for r in conn.execute(sql)]
    finally:
        conn.close()


def duck(sql: str) -> list[tuple]:
    """Rows of a DuckDB query (through a connection: the DB-API calls every version keeps)."""
    con = duckdb.connect()
    try:
        return [tuple(r) for r in con.execute(sql).fetchall()]
    finally:
        con.close()


def parquet(glob: str) -> str:
    return f"read_parquet('{glob}', hive_partitioning = true)"


@pytest.fixture
def exported(tmp_path):
    path = build_catalog(tmp_path, "one")
    out = tmp_path / "exports" / "one"
    r = export(path, out)
    assert r.returncode == 0, r.stderr
    return path, out, r


def test_every_table_exports_every_row(exported):
    path, out, r = exported
    assert r.stdout.startswith("Exported ")
    for table in TABLES:
        n = catalog_rows(path, f"select count(*) from {table}")[0][0]
        assert n > 0, table  # the fixture has rows in every table, surgeries included
        got = duck(f"select count(*) from {parquet(out / table / '**' / '*.parquet')}")[0][0]
        assert got == n, table


def test_duckdb_over_the_export_answers_as_sqlite_over_the_catalog(exported):
    path, out, _ = exported
    expected = catalog_rows(path, BY_MODEL_AND_DAY.format(usage="usage"))
    assert len({day for _, day, *_ in expected}) > 1
    got = duck(BY_MODEL_AND_DAY.format(usage=parquet(out / "usage" / "**" / "*.parquet")))
    assert [tuple(r) for r in got] == expected


def test_the_export_carries_each_messages_cost(exported):
    """usage.cost_usd in the export: the billed row's cost (billed_cost), so
    a sum over the Parquet files is the catalog's usage_by_model figure."""
    path, out, _ = exported
    expected = [(m, round(c, 6)) for m, c in catalog_rows(
        path, "select model, cost_usd from usage_by_model where cost_usd > 0 order by model")]
    assert expected
    got = duck(f"select model, round(sum(cost_usd), 6) from {parquet(out / 'usage' / '**' / '*.parquet')} "
               "where cost_usd is not null group by model having sum(cost_usd) > 0 order by model")
    assert [(m, pytest.approx(c, abs=2e-6)) for m, c in got] == expected


def test_rows_sit_in_their_project_and_month(exported):
    path, out, _ = exported
    # Hive partitions and the columns in each file agree, and match the catalog.
    rows = duck(f"""
        select file_id, "offset", project, month, timestamp
        from {parquet(out / 'records' / '**' / '*.parquet')}
    """)
    projects = dict(catalog_rows(path, "select id, project from files"))
    first = dict(catalog_rows(path, "select file_id, substr(first_timestamp, 1, 7) from sessions"))
    for fid, _, project, month, ts in rows:
        assert project == projects[fid]
        assert month == (ts[:7] if ts else first.get(fid))
    plain = pq.read_table(next((out / "records").rglob("*.parquet")))
    assert {"project", "month", "raw"} <= set(plain.column_names)
    # A block sits in its record's partition, so a join stays within one.
    mismatched = duck(f"""
        select count(*) from {parquet(out / 'blocks' / '**' / '*.parquet')} b
        join {parquet(out / 'records' / '**' / '*.parquet')} r using (file_id, "offset")
        where b.project is distinct from r.project or b.month is distinct from r.month
    """)[0][0]
    assert mismatched == 0


def test_two_machines_exports_read_together_give_the_sum(tmp_path):
    first = build_catalog(tmp_path, "alice")
    second = build_catalog(tmp_path, "bob", extra_turns=3)
    for name, path in (("alice", first), ("bob", second)):
        # A Hive-style folder per machine: DuckDB reads `machine` as a column too.
        assert export(path, tmp_path / "exports" / f"machine={name}").returncode == 0
    sums = "count(*), sum(output_tokens), sum(cache_read_input_tokens)"
    usage = parquet(tmp_path / "exports" / "*" / "usage" / "**" / "*.parquet")
    each = [catalog_rows(p, f"select {sums} from usage")[0] for p in (first, second)]
    assert each[0] != each[1]
    total = duck(f"select {sums} from {usage}")[0]
    assert tuple(total) == tuple(a + b for a, b in zip(*each))
    by_machine = duck(f"select machine, {sums} from {usage} group by machine order by machine")
    assert by_machine == [("alice", *each[0]), ("bob", *each[1])]


def test_export_files_are_private(exported):
    _, out, _ = exported
    for p in [out, *out.rglob("*")]:
        mode = stat.S_IMODE(p.stat().st_mode)
        assert mode == (0o700 if p.is_dir() else 0o600), p


def test_an_existing_folder_is_refused_unless_an_export_and_replace(exported, tmp_path):
    path, out, _ = exported
    before = {p: p.stat().st_mtime_ns for p in out.rglob("*")}
    r = export(path, out)  # an update with nothing changed writes nothing
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"Updated {out}: 0 new Parquet files")
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*")} == before
    other = tmp_path / "notes"
    other.mkdir()
    (other / "mine.txt").write_text("keep me")
    r = export(path, other)
    assert r.returncode == 1
    assert r.stderr.strip() == f"Error: {other} is not empty and holds no txdb export: name another folder"
    assert (other / "mine.txt").read_text() == "keep me"
    # --replace: the new export replaces the old one whole, leaving nothing beside it.
    conn = sqlite3.connect(path)
    conn.execute("delete from surgeries")
    conn.commit()
    conn.close()
    r = export(path, out, "--replace")
    assert r.returncode == 0, r.stderr
    assert not (out / "surgeries").exists()
    assert sorted(p.name for p in out.parent.iterdir()) == ["one"]


def test_a_missing_catalog_or_a_linked_folder_is_one_error_line(exported, tmp_path):
    path, out, _ = exported
    r = export(tmp_path / "none.db", tmp_path / "out")
    assert r.returncode == 1
    assert r.stderr.strip() == (f"Error: no catalog at {tmp_path / 'none.db'}: run "
                                f"`txdb refresh --db {tmp_path / 'none.db'}` first")
    assert not (tmp_path / "none.db").exists() and not (tmp_path / "out").exists()
    link = tmp_path / "link"
    link.symlink_to(out)
    r = export(path, link, "--replace")
    assert r.returncode == 1
    assert r.stderr.strip() == f"Error: {link} is a symbolic link: name the folder itself"


def test_a_hostile_project_folder_stays_inside_the_export(tmp_path):
    root = tmp_path / "projects"
    name = "..=x%2F..%0a"
    write(root / name / "s.jsonl", conversation(1, session="s"))
    path = tmp_path / "c.db"
    conn = db.connect(path)
    refresh(conn, [root])
    conn.close()
    out = tmp_path / "out"
    assert export(path, out).returncode == 0
    written = [p for p in tmp_path.rglob("*.parquet")]
    assert written and all(out in p.parents for p in written)
    got = duck(f"select distinct project from {parquet(out / 'records' / '**' / '*.parquet')}")
    assert got == [(name,)]


def test_without_pyarrow_the_error_names_the_extra(tmp_path):
    path = tmp_path / "c.db"
    db.connect(path).close()
    code = ("import sys; sys.modules['pyarrow'] = None; sys.modules['pyarrow.parquet'] = None; "
            "from txdb.cli import cli; cli()")
    r = subprocess.run([sys.executable, "-c", code, "export", str(tmp_path / "out"), "--db", str(path)],
                       capture_output=True, text=True)
    assert r.returncode == 1
    assert r.stderr.strip() == ("Error: Parquet export needs pyarrow: pip install 'txdb[parquet]' "
                                "(from a clone: pip install -e '.[parquet]')")
    assert not (tmp_path / "out").exists()


def test_a_link_planted_at_a_temporary_name_receives_nothing(exported, tmp_path):
    """The temporaries beside DIR are made unpredictably and exclusively: a
    symlink planted at the name an export once used (`.<out>.exporting-<pid>`,
    `.<out>.replaced-<pid>`) gets no file, and DIR stays a real folder."""
    from txdb.catalog.export import MARKER, export_parquet

    path, out, _ = exported
    trap = tmp_path / "trap"
    trap.mkdir()
    for kind in ("exporting", "replaced"):
        (out.parent / f".{out.name}.{kind}-{os.getpid()}").symlink_to(trap)
    export_parquet(path, out, replace=True)
    assert list(trap.iterdir()) == []
    assert not out.is_symlink() and out.is_dir() and (out / MARKER).is_file()
    assert sorted(p.name for p in out.parent.iterdir() if not p.is_symlink()) == ["one"]
    assert stat.S_IMODE(out.stat().st_mode) == 0o700
