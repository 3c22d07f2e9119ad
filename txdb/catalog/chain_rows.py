"""The chain of a catalogued file, read from its rows: the nodes
``txdb.model.chain`` walks, built from ``records`` (and, for compact
boundaries, their raw JSON) instead of from the file."""

from __future__ import annotations

import orjson

from txdb.catalog.ingest.chunks import raw_at
from txdb.model.chain import Node, active_chain, index, node_from, walk


def load_nodes(conn, file_id: int) -> list[Node]:
    """A catalogued file's chain nodes, in file order, from its records rows."""
    # A record on the same line as the one before it is a later object of a glued line: no node.
    rows = conn.execute(
        "SELECT offset, uuid, parent_uuid, type, is_sidechain, leaf_uuid, message_id, "
        "  type = 'user' AND EXISTS (SELECT 1 FROM blocks b WHERE b.file_id = r.file_id "
        "    AND b.offset = r.offset AND b.kind = 'tool_result'), "
        "  subtype = 'compact_boundary', timestamp "
        "FROM (SELECT *, line IS lag(line) OVER (ORDER BY offset) AS later FROM records WHERE file_id = ?) r "
        "WHERE NOT later AND (uuid IS NOT NULL OR type = 'last-prompt') ORDER BY offset",
        (file_id,),
    )
    rows = rows.fetchall()
    boundaries = raw_at(conn, file_id, (r[0] for r in rows if r[8]))  # only those need their JSON
    nodes = []
    for o, u, p, t, s, lf, mid, tr, boundary, ts in rows:
        if boundary and o in boundaries:
            node = node_from(o, orjson.loads(boundaries[o]))
        else:
            node = Node(o, u, p, t, bool(s), lf, mid if t == "assistant" else None, bool(tr), timestamp=ts)
        nodes.append(node)
    return nodes


def compact_boundaries(conn, file_id: int) -> dict[int, str | None]:
    """Compact boundaries of a catalogued file: offset -> the uuid of the last
    record before it (its ``logicalParentUuid``, or None)."""
    return {o: p for o, p in conn.execute(
        "SELECT offset, logical_parent_uuid FROM records WHERE file_id = ? AND type = 'system' "
        "AND subtype = 'compact_boundary'", (file_id,))}


def compacted_history(conn, file_id: int) -> tuple[list[Node], dict[int, str | None]]:
    """A catalogued session's whole history and its compact boundaries: the
    active chain preceded by the chains that compactions left behind (each
    boundary's logicalParentUuid leads to the chain it summarised), in file
    order (time order: a compaction's preserved messages sit after the
    boundary on the chain, but were recorded before it)."""
    nodes = load_nodes(conn, file_id)
    by_uuid = index(nodes)
    segments = [active_chain(nodes)]
    boundaries = compact_boundaries(conn, file_id)
    seen = {n.offset for n in segments[0]}
    while segments[0] and segments[0][0].offset in boundaries:
        before = by_uuid.get(boundaries[segments[0][0].offset])
        earlier = walk(before, by_uuid) if before is not None else []
        earlier = [n for n in earlier if n.offset not in seen]
        if not earlier:
            break
        seen.update(n.offset for n in earlier)
        segments.insert(0, earlier)
    return sorted((n for seg in segments for n in seg), key=lambda n: n.offset), boundaries
