"""The active chain: what Claude Code walks back from the leaf on --resume.

One function decides it, used by the catalog (stored as the ``chain`` table)
and by the surgery engine, so chain positions mean the same thing in SQL,
``analyze`` and ``--from/--to/--pos``.

Rules, from what the real CLI does (docs/catalog.md):
- chain participants are user, assistant, attachment and system lines;
  progress lines carry a uuid but are bridged over (never positions);
  of a line holding several JSON objects glued together only the first
  takes part (CLI 2.1.328 reads the first and drops the rest; the others
  stay records, off the chain, and their children see a missing parent);
- the leaf is the last participant in file order, preferring main-chain
  lines over sidechain ones (subagent files are all sidechain); a later
  ``last-prompt`` line whose leafUuid names another participant wins,
  unless that last participant descends from it: ``last-prompt`` is a
  checkpoint written when a prompt is submitted, and rows appended after
  it extend that branch (CLI 2.1.328 resumes the last row then, e.g. a
  real session whose final ``last-prompt`` names a row 1,800 lines up);
  when the row so chosen reaches no user or assistant record (a tail of
  system lines whose parent is gone), the leaf is the main-chain message
  ending a branch that was written last, as CLI 2.1.328 picks it;
- the walk stops at a null parent (a root, e.g. a compact boundary) or on
  a cycle. A parent that is not in the file (or already walked) is bridged
  as CLI 2.1.328 bridges it: to the participant on the same side (main or
  sidechain), not yet walked, whose timestamp is the latest at or before
  the record's own, when it is at most 5 s older; with none, the walk stops
  there (a deleted line mid-file is bridged over when its neighbours were
  written within seconds, and cuts the chain otherwise). Choosing the leaf
  never bridges: a last row that descends from the ``last-prompt`` leaf
  only across a missing parent does not win over it;
- a compact boundary whose ``compactMetadata.preservedSegment`` names a
  head, tail and anchor (the summary) relinks that segment below the
  anchor: head's parent becomes the anchor, and the anchor's other children
  hang off the tail (CLI 2.1.328 resumes the preserved turns that way);
- parallel tool calls: one API message is written as several assistant
  lines sharing a ``message.id``, and a tool_result line may hang off a
  sibling line that is not on the parentUuid path; such siblings and
  their tool_result lines are recovered into the chain right after the
  message's last line on the path, as the CLI does.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass
from datetime import datetime


from txdb.model.records import CHAIN_TYPES

BRIDGE_MS = 5000  # how much older a bridged-to record may be than the record whose parent is missing


@dataclass(slots=True)
class Node:
    offset: int
    uuid: str | None
    parent_uuid: str | None
    type: str | None
    is_sidechain: bool
    leaf_uuid: str | None = None  # for last-prompt lines
    message_id: str | None = None  # assistant lines: message.id
    tool_result: bool = False  # user lines carrying a tool_result block
    preserved: tuple | None = None  # compact boundary: (head, anchor, tail) uuids
    timestamp: str | None = None


def _s(v):
    return v if isinstance(v, str) else None


def node_from(offset: int, obj: dict) -> Node | None:
    """The chain node of a parsed record, or None when it takes no part."""
    uuid = _s(obj.get("uuid"))
    rtype = obj.get("type")
    if not uuid and rtype != "last-prompt":
        return None
    message_id = None
    tool_result = False
    preserved = None
    msg = obj.get("message")
    if isinstance(msg, dict):
        if rtype == "assistant":
            message_id = _s(msg.get("id"))
        elif rtype == "user" and isinstance(msg.get("content"), list):
            tool_result = any(isinstance(b, dict) and b.get("type") == "tool_result" for b in msg["content"])
    if rtype == "system" and obj.get("subtype") == "compact_boundary":
        meta = obj.get("compactMetadata")
        seg = meta.get("preservedSegment") if isinstance(meta, dict) else None
        if isinstance(seg, dict):
            head, anchor, tail = _s(seg.get("headUuid")), _s(seg.get("anchorUuid")), _s(seg.get("tailUuid"))
            if head and anchor and tail:
                preserved = (head, anchor, tail)
    return Node(offset, uuid, _s(obj.get("parentUuid")), rtype if isinstance(rtype, str) else None,
                bool(obj.get("isSidechain")), _s(obj.get("leafUuid")), message_id, tool_result, preserved,
                _s(obj.get("timestamp")))


def index(nodes: list[Node]) -> dict[str, Node]:
    # Later lines win when a uuid repeats, as in Claude Code's own map.
    return {n.uuid: n for n in nodes if n.uuid}


def relinks(nodes: list[Node], by_uuid: dict[str, Node]) -> dict[str, str]:
    """Parent overrides from compact boundaries' preserved segments."""
    out: dict[str, str] = {}
    for n in nodes:
        if n.preserved is None:
            continue
        head, anchor, tail = n.preserved
        if head not in by_uuid or anchor not in by_uuid or tail not in by_uuid:
            continue
        segment = set()
        node = by_uuid[tail]
        while node is not None and node.uuid not in segment:
            segment.add(node.uuid)
            if node.uuid == head:
                break
            node = by_uuid.get(node.parent_uuid) if node.parent_uuid else None
        if head not in segment:
            continue
        out[head] = anchor
        for m in nodes:
            if m.parent_uuid == anchor and m.uuid and m.uuid not in segment:
                out[m.uuid] = tail
    return out


MESSAGE_TYPES = ("user", "assistant")


def _first_message(node: Node | None, by_uuid: dict[str, Node]) -> Node | None:
    """The first user or assistant record at or above ``node`` (no bridging)."""
    seen: set[str] = set()
    while node is not None and node.uuid not in seen:
        if node.type in MESSAGE_TYPES:
            return node
        seen.add(node.uuid)
        node = by_uuid.get(node.parent_uuid) if node.parent_uuid else None
    return None


def _latest_end_of_branch(nodes: list[Node], by_uuid: dict[str, Node]) -> Node | None:
    """CLI 2.1.328's leaf when the row it would resume from reaches no
    message: the main-chain message that ends a branch (the first message
    above a record nothing hangs off, with no message below it) written
    last; on equal timestamps the first in the file."""
    has_child: set[str] = set()
    has_message_child: set[str] = set()
    for n in nodes:
        if n.uuid and n.parent_uuid:
            has_child.add(n.parent_uuid)
            if n.type in MESSAGE_TYPES:
                has_message_child.add(n.parent_uuid)
    ends: set[str] = set()
    for n in by_uuid.values():
        if n.uuid not in has_child:
            m = _first_message(n, by_uuid)
            if m is not None and not m.is_sidechain and m.uuid not in has_message_child:
                ends.add(m.uuid)
    best, best_t = None, None
    for n in by_uuid.values():
        if n.uuid in ends:
            t = _ms(n.timestamp)
            if t is not None and (best_t is None or t > best_t):
                best, best_t = n, t
    return best


def find_leaf(nodes: list[Node], by_uuid: dict[str, Node], parents: dict[str, str] | None = None,
              whole_file: bool = True) -> Node | None:
    last_main = last_side = None
    last_prompt = None
    for n in nodes:
        if n.uuid and n.type in CHAIN_TYPES:
            if n.is_sidechain:
                last_side = n
            else:
                last_main = n
        elif n.type == "last-prompt" and n.leaf_uuid:
            last_prompt = n
    leaf = last_main or last_side
    if last_prompt is not None and (leaf is None or last_prompt.offset > leaf.offset):
        target = by_uuid.get(last_prompt.leaf_uuid)
        if target is not None and target.type in CHAIN_TYPES and not _descends(leaf, target, by_uuid, parents):
            leaf = target
    if whole_file and leaf is not None and not leaf.is_sidechain and _first_message(leaf, by_uuid) is None:
        # A tail cut off from every message (its parent deleted, say): the CLI
        # resumes the latest branch end instead.
        leaf = _latest_end_of_branch(nodes, by_uuid) or leaf
    return leaf


def _parent(node: Node, parents: dict[str, str] | None) -> str | None:
    if parents and node.uuid in parents:
        return parents[node.uuid]
    return node.parent_uuid


def _descends(node: Node | None, ancestor: Node, by_uuid: dict[str, Node],
              parents: dict[str, str] | None = None) -> bool:
    """Whether ``ancestor`` is on the parentUuid path from ``node`` (inclusive)."""
    seen: set[str] = set()
    while node is not None and node.uuid not in seen:
        if node.uuid == ancestor.uuid:
            return True
        seen.add(node.uuid)
        parent = _parent(node, parents)
        node = by_uuid.get(parent) if parent else None
    return False


def _ms(ts: str | None) -> float | None:
    if not ts:
        return None
    try:
        return datetime.fromisoformat(ts).timestamp() * 1000
    except ValueError:
        return None


class _Bridge:
    """Where the walk goes when a parent is missing: the participant on the
    same side written last at or before the record, if within BRIDGE_MS.
    Built on first use (most files never need it)."""

    def __init__(self, by_uuid: dict[str, Node]):
        self.by_uuid = by_uuid
        self.sides: dict[bool, tuple[list[float], list[Node]]] = {}

    def _side(self, sidechain: bool):
        if sidechain not in self.sides:
            timed = []
            for i, n in enumerate(self.by_uuid.values()):  # file order of first appearance
                t = _ms(n.timestamp) if n.type in CHAIN_TYPES and n.is_sidechain == sidechain else None
                if t is not None:
                    timed.append((t, -i, n))  # equal times: the earliest line is taken
            timed.sort(key=lambda x: (x[0], x[1]))
            # skip[i]: where to look instead of i once i is walked (path-compressed,
            # so a file of orphans bridged one after another stays linear).
            self.sides[sidechain] = ([t for t, _, _ in timed], [n for _, _, n in timed], list(range(len(timed))))
        return self.sides[sidechain]

    def find(self, child: Node, seen: set[str]) -> Node | None:
        t = _ms(child.timestamp)
        if t is None:
            return None
        times, entries, skip = self._side(child.is_sidechain)
        i = bisect_right(times, t) - 1
        passed = []
        while i >= 0:
            if skip[i] != i:
                passed.append(i)
                i = skip[i]
            elif entries[i].uuid in seen:
                skip[i] = i - 1
                passed.append(i)
                i -= 1
            else:
                break
        for k in passed:
            skip[k] = i
        return entries[i] if i >= 0 and t - times[i] <= BRIDGE_MS else None


def walk(leaf: Node | None, by_uuid: dict[str, Node], parents: dict[str, str] | None = None) -> list[Node]:
    """The parentUuid path from root (index 0) to ``leaf``, progress lines
    left out, missing parents bridged (see the module doc)."""
    out: list[Node] = []
    seen: set[str] = set()
    bridge = None
    node = leaf
    while node is not None and node.uuid not in seen:
        seen.add(node.uuid)
        if node.type in CHAIN_TYPES:
            out.append(node)
        parent = _parent(node, parents)
        if not parent:
            break
        nxt = by_uuid.get(parent)
        if nxt is None or nxt.uuid in seen:
            bridge = bridge or _Bridge(by_uuid)
            # A progress line is no record to the CLI: its child asks.
            nxt = bridge.find(out[-1] if node.type not in CHAIN_TYPES and out else node, seen)
        node = nxt
    out.reverse()
    return out


def recover_parallel(path: list[Node], nodes: list[Node]) -> list[Node]:
    """Insert the off-path lines of parallel tool calls into ``path``."""
    if not path:
        return path
    on_path = {n.offset for n in path}
    path_uuids = {n.uuid for n in path}
    last_of: dict[str, int] = {}  # message.id -> index of its last line on the path
    for i, n in enumerate(path):
        if n.type == "assistant" and n.message_id:
            last_of[n.message_id] = i
    if not last_of:
        return path
    group_uuids: dict[str, str] = {}  # uuid of a line of a message on the path -> message.id
    for n in path:
        if n.message_id in last_of and n.uuid:
            group_uuids[n.uuid] = n.message_id
    extra: dict[str, list[Node]] = {}
    for n in nodes:  # file order
        if (n.offset in on_path or not n.uuid or n.uuid in path_uuids
                or n.is_sidechain != path[-1].is_sidechain):
            continue  # on the path, a repeated uuid (the later copy wins), or another chain
        if n.type == "assistant" and n.message_id in last_of:
            mid = n.message_id
        elif n.type == "user" and n.tool_result and n.parent_uuid in group_uuids:
            mid = group_uuids[n.parent_uuid]
        else:
            continue
        extra.setdefault(mid, []).append(n)
        group_uuids[n.uuid] = mid
    if not extra:
        return path
    after: dict[int, list[Node]] = {}
    for mid, found in extra.items():
        # Sibling assistant lines first, then the tool results, each in file order.
        found.sort(key=lambda n: (n.type != "assistant", n.offset))
        after.setdefault(last_of[mid], []).extend(found)
    out: list[Node] = []
    for i, n in enumerate(path):
        out.append(n)
        out.extend(after.get(i, ()))
    return out


def active_chain(nodes: list[Node]) -> list[Node]:
    """Root (0) to leaf: the records Claude Code rebuilds a resumed session from."""
    by_uuid = index(nodes)
    parents = relinks(nodes, by_uuid)
    leaf = find_leaf(nodes, by_uuid, parents)
    return recover_parallel(walk(leaf, by_uuid, parents), nodes)


def extend(new_nodes: list[Node], old_leaf_uuid: str | None) -> list[Node] | None:
    """The chain positions appended lines add after ``old_leaf_uuid``, or
    None when they change more than that (another branch, a last-prompt
    pointing back, parallel tool lines off the path, a preserved segment):
    then the whole chain must be recomputed."""
    if not old_leaf_uuid or any(n.preserved for n in new_nodes):
        return None
    by_new = index(new_nodes)
    leaf = find_leaf(new_nodes, by_new, whole_file=False)
    if leaf is None:
        return [] if not any(n.type == "last-prompt" for n in new_nodes) else None
    last_prompt = next((n for n in reversed(new_nodes) if n.type == "last-prompt" and n.leaf_uuid), None)
    if last_prompt is not None and last_prompt.offset > leaf.offset and last_prompt.leaf_uuid not in by_new:
        return None
    out: list[Node] = []
    node, seen = leaf, set()
    while node is not None and node.uuid not in seen:
        seen.add(node.uuid)
        if node.type in CHAIN_TYPES:
            out.append(node)
        if node.parent_uuid == old_leaf_uuid:
            out.reverse()
            taken = {n.offset for n in out}
            # Lines of these messages (or their results) off the path: recompute.
            mids = {n.message_id for n in out if n.message_id}
            for n in new_nodes:
                if n.offset in taken or not n.uuid:
                    continue
                if (n.message_id and n.message_id in mids) or n.tool_result:
                    return None
            return out
        node = by_new.get(node.parent_uuid) if node.parent_uuid else None
    return None
