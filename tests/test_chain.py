"""The active-chain rules shared by the catalog and the surgery engine."""

from __future__ import annotations

import orjson

from sessions import assistant, user, write
from txdb.model import chain as chainmod
from txdb.catalog.ingest.store import refresh


def nodes_of(objs):
    return [chainmod.node_from(i * 1000, o) for i, o in enumerate(objs) if chainmod.node_from(i * 1000, o)]


def uuids(chain):
    return [n.uuid for n in chain]


def parallel_session():
    """One API message written as two assistant lines; the first tool's
    result hangs off the first line, off the parentUuid path (as CLI 2.1.x
    writes parallel tool calls)."""
    u = user("run both", None, uid="u")
    a1 = assistant([{"type": "tool_use", "id": "t1", "name": "Bash", "input": {}}], "u", uid="a1", msg_id="M")
    a2 = assistant([{"type": "tool_use", "id": "t2", "name": "Bash", "input": {}}], "a1", uid="a2", msg_id="M")
    r1 = user([{"type": "tool_result", "tool_use_id": "t1", "content": "one"}], "a1", uid="r1")
    r2 = user([{"type": "tool_result", "tool_use_id": "t2", "content": "two"}], "a2", uid="r2")
    end = assistant("both done", "r2", uid="end", msg_id="N")
    return [u, a1, a2, r1, r2, end]


def test_parallel_tool_results_off_the_path_are_recovered():
    objs = parallel_session()
    assert uuids(chainmod.walk(*_leaf(objs))) == ["u", "a1", "a2", "r2", "end"]
    assert uuids(chainmod.active_chain(nodes_of(objs))) == ["u", "a1", "a2", "r1", "r2", "end"]


def _leaf(objs):
    nodes = nodes_of(objs)
    by = chainmod.index(nodes)
    return chainmod.find_leaf(nodes, by), by


def test_a_repeated_uuid_is_not_recovered_twice():
    objs = parallel_session()
    objs.insert(2, dict(objs[1]))  # the same line written twice
    assert uuids(chainmod.active_chain(nodes_of(objs))) == ["u", "a1", "a2", "r1", "r2", "end"]


def test_preserved_segment_is_relinked_below_the_summary():
    u = user("first", None, uid="u")
    a = assistant("kept answer", "u", uid="a", msg_id="M")
    boundary = {"parentUuid": None, "logicalParentUuid": "a", "type": "system", "subtype": "compact_boundary",
                "uuid": "b", "isSidechain": False,
                "compactMetadata": {"trigger": "manual",
                                    "preservedSegment": {"headUuid": "a", "anchorUuid": "s", "tailUuid": "a"}}}
    summary = user("summary", "b", uid="s", isCompactSummary=True)
    after = user("<local-command-stdout>Compacted</local-command-stdout>", "s", uid="c")
    objs = [u, a, boundary, summary, after]
    assert uuids(chainmod.active_chain(nodes_of(objs))) == ["b", "s", "a", "c"]


def test_incremental_refresh_agrees_with_a_cold_one(conn, tmp_path):
    root = tmp_path / "projects"
    objs = parallel_session()
    path = write(root / "-p" / "s.jsonl", objs[:2])
    refresh(conn, [root])
    for o in objs[2:]:  # appended one line at a time, as the CLI writes
        with open(path, "ab") as fh:
            fh.write(orjson.dumps(o) + b"\n")
        refresh(conn, [root])
    got = [r[0] for r in conn.execute("SELECT uuid FROM active_chain ORDER BY pos")]
    assert got == ["u", "a1", "a2", "r1", "r2", "end"]
