"""The active chain: what Claude Code walks back from the leaf on --resume.

One function decides it, used by the catalog (stored as the ``chain`` table)
and by the surgery engine, so chain positions mean the same thing in SQL,
``analyze`` and ``--from/--to/--pos``.

Rules, from the format seed and what the real CLI does:
- chain participants are user, assistant, attachment and system lines;
  progress lines carry a uuid but are bridged over (never positions);
- the leaf is the last participant in file order, preferring main-chain
  lines over sidechain ones (subagent files are all sidechain); a later
  ``last-prompt`` line whose leafUuid names another participant wins,
  unless that last participant descends from it: ``last-prompt`` is a
  checkpoint written when a prompt is submitted, and rows appended after
  it extend that branch (CLI 2.1.328 resumes the last row then, e.g. a
  real session whose final ``last-prompt`` names a row 1,800 lines up);
- the walk stops at a null parent (a root, e.g. a compact boundary), at a
  parent that is not in the file, or on a cycle.
"""

from __future__ import annotations

from dataclasses import dataclass

from .records import CHAIN_TYPES


@dataclass(slots=True)
class Node:
    offset: int
    uuid: str | None
    parent_uuid: str | None
    type: str | None
    is_sidechain: bool
    leaf_uuid: str | None = None  # for last-prompt lines


def find_leaf(nodes: list[Node], by_uuid: dict[str, Node]) -> Node | None:
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
        if target is not None and target.type in CHAIN_TYPES and not _descends(leaf, target, by_uuid):
            leaf = target
    return leaf


def _descends(node: Node | None, ancestor: Node, by_uuid: dict[str, Node]) -> bool:
    """Whether ``ancestor`` is on the parentUuid path from ``node`` (inclusive)."""
    seen: set[str] = set()
    while node is not None and node.uuid not in seen:
        if node.uuid == ancestor.uuid:
            return True
        seen.add(node.uuid)
        node = by_uuid.get(node.parent_uuid) if node.parent_uuid else None
    return False


def walk(leaf: Node | None, by_uuid: dict[str, Node]) -> list[Node]:
    """Chain from root (index 0) to ``leaf``, progress lines left out."""
    out: list[Node] = []
    seen: set[str] = set()
    node = leaf
    while node is not None and node.uuid not in seen:
        seen.add(node.uuid)
        if node.type in CHAIN_TYPES:
            out.append(node)
        parent = node.parent_uuid
        node = by_uuid.get(parent) if parent else None
    out.reverse()
    return out


def index(nodes: list[Node]) -> dict[str, Node]:
    # Later lines win when a uuid repeats, as in Claude Code's own map.
    return {n.uuid: n for n in nodes if n.uuid}


def active_chain(nodes: list[Node]) -> list[Node]:
    by_uuid = index(nodes)
    return walk(find_leaf(nodes, by_uuid), by_uuid)
