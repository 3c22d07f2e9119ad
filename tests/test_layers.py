"""The layers of docs/architecture.md, read from the source: what sits below
surgery imports none of it (at module level or inside a function), and no
module reaches for another's private names."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import txdb

PKG = Path(txdb.__file__).parent
# Packages that sit on top: they may import anything below them (restore
# writes sessions as surgery does, and takes a --where as select does).
UPPER = ("surgery", "cli", "web", "restore.py")


def _modules():
    for p in sorted(PKG.rglob("*.py")):
        rel = p.relative_to(PKG)
        yield rel, ast.parse(p.read_text(), str(p))


def _imported(rel: Path, tree: ast.AST):
    """(absolute module, names) of every import in the file, wherever it sits."""
    package = ["txdb", *rel.parent.parts]
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            yield mod, [a.name for a in node.names], node.lineno
        elif isinstance(node, ast.Import):
            for a in node.names:
                yield a.name, [], node.lineno


def test_nothing_below_surgery_imports_surgery():
    found = []
    for rel, tree in _modules():
        if rel.parts[0] in UPPER:
            continue
        for mod, names, line in _imported(rel, tree):
            targets = [mod] + [f"{mod}.{n}" for n in names]
            if any(t == "txdb.surgery" or t.startswith("txdb.surgery.") for t in targets):
                found.append(f"{rel}:{line} imports {mod} {names}")
    assert found == []


def test_no_private_name_is_imported_from_another_module():
    found = []
    for rel, tree in _modules():
        if rel.parts[0] == "cli":  # the CLI's own framework helpers are another change's
            continue
        for mod, names, line in _imported(rel, tree):
            if not mod.startswith("txdb"):
                continue
            for n in names:
                if n.startswith("_") and not n.startswith("__"):
                    found.append(f"{rel}:{line} imports {mod}.{n}")
    assert found == []


def test_the_session_model_and_show_load_no_surgery():
    # A fresh process: what refresh, verify and show really load.
    code = ("import sys, txdb.catalog.ingest.store, txdb.model.verify, txdb.catalog.show, txdb.model.transcript, txdb.model.durability; "
            "print(sorted(m for m in sys.modules if m.startswith('txdb.surgery')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_refresh_loads_no_file_model():
    # ingest judges missing parents on chain nodes (chain_health), so a refresh
    # loads neither verify nor the Transcript, sidecars or the write helpers.
    code = ("import sys, txdb.catalog.ingest.store; "
            "print(sorted(m for m in sys.modules if m in ('txdb.model.verify', 'txdb.model.transcript', 'txdb.model.sidecar', "
            "'txdb.model.durability', 'txdb.model.lock') or m.startswith('txdb.surgery')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


# -- file-naming facts: stated in txdb/model/paths.py only -------------------------

NAMING_FACTS = (".jsonl", ".pending", ".pending.json", ".bak", ".swaps.json", "tool-results", ".tool-results",
                "subagents", "agent-")


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def test_every_file_naming_fact_is_stated_in_paths_only():
    found = []
    for rel, tree in _modules():
        if rel == Path("paths.py") or rel.parts[0] == "cli":  # cli: help texts, another change's files
            continue
        docs = _docstrings(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
                v = node.value
                if v in NAMING_FACTS or any(f"/{f}" in v or f"{f}/" in v for f in ("tool-results", "subagents")):
                    found.append(f"{rel}:{node.lineno} {v!r}")
    assert found == []


def test_a_subagent_transcript_and_its_parent(tmp_path):
    from txdb.model import paths
    from txdb.errors import SurgeryError
    from txdb.catalog.ingest.discover import classify
    from txdb.model import sidecar
    from txdb.surgery.fork import check_forkable

    parent = tmp_path / "-proj" / "abc.jsonl"
    sub = paths.subagents_dir(parent) / "agent-x1.jsonl"
    assert sub == tmp_path / "-proj" / "abc" / "subagents" / "agent-x1.jsonl"
    assert paths.parent_session(sub) == parent and paths.parent_session_id(sub) == "abc"
    assert classify(sub, tmp_path) == ("-proj", "subagent", "abc")
    assert sidecar.session_dir(sub) == sidecar.session_dir(parent) == paths.session_folder(parent)
    try:
        check_forkable(sub)
    except SurgeryError as e:
        assert str(parent) in str(e)
    else:
        raise AssertionError("a subagent transcript was forkable")
    assert paths.session_of_copy(paths.backup_of(parent, 2)) == parent == paths.session_of_copy(paths.pending_of(parent))
    assert paths.session_stem(paths.swaps_of(parent)) == "abc"
