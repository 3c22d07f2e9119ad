"""Files and folders txdb may not read: reported by name, never marked gone.

Permissions are enforced by the kernel for any user but root, and tests may
run as root: each refresh here then runs in a forked child that has dropped
to an unprivileged uid (real files, real SQLite, real permission checks)."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from sessions import conversation, write
from txdb.catalog import db
from txdb.cli import cli
from txdb.catalog.ingest.store import refresh

NOBODY = 65534


def _chown_tree(top: Path, uid: int) -> None:
    for dirpath, dirnames, filenames in os.walk(top):
        os.chown(dirpath, uid, uid)
        for name in filenames:
            os.chown(os.path.join(dirpath, name), uid, uid)


@pytest.fixture
def scene():
    """A folder an unprivileged user can reach (pytest's tmp_path is
    private to root)."""
    if os.geteuid() == 0 and not hasattr(os, "fork"):
        pytest.skip("running as root without fork: cannot drop privileges to test permissions")
    top = Path(tempfile.mkdtemp(prefix="txdb-perm-"))
    os.chmod(top, 0o755)
    yield top
    for dirpath, dirnames, _ in os.walk(top):
        for d in dirnames:
            os.chmod(os.path.join(dirpath, d), 0o755)
    shutil.rmtree(top, ignore_errors=True)


def unprivileged(scene: Path, fn):
    """fn() as a user the kernel checks permissions for; returns its result
    (JSON-able). As root: in a forked child that drops to uid/gid 65534."""
    if os.geteuid() != 0:
        return fn()
    _chown_tree(scene, NOBODY)
    # The child cannot read this interpreter's files (they are root's): what
    # refresh imports only when it needs it (the price library, for a model
    # new to the catalog) is imported here, before the fork.
    import importlib.metadata  # noqa: F401
    import genai_prices  # noqa: F401
    from genai_prices import Usage, calc_price, data_snapshot  # noqa: F401
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 1
        try:
            os.close(r)
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            out = json.dumps({"ok": fn()}).encode()
            code = 0
        except BaseException as e:
            out = json.dumps({"error": f"{type(e).__name__}: {e}"}).encode()
        finally:
            try:
                with os.fdopen(w, "wb") as fh:
                    fh.write(out)
            finally:
                os._exit(code)
    os.close(w)
    with os.fdopen(r, "rb") as fh:
        data = fh.read()
    os.waitpid(pid, 0)
    result = json.loads(data)
    if "error" in result:
        raise AssertionError(f"in the unprivileged child: {result['error']}")
    return result["ok"]


def cli_refresh(db_path: Path, root: Path, *extra: str):
    def run():
        out = CliRunner().invoke(cli, ["refresh", "--root", str(root), "--db", str(db_path), *extra])
        return {"code": out.exit_code, "output": out.output}
    return run


def cli_prune_all(db_path: Path):
    def run():
        out = CliRunner().invoke(cli, ["prune", "--all-gone", "--yes", "--json", "--db", str(db_path)])
        return {"code": out.exit_code, "output": out.output}
    return run


def catalog_rows(db_path: Path) -> dict:
    conn = db.connect(db_path)
    try:
        return {p: (gone, n) for p, gone, n in conn.execute(
            "SELECT f.path, f.gone, (SELECT count(*) FROM records r WHERE r.file_id = f.id) FROM files f")}
    finally:
        conn.close()


def test_an_unreadable_file_is_named_and_the_others_indexed(scene):
    root = scene / "projects"
    ok, locked = root / "-p" / "a.jsonl", root / "-p" / "b.jsonl"
    write(ok, conversation(2, session="a"))
    write(locked, conversation(2, session="b"))
    db_path = scene / "catalog.db"
    conn = db.connect(db_path)  # not a first build: the plain refresh
    conn.close()
    os.chmod(locked, 0o000)
    first = unprivileged(scene, cli_refresh(db_path, root, "--json"))
    assert first["code"] == 0, first["output"]
    stats = json.loads(first["output"])
    assert stats["new"] == 1
    assert stats["unreadable"] == [{"path": str(locked), "error": "Permission denied"}]
    text = unprivileged(scene, cli_refresh(db_path, root))
    assert text["code"] == 0
    assert f"1 could not be read: {locked} (Permission denied)" in text["output"]
    assert catalog_rows(db_path) == {str(ok): (0, 8)}


def test_an_indexed_file_that_grew_and_became_unreadable_keeps_its_rows(scene):
    root = scene / "projects"
    path = root / "-p" / "a.jsonl"
    write(path, conversation(2, session="a"))
    db_path = scene / "catalog.db"
    conn = db.connect(db_path)
    refresh(conn, [root])
    conn.close()
    with open(path, "ab") as fh:
        fh.write(b'{"type":"summary","summary":"later","leafUuid":"x"}\n')
    os.chmod(path, 0o000)
    out = unprivileged(scene, cli_refresh(db_path, root, "--json"))
    stats = json.loads(out["output"])
    assert stats["unreadable"] == [{"path": str(path), "error": "Permission denied"}]
    assert stats["gone"] == 0
    assert catalog_rows(db_path) == {str(path): (0, 8)}


@pytest.mark.parametrize("mode", [0o000, 0o600], ids=["cannot-be-listed", "listed-not-searched"])
def test_files_in_a_folder_that_cannot_be_read_are_not_gone(scene, mode):
    root = scene / "projects"
    kept, other = root / "-q" / "c.jsonl", root / "-p" / "a.jsonl"
    write(kept, conversation(2, session="c"))
    write(other, conversation(1, session="a"))
    db_path = scene / "catalog.db"
    conn = db.connect(db_path)
    refresh(conn, [root])
    conn.close()
    os.chmod(kept.parent, mode)
    out = unprivileged(scene, cli_refresh(db_path, root, "--json"))
    assert out["code"] == 0, out["output"]
    stats = json.loads(out["output"])
    assert stats["gone"] == 0 and stats["pruned"] == 0
    unreadable = {u["path"] for u in stats["unreadable"]}
    assert unreadable == ({str(kept.parent)} if mode == 0o000 else {str(kept)})
    assert catalog_rows(db_path) == {str(kept): (0, 8), str(other): (0, 4)}
    out = unprivileged(scene, cli_prune_all(db_path))  # nothing is gone: nothing is pruned
    assert out["code"] == 0 and json.loads(out["output"])["files"] == 0, out["output"]
    assert catalog_rows(db_path) == {str(kept): (0, 8), str(other): (0, 4)}
    os.chmod(kept.parent, 0o755)
    shutil.rmtree(kept.parent)
    out = unprivileged(scene, cli_refresh(db_path, root, "--json"))
    assert json.loads(out["output"])["gone"] == 1  # gone once it is gone


def test_a_file_name_that_is_not_utf8_is_named_escaped_and_the_others_indexed(tmp_path):
    """Paths may be any bytes; the catalog stores them as text, so a session
    file (or a file in a session's folder) whose name is not UTF-8 is named,
    its bytes escaped, in the summary and in --json, and not catalogued."""
    root = tmp_path / "projects"
    ok = write(root / "-p" / "a.jsonl", conversation(1, session="a"))
    folder = os.fsencode(root / "-p")
    shutil.copyfile(ok, os.path.join(folder, b"caf\xe9.jsonl"))
    side = os.path.join(folder, b"a", b"tool-results")
    os.makedirs(side)
    with open(os.path.join(side, b"toolu_\xff.txt"), "wb") as fh:
        fh.write(b"output\n")
    env = {"TXDB_DB": str(tmp_path / "c.db")}
    for args in (["refresh", "--root", str(root)], ["refresh", "--root", str(root), "--json"]):
        r = CliRunner().invoke(cli, args, env=env)
        assert r.exception is None, repr(r.exception)
        assert r.exit_code == 0, r.output
    r_text = CliRunner().invoke(cli, ["refresh", "--root", str(root)], env=env).output
    assert "caf\\xe9.jsonl (its name is not UTF-8" in r_text
    report = json.loads(r.output)
    named = sorted(u["path"] for u in report["unreadable"])
    assert named == [str(root / "-p" / "a" / "tool-results" / "toolu_\\xff.txt"), str(root / "-p" / "caf\\xe9.jsonl")]
    conn = db.connect(tmp_path / "c.db")
    try:
        assert [p for (p,) in conn.execute("SELECT path FROM files")] == [str(ok)]
    finally:
        conn.close()
