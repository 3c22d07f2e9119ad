"""Missing parents judged as Claude Code resumes a file: a gap it bridges is
a warning, messages it would cut off are an error. Judged on a file's chain
nodes (``txdb.model.chain``), so ``txdb verify`` (a file read as a ``Transcript``)
and refresh (a file's catalogued rows, ``ingest.store.store_chain_findings``)
judge alike; refresh loads no file model for it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from txdb.model import chain as chainmod

MESSAGE_TYPES = ("user", "assistant")
MAX_GAPS_LISTED = 20  # a file of orphans is reported, not listed line by line


@dataclass
class Finding:
    severity: str  # error, warning, note
    code: str
    message: str
    line: int | None = None


def plural(n: int, word: str) -> str:
    return f"{n:,} {word}" + ("" if n == 1 else "s")


def _lost_to_missing_parents(nodes, by_uuid, parents, chain, dangling) -> list[chainmod.Node]:
    """User and assistant lines the chain would carry if the missing parents
    were there, and does not. Each record whose parent is gone is hung back
    below the record written before it on its side (main or sidechain): where
    the deleted line's own parent was, since Claude Code writes a child right
    after its parent. A start of file (a partial transcript) has nothing
    before it and is left as it is."""
    relink: dict[int, str] = {}
    previous: dict[bool, str] = {}
    missing = {id(n) for n in dangling}
    for n in nodes:
        if not n.uuid or by_uuid.get(n.uuid) is not n:
            continue
        if id(n) in missing and n.is_sidechain in previous:
            relink[n.offset] = previous[n.is_sidechain]
        previous[n.is_sidechain] = n.uuid
    if not relink:
        return []
    repaired = [replace(n, parent_uuid=relink[n.offset]) if n.offset in relink else n for n in nodes]
    kept = {n.uuid for n in chain}
    return [n for n in chainmod.active_chain(repaired)
            if n.type in MESSAGE_TYPES and not n.is_sidechain and n.uuid not in kept]


def missing_parent_findings(nodes, by_uuid, chain, line_of, sidechain_file) -> list[tuple[Finding, int]]:
    """(finding, offset of its record) for the records whose parentUuid is
    not in the file: the one rule ``verify`` and the catalog's chain health
    (``ingest.store.store_chain_findings``) judge a missing parent by. Resume bridges such a gap
    when a record was written within seconds before (see ``chain``); when it
    cannot, or when the gap moves the leaf resume walks from, user and
    assistant lines drop out of the conversation: an error. A partial
    transcript's first line, a branch before a compact boundary, a subagent
    transcript hanging off its parent session lose nothing: warnings and
    notes."""
    out: list[tuple[Finding, int]] = []

    def add(finding: Finding, offset: int) -> None:
        out.append((finding, offset))

    parents = chainmod.relinks(nodes, by_uuid)
    dangling = [n for n in nodes if n.uuid and by_uuid.get(n.uuid) is n
                and parents.get(n.uuid, n.parent_uuid) and parents.get(n.uuid, n.parent_uuid) not in by_uuid]
    if not dangling:
        return out
    if sidechain_file:
        for n in dangling[:1]:
            add(Finding("note", "parent_outside_file",
                        f"parent {n.parent_uuid} lies outside this file "
                        "(subagent transcripts hang off their parent session)", line_of.get(n.offset)), n.offset)
        return out
    lost = _lost_to_missing_parents(nodes, by_uuid, parents, chain, dangling)
    if lost:
        first = dangling[0]
        lines = sorted(line_of[n.offset] for n in lost)
        more = f" (and {plural(len(dangling) - 1, 'other missing parent')})" if len(dangling) > 1 else ""
        add(Finding("error", "cut_off_messages",
                    f"parent {first.parent_uuid} is not in the file{more}: "
                    f"{plural(len(lost), 'user/assistant line')} "
                    + (f"(line {lines[0]}) is" if len(lines) == 1 else f"(lines {lines[0]}-{lines[-1]}) are")
                    + " not on the chain resume sends", line_of.get(first.offset)), first.offset)
        return out
    on_chain = {n.offset for n in chain}
    for k, n in enumerate(dangling):
        where = line_of.get(n.offset)
        if k == MAX_GAPS_LISTED:
            add(Finding("warning", "more_missing_parents",
                        f"{plural(len(dangling) - k, 'more record')} whose parent is not in the file", where),
                n.offset)
            break
        if chain and n is chain[0]:
            add(Finding("warning", "dangling_parent",
                        f"the chain starts below parent {n.parent_uuid}, which is not in the file "
                        "(nothing before it in the file is lost: a partial transcript?)", where), n.offset)
        elif n.offset in on_chain:
            add(Finding("warning", "bridged_parent",
                        f"parent {n.parent_uuid} is not in the file; resume bridges over it to the record "
                        f"written just before (within {chainmod.BRIDGE_MS // 1000} s)", where), n.offset)
        else:
            add(Finding("warning", "dangling_parent_off_chain",
                        f"parent {n.parent_uuid} is not in the file (off the active chain; "
                        "resume would not send this branch with its parent either)", where), n.offset)
    return out
