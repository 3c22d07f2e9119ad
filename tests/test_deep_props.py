"""A line nested at any depth, read by every command that reads a session:
the line is a stored record or a parse_errors row, the file's other lines
are indexed, and no command ends in a traceback. Depths are sampled from
1 to 20,000, dense around the limits that matter (orjson's 1,024, the
counted 5,000, and where the interpreter's stack used to give out), plus
those boundaries exactly."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from test_bad_input import PLACES, deep_session
from txdb.catalog import db
from txdb.cli import cli
from txdb.model import deep as deepmod
from txdb.catalog.ingest.store import refresh, refresh_path

BOUNDARIES = (1, 1023, 1024, 1025, 3039, 3040, 3041, 4990, 4995, 4996, 5000, 5001, 6078, 6079, 20_000)


def around(centre: int, spread: int = 40):
    return st.integers(max(1, centre - spread), centre + spread)


DEPTH = st.one_of(st.integers(1, 20_000), around(1024), around(3040), around(5000), around(6079))

# Every command that reads a session file, with arguments that give it work
# on the small session of deep_session (chain positions 0..6).
COMMANDS = {
    "verify": [],
    "analyze": [],
    "show-tool": [],
    "show-tool-full": ["--id", "toolu_deep"],
    "show-thinking": [],
    "list-images": [],
    "replace-images": ["--dir", "{tmp}", "--dry-run"],
    "persist-tools": ["--min-chars", "1"],
    "persist-tool": ["--id", "toolu_deep"],
    "persist-range": ["--from", "1", "--to", "5"],
    "persist-message": ["--pos", "2"],
    "persist-thinkings": [],
    "persist-texts": ["--min-chars", "1"],
    "persist-thinking": ["--pos", "3"],
    "persist-text": ["--pos", "3"],
    "migrate-persisted": [],
    "rescue": ["--target", "100"],
    "compact-range": ["--from", "1", "--to", "4"],
    "compact": ["--before", "4"],
    "strip-all": [],
    "strip-attachments": [],
    "reset-usage": [],
    "snapshot": [],
    "fork": [],
}


def _layout(tmp: Path, depth: int, place: str) -> tuple[Path, Path, int]:
    root = tmp / "projects"
    path = root / "-p" / "11111111-2222-3333-4444-555555555555.jsonl"
    path.parent.mkdir(parents=True)
    data, deep_line = deep_session(depth, place)
    path.write_bytes(data)
    return root, path, deep_line


def _indexed(conn, n_lines: int, deep_line: int) -> None:
    lines = {r[0] for r in conn.execute("SELECT line FROM records")}
    errors = {r[0] for r in conn.execute("SELECT line FROM parse_errors WHERE recovered = 0")}
    assert lines | errors == set(range(1, n_lines + 1))
    assert set(range(1, n_lines + 1)) - {deep_line} <= lines  # every other line is a record
    assert errors <= {deep_line}


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(depth=DEPTH, place=st.sampled_from(PLACES))
@example(depth=1, place="tool_use")
@example(depth=3040, place="tool_result")
@example(depth=4995, place="envelope")
@example(depth=6079, place="attachment")
def test_refresh_stores_the_deep_line_or_notes_it(depth, place):
    with tempfile.TemporaryDirectory() as tmp:
        root, path, deep_line = _layout(Path(tmp), depth, place)
        n = len(path.read_bytes().splitlines())
        conn = db.connect(Path(tmp) / "catalog.db")
        try:
            stats = refresh(conn, [root])
            assert stats.unreadable == []
            _indexed(conn, n, deep_line)
            # The watcher's path (one file): the same, and it does not raise.
            with open(path, "ab") as fh:
                fh.write(deep_session(1, "tool_use")[0].splitlines(keepends=True)[0])
            refresh_path(conn, path)
            _indexed(conn, n + 1, deep_line)
        finally:
            conn.close()


@pytest.mark.parametrize("depth", BOUNDARIES)
def test_the_limit_is_counted_the_same_everywhere(depth):
    """The deep line is a record exactly when the whole line nests at most
    MAX_DEPTH levels: not wherever the stack happened to give out."""
    with tempfile.TemporaryDirectory() as tmp:
        root, path, deep_line = _layout(Path(tmp), depth, "tool_result")
        line = path.read_bytes().splitlines()[deep_line - 1]
        levels = _levels(line)
        conn = db.connect(Path(tmp) / "catalog.db")
        try:
            refresh(conn, [root])
            stored = conn.execute("SELECT count(*) FROM records WHERE line = ?", (deep_line,)).fetchone()[0]
        finally:
            conn.close()
        assert stored == (1 if levels <= deepmod.MAX_DEPTH else 0)


def _levels(line: bytes) -> int:
    """Nesting of a line by counting brackets outside strings (an
    independent count, not txdb's)."""
    most = cur = 0
    in_str = esc = False
    for ch in line.decode():
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch in "[{":
            cur += 1
            most = max(most, cur)
        elif ch in "]}":
            cur -= 1
    return most


@pytest.mark.parametrize("name", COMMANDS)
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(depth=DEPTH, place=st.sampled_from(PLACES))
@example(depth=1024, place="tool_use")
@example(depth=3040, place="tool_result")
@example(depth=5000, place="envelope")
@example(depth=6078, place="attachment")
@example(depth=20_000, place="tool_result")
def test_every_command_reading_a_deep_session_ends_cleanly(name, depth, place):
    with tempfile.TemporaryDirectory() as tmp:
        root, path, _ = _layout(Path(tmp), depth, place)
        before = path.read_bytes()
        command = "show-tool" if name == "show-tool-full" else name
        env = {"TXDB_DB": str(Path(tmp) / "catalog.db"), "CLAUDE_CONFIG_DIR": str(Path(tmp))}
        args = [a.format(tmp=tmp) for a in COMMANDS[name]]
        r = CliRunner().invoke(cli, [command, str(path), *args], env=env)
        assert r.exception is None or isinstance(r.exception, SystemExit), (
            f"{name} at depth {depth} ({place}): {r.exception!r}")
        assert "Traceback" not in r.output
        assert r.exit_code in (0, 1), r.output
        if r.exit_code and name != "verify":
            assert r.output.strip().splitlines()[-1].startswith("Error: "), r.output
        assert path.read_bytes() == before  # only apply and undo write a session


SESSION_ID = "11111111-2222-3333-4444-555555555555"


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(depth=DEPTH, place=st.sampled_from(PLACES))
@example(depth=2000, place="prompt")
@example(depth=2001, place="prompt")
@example(depth=3000, place="prompt")
@example(depth=4995, place="envelope")
@example(depth=2001, place="attachment")
@example(depth=5000, place="prompt")
def test_every_view_and_analyze_by_id_answer_over_a_deep_record(depth, place):
    """SQLite's JSON functions refuse JSON nested over 2,000 levels; a
    record that deep is still stored, and every view over the catalog
    answers (its JSON left out of what needs it), as does analyze by id."""
    with tempfile.TemporaryDirectory() as tmp:
        root, path, deep_line = _layout(Path(tmp), depth, place)
        catalog = Path(tmp) / "catalog.db"
        conn = db.connect(catalog)
        try:
            refresh(conn, [root])
            views = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'view'")]
            assert "human_prompts" in views and "cli_cost" in views
            for view in views:
                conn.execute(f'SELECT * FROM "{view}"').fetchall()
                conn.execute(f'SELECT count(*) FROM "{view}"').fetchone()
            if place == "prompt" and depth + 1 <= deepmod.MAX_DEPTH:  # the record's own object is a level
                # the deep prompt is still a human prompt (its JSON is not needed to say so)
                assert conn.execute("SELECT count(*) FROM human_prompts WHERE line = ?",
                                    (deep_line,)).fetchone()[0] == 1
        finally:
            conn.close()
        env = {"TXDB_DB": str(catalog), "CLAUDE_CONFIG_DIR": str(Path(tmp))}
        r = CliRunner().invoke(cli, ["analyze", SESSION_ID], env=env)
        assert r.exception is None, f"analyze at depth {depth} ({place}): {r.exception!r}\n{r.output}"
        assert r.exit_code == 0 and "Traceback" not in r.output, r.output
