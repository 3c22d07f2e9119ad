"""A second `txdb export` into the same folder writes only the partitions
that changed, and the folder then reads as a fresh full export would."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from sessions import append, conversation
from test_export import build_catalog, duck, export, parquet
from txdb.catalog import db
from txdb.cli import cli
from txdb.catalog.export import MARKER, TABLES, _move_in
from txdb.catalog.ingest.store import refresh

pytest.importorskip("pyarrow.parquet")


def parts(out: Path) -> dict[Path, tuple[int, int]]:
    return {p: (p.stat().st_ino, p.stat().st_mtime_ns) for p in out.rglob("*.parquet")}


def table_rows(out: Path, table: str) -> list[str]:
    if not (out / table).exists():
        return []
    return sorted(repr(r) for r in duck(f"select * from {parquet(out / table / '**' / '*.parquet')}"))


def assert_reads_as_fresh(db_path: Path, out: Path, fresh: Path, *args) -> None:
    r = export(db_path, fresh, *args)
    assert r.returncode == 0, r.stderr
    for table in TABLES:
        got = table_rows(out, table)
        assert got == table_rows(fresh, table), table
        assert len(got) == len(set(got)), table  # no row twice
    manifest = orjson.loads((out / MARKER).read_bytes())
    assert {p["path"] for p in manifest["parts"]} == {p.relative_to(out).as_posix() for p in out.rglob("*.parquet")}


def refresh_catalog(db_path: Path, root: Path) -> None:
    conn = db.connect(db_path)
    refresh(conn, [root])
    conn.close()


def grow_later(tmp_path: Path, name: str) -> Path:
    """Append two turns (of December 2026) to the fixture's `later` session."""
    f = tmp_path / f"{name}-projects" / "-home-me-app" / f"later-{name}.jsonl"
    more = conversation(2, session=f"later-{name}")
    for o in more:
        o["timestamp"] = "2026-12-0" + o["timestamp"][9:]
    append(f, *more)
    return f


@pytest.mark.parametrize("redact", [False, True])
def test_an_append_writes_only_its_partitions_and_reads_as_a_fresh_export(tmp_path, redact):
    args = ("--redact",) if redact else ()
    path = build_catalog(tmp_path, "one")
    out = tmp_path / "exports" / "one"
    assert export(path, out, *args).returncode == 0
    before = parts(out)
    grow_later(tmp_path, "one")
    refresh_catalog(path, tmp_path / "one-projects")
    r = export(path, out, *args)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"Updated {out}: ")
    after = parts(out)
    new = set(after) - set(before)
    gone = set(before) - set(after)
    assert new and gone
    # Only the grown session's partition was written again; every other part is the same file, untouched.
    assert all("month=2026-12" in p.as_posix() for p in new | gone)
    assert all(after[p] == before[p] for p in set(before) & set(after))
    assert len(set(before) & set(after)) > len(new)
    assert_reads_as_fresh(path, out, tmp_path / "fresh", *args)


def test_a_scan_read_again_that_finds_the_same_rewrites_nothing(tmp_path):
    """A sidecar refreshed within its scan's second is read again by the next
    redacted export: the same findings, so the same parts (it rewrote every
    partition of such a session, when the scan's time was fingerprinted)."""
    path = build_catalog(tmp_path, "one")
    out = tmp_path / "exports" / "one"
    assert export(path, out, "--redact").returncode == 0
    before = parts(out)
    conn = sqlite3.connect(path)
    with conn:
        assert conn.execute("UPDATE sidecars SET refreshed_at = datetime('now', '+1 hour')").rowcount > 0
    conn.close()
    r = export(path, out, "--redact")
    assert r.returncode == 0, r.stderr
    assert parts(out) == before


def test_a_surgery_rewritten_session_replaces_its_partitions(tmp_path):
    path = build_catalog(tmp_path, "one")
    out = tmp_path / "exports" / "one"
    assert export(path, out).returncode == 0
    runner = CliRunner()
    for cmd in (["strip-tools", "later-one"], ["apply", "later-one"]):
        r = runner.invoke(cli, [*cmd, "--db", str(path)])
        assert r.exit_code == 0, r.output
    refresh_catalog(path, tmp_path / "one-projects")
    before = parts(out)
    assert export(path, out).returncode == 0
    assert set(parts(out)) != set(before)
    assert_reads_as_fresh(path, out, tmp_path / "fresh")
    # And a file the catalog lost (deleted row) leaves the export too.
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA foreign_keys = ON")
    fid = conn.execute("select id from files where path like '%later-one.jsonl'").fetchone()[0]
    for t in ("chain", "usage", "attachments", "blocks", "records", "raw_chunks", "sessions"):
        conn.execute(f"delete from {t} where file_id = ?", (fid,))
    conn.execute("delete from surgeries where file_id = ?", (fid,))
    conn.execute("delete from files where id = ?", (fid,))
    conn.commit()
    conn.close()
    assert export(path, out).returncode == 0
    assert_reads_as_fresh(path, out, tmp_path / "fresh2")


def test_mixing_redacted_and_plain_exports_is_refused(tmp_path):
    path = build_catalog(tmp_path, "one")
    out = tmp_path / "plain"
    assert export(path, out).returncode == 0
    before = parts(out)
    r = export(path, out, "--redact")
    assert r.returncode == 1
    assert r.stderr.strip() == f"Error: {out} holds an export without --redact: drop --redact, or add --replace to replace it"
    red = tmp_path / "red"
    assert export(path, red, "--redact").returncode == 0
    r = export(path, red)
    assert r.returncode == 1
    assert r.stderr.strip() == f"Error: {red} holds an export with --redact: add --redact, or add --replace to replace it"
    assert parts(out) == before
    assert export(path, out, "--redact", "--replace").returncode == 0  # replacing whole is the way to switch


@pytest.mark.parametrize("forge", ["outside", "dotdot", "damaged", "not_a_dict", "old", "absolute"])
def test_a_forged_or_damaged_manifest_is_one_error_line(tmp_path, forge):
    path = build_catalog(tmp_path, "one")
    out = tmp_path / "exports" / "one"
    assert export(path, out).returncode == 0
    victim = tmp_path / "victim.parquet"
    victim.write_bytes(b"keep")
    m = orjson.loads((out / MARKER).read_bytes())
    first = m["parts"][0]
    folder = first["path"].rsplit("/", 1)[0]
    if forge == "outside":
        first["path"] = f"{folder}/../../../../victim.parquet"
    elif forge == "dotdot":
        first["key"] = ["..", ".."]
        first["path"] = f"{first['table']}/project=../month=../part-0.parquet"
    elif forge == "absolute":
        first["path"] = str(victim)
    elif forge == "not_a_dict":
        m = [m]
    elif forge == "old":
        del m["parts"]
    data = b"{not json" if forge == "damaged" else orjson.dumps(m)
    (out / MARKER).write_bytes(data)
    # The catalog changed, so an update would delete superseded parts.
    grow_later(tmp_path, "one")
    refresh_catalog(path, tmp_path / "one-projects")
    before = parts(out)
    r = export(path, out)
    assert r.returncode == 1
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("Error: ") and "Traceback" not in r.stderr
    assert victim.read_bytes() == b"keep"
    assert parts(out) == before


def test_parts_an_interrupted_update_left_are_deleted_by_the_next(tmp_path):
    """An update cut off after moving its new parts in, before its manifest:
    the folder then holds parts no manifest names; the next export deletes
    those (and only part files inside the table folders)."""
    path = build_catalog(tmp_path, "one")
    out = tmp_path / "exports" / "one"
    assert export(path, out).returncode == 0
    some = next((out / "records").rglob("part-0.parquet"))
    leftover = some.with_name("part-g7-0.parquet")
    leftover.write_bytes(some.read_bytes())  # its rows, twice
    mine = out / "records" / "notes.txt"
    mine.write_text("not a part")
    grow_later(tmp_path, "one")
    refresh_catalog(path, tmp_path / "one-projects")
    assert export(path, out).returncode == 0
    assert not leftover.exists() and mine.read_text() == "not a part"
    mine.unlink()
    assert_reads_as_fresh(path, out, tmp_path / "fresh")


def listed_parts(out: Path) -> set[str]:
    """Every part file a reader globbing the folder sees (through links too)."""
    return {(Path(d) / n).relative_to(out).as_posix()
            for d, _, names in os.walk(out, followlinks=True) for n in names if n.endswith(".parquet")}


def assert_no_row_twice(out: Path) -> None:
    for table in TABLES:
        got = table_rows(out, table)
        assert len(got) == len(set(got)), table


def test_an_update_refused_midway_leaves_the_folder_as_its_manifest_names(tmp_path):
    """A partition folder swapped for a link (to a copy of itself) is refused,
    and it was refused after the new parts of the tables before it (files,
    sessions) were moved in beside the parts the manifest names: readers saw
    their rows twice. Every target is checked before a part is moved."""
    path = build_catalog(tmp_path, "one")
    out = tmp_path / "exports" / "one"
    assert export(path, out).returncode == 0
    manifest = (out / MARKER).read_bytes()
    named = {p["path"] for p in orjson.loads(manifest)["parts"]}
    grown = next((out / "records").glob("project=*/month=2026-12")).parent
    copy = tmp_path / "elsewhere"
    shutil.copytree(grown, copy)
    shutil.rmtree(grown)
    grown.symlink_to(copy)
    assert listed_parts(out) == named
    grow_later(tmp_path, "one")
    refresh_catalog(path, tmp_path / "one-projects")
    r = export(path, out)
    assert r.returncode == 1
    assert r.stderr == f"Error: {grown} is not a folder of the export: export into a new folder\n"
    assert (out / MARKER).read_bytes() == manifest
    assert listed_parts(out) == named
    assert_no_row_twice(out)
    assert not list(tmp_path.glob("exports/.one.exporting-*"))
    grown.unlink()
    shutil.copytree(copy, grown)
    r = export(path, out)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"Updated {out}: ")
    assert_reads_as_fresh(path, out, tmp_path / "fresh")


def test_moves_cut_off_midway_are_taken_back(tmp_path):
    """A rename that fails after others were done (here: its source gone)
    takes the done ones back, and the folders it made."""
    src, out = tmp_path / "tmp", tmp_path / "out"
    (out / "files" / "project=a").mkdir(parents=True)
    kept = out / "files" / "project=a" / "part-0.parquet"
    kept.write_bytes(b"old")
    moves = []
    for rel in ("files/project=a/part-g1-0.parquet", "sessions/project=a/month=b/part-g1-0.parquet",
                "records/project=a/part-g1-0.parquet"):
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_bytes(rel.encode())
        moves.append(rel)
    (src / moves[-1]).unlink()
    with pytest.raises(FileNotFoundError):
        _move_in(src, out, moves)
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*")) == [
        "files", "files/project=a", "files/project=a/part-0.parquet"]
    assert kept.read_bytes() == b"old"
    assert (src / moves[0]).read_bytes() == moves[0].encode()  # back where it was


@pytest.fixture
def manifest_edited(tmp_path):
    """An export of the fixture catalog and ``update(edit)``: the manifest
    (a dict) changed by ``edit``, a session grown and the catalog refreshed,
    the export run again, refused: (its result, the parts before it)."""
    path = build_catalog(tmp_path, "one")
    out = tmp_path / "exports" / "one"
    assert export(path, out).returncode == 0

    def update(edit) -> tuple[subprocess.CompletedProcess, dict]:
        m = orjson.loads((out / MARKER).read_bytes())
        edit(m)
        (out / MARKER).write_bytes(orjson.dumps(m))
        grow_later(tmp_path, "one")
        refresh_catalog(path, tmp_path / "one-projects")
        before = parts(out)
        r = export(path, out)
        assert r.returncode == 1
        return r, before

    return path, out, update


@pytest.mark.parametrize("where", ["manifest", "part"])
def test_a_generation_past_any_real_one_is_refused(manifest_edited, where):
    """A manifest whose generation (or a part's) is past any count of real
    updates was taken, and its update named parts part-g1000000000000-*,
    which the next export then refused as not its own."""
    path, out, update = manifest_edited

    def edit(m):
        if where == "manifest":
            m["generation"] = 999999999999
        else:
            first = m["parts"][0]
            old = out / first["path"]
            first["path"] = first["path"].replace("/part-0.parquet", "/part-g999999999999-0.parquet")
            old.rename(out / first["path"])

    r, before = update(edit)
    assert r.stderr == (f"Error: {out / MARKER} is damaged or not txdb's: "
                        "export into a new folder or add --replace\n" if where == "manifest" else
                        f"Error: {out / MARKER} names a part file that is not its own: "
                        "export into a new folder or add --replace\n")
    assert parts(out) == before
    assert export(path, out, "--replace").returncode == 0
    assert export(path, out).returncode == 0


def test_an_update_past_the_last_generation_is_refused(manifest_edited, tmp_path):
    _path, out, update = manifest_edited
    r, before = update(lambda m: m.update(generation=10**9))
    assert r.stderr == f"Error: {out} has been updated 1,000,000,000 times: add --replace to write it anew\n"
    assert parts(out) == before
    assert not list(tmp_path.glob("exports/.one.exporting-*"))


def arrow_counts(out: Path) -> dict[str, int]:
    """Rows per table as pyarrow reads the folder (a reader following links)."""
    import pyarrow.dataset as ds

    return {t: ds.dataset(out / t, format="parquet").count_rows() if (out / t).exists() else 0 for t in TABLES}


def catalog_counts(db_path: Path) -> dict[str, int]:
    conn = sqlite3.connect(db_path)
    try:
        return {t: conn.execute(f"select count(*) from {t}").fetchone()[0] for t in TABLES}
    finally:
        conn.close()


@pytest.mark.parametrize("harm", ["deleted", "truncated", "linked", "folder"])
def test_a_kept_part_missing_or_replaced_is_written_again(tmp_path, harm):
    """The second export trusted the part files its manifest names: one
    deleted (or truncated, or a folder, or a link to a file outside) was
    kept, `0 new Parquet files`, and readers counted other rows than the
    catalog's. Such a part's partition is written again; a link is removed,
    never followed (the outside file is untouched)."""
    path = build_catalog(tmp_path, "one")
    out = tmp_path / "exports" / "one"
    assert export(path, out).returncode == 0
    records = sorted((out / "records").rglob("part-*.parquet"), key=lambda p: p.stat().st_size)
    victim, other = records[-1], records[0]
    assert victim.stat().st_size != other.stat().st_size
    def partition(p: Path) -> tuple[str, ...]:
        return p.relative_to(out).parts[1:-1]  # (project=..., month=...), of every table

    untouched = {p: v for p, v in parts(out).items() if partition(p) != partition(victim)}
    outside = tmp_path / "outside.parquet"
    outside.write_bytes(other.read_bytes())  # a Parquet file with other rows
    if harm == "deleted":
        for p in victim.parent.parent.glob("month=*/part-*.parquet"):  # every month of its project
            p.unlink()
    elif harm == "truncated":
        with open(victim, "r+b") as fh:
            fh.truncate(victim.stat().st_size // 2)
    elif harm == "linked":
        victim.unlink()
        victim.symlink_to(outside)
    else:
        victim.unlink()
        victim.mkdir()
    r = export(path, out)
    assert r.returncode == 0, r.stderr
    n = 1 if harm != "deleted" else len({p for p in records if p.parent.parent == victim.parent.parent})
    assert f", {n} part{'s' if n > 1 else ''} missing or replaced: written again, " in r.stdout
    assert not victim.exists() and not victim.is_symlink()
    assert outside.read_bytes() == other.read_bytes()
    assert arrow_counts(out) == catalog_counts(path)
    assert all(v.is_file() and not v.is_symlink() for v in out.rglob("part-*.parquet"))
    if harm != "deleted":  # the partitions nothing happened to are the same files
        assert {p: v for p, v in parts(out).items() if p in untouched} == untouched
    assert_reads_as_fresh(path, out, tmp_path / "fresh")
    r = export(path, out)  # and then nothing is missing
    assert r.returncode == 0 and "missing or replaced" not in r.stdout and ": 0 new Parquet files" in r.stdout


def test_a_folder_with_files_in_a_parts_place_is_refused(tmp_path):
    """A folder holding something where a part belongs is not removed: one
    Error line, the folder and the manifest left as they were."""
    path = build_catalog(tmp_path, "one")
    out = tmp_path / "exports" / "one"
    assert export(path, out).returncode == 0
    manifest = (out / MARKER).read_bytes()
    victim = next((out / "records").rglob("part-0.parquet"))
    victim.unlink()
    victim.mkdir()
    (victim / "mine.txt").write_text("mine")
    before = parts(out)
    r = export(path, out)
    assert r.returncode == 1
    assert r.stderr == f"Error: {victim} is a folder where a part file belongs: move it away, or add --replace\n"
    assert (victim / "mine.txt").read_text() == "mine"
    assert (out / MARKER).read_bytes() == manifest and parts(out) == before
    assert not list(tmp_path.glob("exports/.one.exporting-*"))


def test_a_manifest_without_sizes_or_mtimes_is_checked_by_what_it_holds(tmp_path):
    """An older txdb's manifest recorded no mtime: its parts are checked by
    size (and the mtime is recorded at the next update); a part with no size
    recorded is written again, since it cannot be checked."""
    path = build_catalog(tmp_path, "one")
    out = tmp_path / "exports" / "one"
    assert export(path, out).returncode == 0
    m = orjson.loads((out / MARKER).read_bytes())
    assert all(type(p["bytes"]) is int and type(p["mtime_ns"]) is int for p in m["parts"])
    for p in m["parts"]:
        del p["mtime_ns"]
    unsure = m["parts"][0]
    del unsure["bytes"]
    (out / MARKER).write_bytes(orjson.dumps(m))
    before = parts(out)
    r = export(path, out)
    assert r.returncode == 0, r.stderr
    assert ", 1 part missing or replaced: written again, " in r.stdout
    assert not (out / unsure["path"]).exists()
    after = orjson.loads((out / MARKER).read_bytes())["parts"]
    assert all(type(p["mtime_ns"]) is int for p in after)
    new = int(r.stdout.split(": ", 1)[1].split()[0])
    assert 0 < new < len(after)  # only the unsure part's partition: the others are the same files
    assert {p: v for p, v in parts(out).items() if p in before} == {p: before[p] for p in set(before) & set(parts(out))}
    assert len(set(parts(out)) & set(before)) == len(after) - new
    assert arrow_counts(out) == catalog_counts(path)
