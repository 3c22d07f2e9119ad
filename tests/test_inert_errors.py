"""Every ``Error:`` line is inert: a path, an argument or a session's text
with control characters in it prints them as ``\\xNN``, whichever error
(a library refusal, an OS error, a usage error) it came from."""

from __future__ import annotations

import re

import pytest
from click.testing import CliRunner

from sessions import conversation, write
from txdb.cli import cli

HOSTILE = "x\x1b]8;;http://evil.example/\x1b\\y\x1b[2J\rfake\x07\x9b"
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def run(args, tmp_path):
    # color=True: nothing strips escapes on the way, as on a terminal
    return CliRunner().invoke(cli, args, env={"TXDB_DB": str(tmp_path / "c.db")}, color=True)


def assert_one_inert_error(r):
    assert r.exit_code != 0
    assert not isinstance(r.exception, Exception) or isinstance(r.exception, SystemExit), repr(r.exception)
    assert not CONTROL.search(r.output), repr(r.output)
    (line,) = [ln for ln in r.output.splitlines() if ln.startswith("Error: ")]
    assert "\\x1b" in line and "\\x0d" in line  # shown, not swallowed
    return line


@pytest.mark.parametrize("command", ["verify", "analyze", "show-tool", "strip-all", "persist-tools",
                                     "list-images", "snapshot", "apply", "undo"])
def test_a_missing_session_path_with_escapes_prints_inert(tmp_path, command):
    line = assert_one_inert_error(run([command, str(tmp_path / HOSTILE)], tmp_path))
    assert line.startswith("Error: ")


def test_a_refusal_naming_a_hostile_file_prints_inert(tmp_path):
    session = write(tmp_path / "p" / "-p" / "s.jsonl", conversation(2))
    r = run(["persist-range", str(session), "--from", "1", "--to", "2",
             "--summaries-file", str(tmp_path / HOSTILE)], tmp_path)
    assert_one_inert_error(r)



@pytest.mark.parametrize("command", ["verify", "restore"])
def test_an_error_naming_a_path_with_a_newline_stays_one_line(tmp_path, command):
    r = run([command, str(tmp_path / "a\nError: fake\r\tb.jsonl")], tmp_path)
    assert r.exit_code != 0
    (line,) = r.output.splitlines()
    assert line.startswith("Error: ") and "a\\x0aError: fake\\x0d\\x09b.jsonl" in line, repr(r.output)
