"""The layers of docs/architecture.md, read from the source and held here:
base < model < catalog (ingest inside) < surgery < web < cli and hook.
Every txdb import (module level or inside a function, absolute or relative,
or a module named by a string such as ``importlib.import_module("txdb.x")``)
points at its own layer or one below; inside model/ a module imports only
the ones listed before it; the import graph has no cycle; no module sits
loose at the top of txdb/ but the base ones. The checker takes a package
root, so each rule is proved on a planted violation in tmp_path."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import txdb

PKG = Path(txdb.__file__).parent

# Floors, lowest first: a module imports its own floor or one below.
LAYERS = ("base", "model", "catalog", "surgery", "web", "entry")
# The modules loose at the top of txdb/: the base floor, and the entry points
# hook (txdb-hook) and __main__ (python -m txdb).
BASE = ("__init__", "errors", "config", "rules", "sql")
ENTRY_TOP = ("hook", "__main__")
# Inside model/, each imports only those before it (the session-file model's own order).
MODEL_ORDER = ("deep", "regular", "paths", "windows", "tokens", "vision", "claude_code", "lines", "policy", "lock", "records",
               "durability", "journal", "chain", "chain_health", "sidecar", "transcript", "verify")
FOLDERS = {"model": "model", "catalog": "catalog", "surgery": "surgery", "web": "web", "cli": "entry"}


def module_names(root: Path) -> dict[str, Path]:
    """Dotted name of every module under the package folder ``root``."""
    out = {}
    pkg = root.name
    for p in sorted(root.rglob("*.py")):
        parts = [pkg, *p.relative_to(root).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


def layer_of(mod: str) -> str | None:
    parts = mod.split(".")[1:]
    if not parts or parts[0] in BASE:
        return "base"
    if parts[0] in ENTRY_TOP:
        return "entry"
    return FOLDERS.get(parts[0])


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def imports(root: Path) -> list[tuple[str, str, int, list[str]]]:
    """(importer, imported module, line, names) for every import of the package
    in its own modules: statements anywhere in a file, and string constants
    that name one of its modules exactly (import_module, -m, plugin names)."""
    mods = module_names(root)
    pkg = root.name
    out = []
    for mod, path in mods.items():
        tree = ast.parse(path.read_text(), str(path))
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        docs = _docstrings(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                if target != pkg and not target.startswith(pkg + "."):
                    continue
                names = [a.name for a in node.names]
                subs = [f"{target}.{n}" for n in names if f"{target}.{n}" in mods]
                plain = [n for n in names if f"{target}.{n}" not in mods]
                for s in subs:
                    out.append((mod, s, node.lineno, []))
                if plain or not subs:
                    out.append((mod, target, node.lineno, plain))
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.name == pkg or a.name.startswith(pkg + "."):
                        out.append((mod, a.name, node.lineno, []))
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
                if node.value in mods and node.value != pkg:
                    out.append((mod, node.value, node.lineno, []))
    return out


def upward_imports(root: Path) -> list[str]:
    """Every import that points at a higher floor, or, inside model/, at a later module."""
    found = []
    for src, dst, line, _ in imports(root):
        ls, ld = layer_of(src), layer_of(dst)
        if ls is None or ld is None:
            found.append(f"{src}:{line} imports {dst}: a module outside the floors")
            continue
        if LAYERS.index(ld) > LAYERS.index(ls):
            found.append(f"{src}:{line} ({ls}) imports {dst} ({ld})")
        elif ls == ld == "model":
            a, b = src.split(".")[-1], dst.split(".")[-1]
            if b == "model" or a == "model":
                continue
            if a not in MODEL_ORDER or b not in MODEL_ORDER:
                found.append(f"{src}:{line} imports {dst}: name both in MODEL_ORDER")
            elif MODEL_ORDER.index(b) >= MODEL_ORDER.index(a):
                found.append(f"{src}:{line} imports {dst}, listed after it in MODEL_ORDER")
    return found


def import_cycles(root: Path) -> list[list[str]]:
    """The import graph's strongly connected parts of more than one module (or a
    module importing itself): every import counts, a lazy one included."""
    graph: dict[str, set[str]] = {m: set() for m in module_names(root)}
    for src, dst, _, _ in imports(root):
        if dst in graph:
            graph[src].add(dst)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    cycles = []

    def visit(v: str) -> None:  # Tarjan
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while True:
                w = stack.pop()
                on.discard(w)
                part.append(w)
                if w == v:
                    break
            if len(part) > 1 or v in graph[v]:
                cycles.append(sorted(part))

    # Put back after: a raised limit left behind lets later tests' json.loads parse what must fail.
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old, 10000))
    try:
        for v in sorted(graph):
            if v not in index:
                visit(v)
    finally:
        sys.setrecursionlimit(old)
    return cycles


def loose_modules(root: Path) -> list[str]:
    """Modules at the top of the package that are neither base nor an entry point."""
    return sorted(p.stem for p in root.glob("*.py") if p.stem not in BASE + ENTRY_TOP)


def private_imports(root: Path) -> list[str]:
    found = []
    for src, dst, line, names in imports(root):
        if layer_of(src) == "entry" and src.split(".")[1] == "cli":
            continue  # the CLI's own framework helpers are another change's
        found += [f"{src}:{line} imports {dst}.{n}" for n in names if n.startswith("_") and not n.startswith("__")]
    return found


def test_every_import_points_at_its_own_floor_or_below():
    assert upward_imports(PKG) == []


def test_the_import_graph_has_no_cycle():
    assert import_cycles(PKG) == []


def test_no_module_sits_loose_at_the_top():
    assert loose_modules(PKG) == []


def test_every_folder_is_a_floor_and_model_order_names_model_exactly():
    folders = sorted(p.name for p in PKG.iterdir() if p.is_dir() and (p / "__init__.py").exists())
    assert folders == sorted(FOLDERS)
    assert sorted(MODEL_ORDER) == sorted(p.stem for p in (PKG / "model").glob("*.py") if p.stem != "__init__")


def test_no_private_name_is_imported_from_another_module():
    assert private_imports(PKG) == []


# -- each rule fails on a planted violation ----------------------------------

def _plant(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "txdb"
    clean = {"__init__.py": "", "errors.py": "", "hook.py": "from txdb.catalog import db\n",
             "model/__init__.py": "", "model/deep.py": "", "model/paths.py": "from txdb.model import deep\n",
             "catalog/__init__.py": "", "catalog/db.py": "from txdb.model.paths import x\nfrom txdb import errors\n",
             "catalog/ingest/__init__.py": "", "catalog/ingest/store.py": "from ..db import y\n",
             "surgery/__init__.py": "", "surgery/ops.py": "from txdb.catalog.ingest import store\n",
             "web/__init__.py": "", "cli/__init__.py": "", "cli/main.py": "import txdb.surgery.ops\n"}
    for rel, text in {**clean, **files}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def test_the_clean_planted_tree_passes(tmp_path):
    root = _plant(tmp_path, {})
    assert (upward_imports(root), import_cycles(root), loose_modules(root), private_imports(root)) == ([], [], [], [])


def test_an_upward_import_fails_in_every_form(tmp_path):
    forms = {
        "module level": "from txdb.catalog.ingest.store import refresh\n",
        "inside a function": "def f():\n    from txdb.surgery import ops\n",
        "relative": "from ..catalog import db\n",
        "import statement": "import txdb.web\n",
        "by a string": "import importlib\nimportlib.import_module('txdb.catalog.db')\n",
    }
    for what, code in forms.items():
        root = _plant(tmp_path / what.replace(" ", "_"), {"model/tokens.py": code})
        assert upward_imports(root), what


def test_catalog_importing_surgery_and_model_order_fail(tmp_path):
    root = _plant(tmp_path / "a", {"catalog/db.py": "def f():\n    import txdb.surgery.ops\n"})
    assert upward_imports(root) == ["txdb.catalog.db:2 (catalog) imports txdb.surgery.ops (surgery)"]
    root = _plant(tmp_path / "b", {"model/deep.py": "from . import paths\n"})
    assert upward_imports(root) == ["txdb.model.deep:1 imports txdb.model.paths, listed after it in MODEL_ORDER"]


def test_a_cycle_fails_even_through_a_lazy_import(tmp_path):
    root = _plant(tmp_path, {"catalog/cost.py": "def f():\n    from txdb.catalog.db import rows\n",
                             "catalog/db.py": "from txdb.catalog import cost\n"})
    assert import_cycles(root) == [["txdb.catalog.cost", "txdb.catalog.db"]]


def test_a_loose_module_fails(tmp_path):
    root = _plant(tmp_path, {"lock.py": ""})
    assert loose_modules(root) == ["lock"]


def test_a_private_name_import_fails(tmp_path):
    root = _plant(tmp_path, {"surgery/ops.py": "from txdb.catalog.db import _hidden\n"})
    assert private_imports(root) == ["txdb.surgery.ops:1 imports txdb.catalog.db._hidden"]


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


def _modules():
    for p in sorted(PKG.rglob("*.py")):
        rel = p.relative_to(PKG)
        yield rel, ast.parse(p.read_text(), str(p))


def test_every_file_naming_fact_is_stated_in_paths_only():
    found = []
    for rel, tree in _modules():
        if rel == Path("model/paths.py") or rel.parts[0] == "cli":  # cli: help texts, another change's files
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
