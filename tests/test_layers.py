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
# Packages that sit on top: they may import anything below them.
UPPER = ("surgery", "cli", "web")


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
    code = ("import sys, txdb.ingest.store, txdb.verify, txdb.show, txdb.transcript, txdb.durability; "
            "print(sorted(m for m in sys.modules if m.startswith('txdb.surgery')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
