"""The raw lines in compressed chunks (txdb/catalog/ingest/chunks.py): a growing
file rewrites only its last chunk, every line comes back byte for byte
after any sequence of appends, and ad-hoc SQL reads a line's JSON through
txdb_json() in `txdb query` while no view needs it."""

from __future__ import annotations

import json
import sqlite3

from conftest import DATA, run
from txdb.catalog import db
from txdb.catalog.ingest import chunks
from txdb.catalog.ingest.store import refresh

SESSION = DATA / "projects" / "-experiments-worktrees" / "ef958aa1-0e93-49f0-bb71-150f63befcd1.jsonl"


def _lines(data: bytes) -> list[tuple[int, bytes]]:
    out, at = [], 0
    for line in data.splitlines(keepends=True):
        if line.strip():
            out.append((at, line.rstrip(b"\r\n")))
        at += len(line)
    return out


def test_a_growing_file_rewrites_only_its_last_chunk(tmp_path, monkeypatch):
    monkeypatch.setattr(chunks, "CHUNK_BYTES", 4096)  # many chunks from a small session
    data = SESSION.read_bytes()
    lines = data.splitlines(keepends=True)
    assert len(lines) > 40 and len(data) > 8 * 4096
    projects = tmp_path / "projects"
    path = projects / "-p" / SESSION.name
    path.parent.mkdir(parents=True)
    conn = db.connect(tmp_path / "c.db")
    written = b""
    before: dict[int, bytes] = {}
    step = max(1, len(lines) // 12)
    for i in range(0, len(lines), step):
        with open(path, "ab") as fh:
            fh.write(b"".join(lines[i:i + step]))
        written += b"".join(lines[i:i + step])
        refresh(conn, [projects])
        (fid,) = conn.execute("SELECT id FROM files").fetchone()
        now = dict(conn.execute("SELECT id, data FROM raw_chunks WHERE file_id = ?", (fid,)).fetchall())
        last = max(now)
        # every chunk but the last one is kept as it was: an append never recompresses them
        assert all(k in now and now[k] == v for k, v in before.items())
        before = {k: v for k, v in now.items() if k != last}
        assert list(chunks.raw_lines(conn, fid)) == _lines(written)
    assert conn.execute("SELECT count(*) FROM raw_chunks").fetchone()[0] >= len(data) // (2 * 4096)
    assert conn.execute("SELECT sum(bytes) FROM raw_chunks").fetchone()[0] == sum(len(r) for _, r in _lines(data))
    # one record reached alone, and from SQL
    offset, raw = _lines(data)[len(_lines(data)) // 2]
    assert chunks.raw_line(conn, fid, offset) == raw
    assert conn.execute("SELECT txdb_json(?, ?)", (fid, offset)).fetchone() == (raw.decode(),)
    assert conn.execute("SELECT txdb_json(?, ?)", (fid, offset + 1)).fetchone() == (None,)


def test_ad_hoc_sql_reads_a_lines_json_and_no_view_needs_the_function(tmp_path, monkeypatch):
    projects = tmp_path / "claude" / "projects"
    (projects / "-p").mkdir(parents=True)
    (projects / "-p" / SESSION.name).write_bytes(SESSION.read_bytes())
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "claude"))
    catalog = tmp_path / "c.db"
    run("refresh", "--db", catalog, ok=True)
    sql = ("select json_extract(txdb_json(file_id, offset), '$.cwd') as cwd, count(*) as n from records "
           "where type = 'user' group by cwd")
    out = json.loads(run("query", "--db", catalog, sql, "--json", ok=True).output)
    want = {}
    for _, raw in _lines(SESSION.read_bytes()):
        obj = json.loads(raw)
        if obj.get("type") == "user":
            want[obj.get("cwd")] = want.get(obj.get("cwd"), 0) + 1
    assert {r["cwd"]: r["n"] for r in out} == want
    # a plain sqlite3 connection (no txdb function) reads every view
    plain = sqlite3.connect(catalog)
    views = [n for (n,) in plain.execute("SELECT name FROM sqlite_master WHERE type = 'view'")]
    assert len(views) > 30
    for v in views:
        plain.execute(f'SELECT * FROM "{v}" LIMIT 1').fetchall()
    plain.close()
