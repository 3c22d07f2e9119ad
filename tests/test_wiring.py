"""Every declared surgery command is wired everywhere it must be (after
datasette's test_plugin_hooks_have_tests): its ops are its own, it has a CLI
command, docs, property tests and a real-CLI test. A new declaration that
misses one of them fails here, by name."""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from pathlib import Path

import pytest

from txdb.cli import cli
from txdb.cli.commands import COMMANDS as CLI
from txdb.surgery import command_ops, where_ops
from txdb.surgery.commands import COMMANDS, SurgeryCommand
from txdb.surgery.results import Result

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"

# Property tests: any flags, generated and real sessions (test_surgery_props),
# nesting at any depth (test_deep_props).
PROPERTY_TESTS = ("test_surgery_props.py", "test_deep_props.py")

# Commands no real-CLI test drives yet: each named here must stay uncovered
# (the list only shrinks; the test below fails once one is covered).
NO_REALCLI_TEST = {
    "persist-tool": "persist-tools covers the op (the same PersistOp, one tool id)",
    "persist-thinking": "persist-thinkings covers the op (the same PersistOp, one position)",
    "persist-text": "persist-texts covers the op (the same PersistOp, one position)",
    "migrate-persisted": "an older layout made by hand: no release of the CLI writes it",
}


def _strings(path: Path) -> set[str]:
    """Every string constant of a test module (what names a command there)."""
    return {n.value for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.Constant)
            and isinstance(n.value, str)}


def _realcli_strings() -> set[str]:
    out: set[str] = set()
    for p in sorted(TESTS.glob("test_*realcli*.py")):
        out |= _strings(p)
    return out


_NAMES = sorted(COMMANDS)


@pytest.fixture(scope="module")
def loaded():
    for m in {e.module for e in CLI.values()}:
        importlib.import_module(m)
    return cli.commands


@pytest.mark.parametrize("name", _NAMES)
def test_every_declared_command_has_a_cli_command(loaded, name):
    assert name in CLI, f"{name}: no entry in txdb/cli/commands.py"
    assert name in loaded, f"{name}: listed in txdb/cli/commands.py, but {CLI[name].module} defines no such command"
    takes_where = any(p.name == "where" for p in loaded[name].params)
    assert takes_where == (COMMANDS[name].view is not None), f"{name}: --where without a target view, or the reverse"


@pytest.mark.parametrize("name", _NAMES)
def test_every_declared_command_is_documented(name):
    readme = (ROOT / "README.md").read_text()
    assert re.search(rf"^\| `{re.escape(name)}` \|", readme, re.M), f"{name}: no row in README's surgery table"
    surgery = (ROOT / "docs" / "surgery.md").read_text()
    assert re.search(rf"(^#+ .*\b{re.escape(name)}\b|`{re.escape(name)}[ `])", surgery, re.M), (
        f"{name}: docs/surgery.md names it in no heading or table")
    assert f"\n## txdb {name}\n" in (ROOT / "docs" / "commands.md").read_text(), (
        f"{name}: not in docs/commands.md (run cog -r docs/commands.md)")


@pytest.mark.parametrize("name", _NAMES)
def test_every_declared_command_has_property_tests(name):
    assert any(name in _strings(TESTS / f) for f in PROPERTY_TESTS), (
        f"{name}: no property test ({', '.join(PROPERTY_TESTS)}) runs it")


@pytest.mark.parametrize("name", _NAMES)
def test_every_declared_command_has_a_real_cli_test(name):
    covered = name in _realcli_strings()
    if name in NO_REALCLI_TEST:
        assert not covered, f"{name} has a real-CLI test now: take it out of NO_REALCLI_TEST"
    else:
        assert covered, f"{name}: no real-CLI test (tests/test_acceptance_realcli.py or tests/*_realcli.py) runs it"


def test_no_exemption_names_an_undeclared_command():
    assert set(NO_REALCLI_TEST) <= set(COMMANDS)


def _factories(module, first: str) -> dict[str, object]:
    """The op factories a module defines: its public functions whose parameters start with ``first``."""
    return {n: f for n, f in vars(module).items()
            if inspect.isfunction(f) and f.__module__ == module.__name__ and not n.startswith("_")
            and list(inspect.signature(f).parameters)[:len(first)] == first}


def test_every_op_is_a_function_of_its_module_and_each_is_used():
    session = _factories(command_ops, ["command", "options"])
    where = _factories(where_ops, ["_command", "rows", "options", "stats"]) | _factories(
        where_ops, ["command", "rows", "options", "stats"])
    for c in COMMANDS.values():
        assert c.op in session.values(), f"{c.name}: its op is not a factory of command_ops"
        assert issubclass(c.result, Result), c.name
        if c.view is not None:
            assert c.where_op in where.values(), f"{c.name}: its --where op is not a factory of where_ops"
    assert {f for f in session.values()} == {c.op for c in COMMANDS.values()}, "a factory no command uses"
    used = [c.where_op for c in COMMANDS.values() if c.where_op is not None]
    assert len(used) == len(set(used)), "two commands share a --where op: each selects its own rows"
    assert set(where.values()) == set(used), "a --where op no command declares"


def test_a_declaration_needs_its_where_op_with_its_view():
    with pytest.raises(TypeError, match="go together"):
        SurgeryCommand("x", Result, command_ops.fork, "block_targets")
    with pytest.raises(TypeError, match="go together"):
        SurgeryCommand("x", Result, command_ops.fork, None, where_ops.strip_all)
    with pytest.raises(TypeError, match="functions or classes"):
        SurgeryCommand("x", Result, "fork")


def test_every_target_view_is_a_view_the_selection_reads():
    from txdb.catalog.db import view_files
    from txdb.surgery import select

    views = {name for name, _sql in view_files()}
    for c in COMMANDS.values():
        if c.view is not None:
            assert c.view in views, f"{c.name}: no view {c.view} in sql/views"
            assert c.view in select._COLUMNS, f"{c.name}: select._COLUMNS has no columns of {c.view}"
