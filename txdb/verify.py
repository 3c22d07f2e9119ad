"""Chain integrity of one session file, read from disk.

Used by ``txdb verify`` and by ``apply`` (on the original's snapshot and
the pending copy). A file is read as a surgery ``Transcript`` (its bytes
and a ``chain.Node`` per record); a record is parsed again only where a
check reads more than its chain fields. Findings
have a severity: an ``error`` means Claude Code would not resume the file as
it stands (or would resume less of it); ``warning`` and ``note`` describe
what real CLI-written files also contain and never fail verification.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from . import chain as chainmod
from .ingest.lines import GLUED, is_whole_object
from .records import message_content

if TYPE_CHECKING:
    from .surgery.transcript import Transcript

MESSAGE_TYPES = ("user", "assistant")
MAX_GAPS_LISTED = 20  # a file of orphans is reported, not listed line by line


@dataclass
class Finding:
    severity: str  # error, warning, note
    code: str
    message: str
    line: int | None = None


@dataclass
class Report:
    path: str
    lines: int = 0
    records: int = 0
    chain_length: int = 0
    leaf_uuid: str | None = None
    findings: list[Finding] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not any(f.severity == "error" for f in self.findings)

    def counts(self) -> dict[str, int]:
        out = {"error": 0, "warning": 0, "note": 0}
        for f in self.findings:
            out[f.severity] = out.get(f.severity, 0) + 1
        return out

    def as_dict(self) -> dict:
        d = asdict(self)
        d["ok"] = self.ok
        d["counts"] = self.counts()
        return d


def _blocks(obj):
    content = message_content(obj)
    return content if isinstance(content, list) else []


def _plural(n: int, word: str) -> str:
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


def _check_missing_parents(nodes, by_uuid, chain, line_of, sidechain_file, add) -> None:
    for finding, _offset in missing_parent_findings(nodes, by_uuid, chain, line_of, sidechain_file):
        add(finding)


def missing_parent_findings(nodes, by_uuid, chain, line_of, sidechain_file) -> list[tuple[Finding, int]]:
    """(finding, offset of its record) for the records whose parentUuid is
    not in the file: the one rule ``verify`` and the catalog's chain health
    (``store_chain_findings``) judge a missing parent by. Resume bridges such a gap
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
        more = f" (and {_plural(len(dangling) - 1, 'other missing parent')})" if len(dangling) > 1 else ""
        add(Finding("error", "cut_off_messages",
                    f"parent {first.parent_uuid} is not in the file{more}: "
                    f"{_plural(len(lost), 'user/assistant line')} "
                    + (f"(line {lines[0]}) is" if len(lines) == 1 else f"(lines {lines[0]}-{lines[-1]}) are")
                    + " not on the chain resume sends", line_of.get(first.offset)), first.offset)
        return out
    on_chain = {n.offset for n in chain}
    for k, n in enumerate(dangling):
        where = line_of.get(n.offset)
        if k == MAX_GAPS_LISTED:
            add(Finding("warning", "more_missing_parents",
                        f"{_plural(len(dangling) - k, 'more record')} whose parent is not in the file", where),
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


def store_chain_findings(conn, file_id: int) -> int:
    """Judge a catalogued file's missing parents as ``verify`` does, from its
    records rows, and keep the findings in ``chain_findings`` (which the
    ``chain_health`` view reads). Refresh calls it for every file it
    changed; only a file with a row in ``dangling_parents`` has anything to
    judge, so the others cost one lookup. Returns the findings kept."""
    conn.execute("DELETE FROM chain_findings WHERE file_id = ?", (file_id,))
    if conn.execute("SELECT 1 FROM dangling_parents WHERE file_id = ? LIMIT 1", (file_id,)).fetchone() is None:
        return 0
    nodes = chainmod.load_nodes(conn, file_id)
    line_of = dict(conn.execute("SELECT offset, line FROM records WHERE file_id = ? AND uuid IS NOT NULL",
                                (file_id,)))
    by_uuid = chainmod.index(nodes)
    chain = chainmod.active_chain(nodes)
    sidechain_file = bool(nodes) and all(n.is_sidechain for n in nodes if n.uuid)
    rows = [(file_id, offset, f.severity, f.code, f.message)
            for f, offset in missing_parent_findings(nodes, by_uuid, chain, line_of, sidechain_file)]
    conn.executemany("INSERT OR REPLACE INTO chain_findings (file_id, offset, severity, code, detail) "
                     "VALUES (?,?,?,?,?)", rows)
    return len(rows)


PENDING_SUFFIX = ".jsonl.pending"


def verify_file(path: str | Path, sidechain_file: bool | None = None, data: bytes | None = None,
                pending: bool | None = None) -> Report:
    """Verify the file at ``path``, or ``data`` (its bytes, e.g. a snapshot
    prefix or an unwritten copy) reported under that path. A pending copy
    (``pending``; by default, a path ending in ``.jsonl.pending``) is never
    being written: an unfinished last line is an error there, and so is an
    empty copy of a non-empty original."""
    # Imported here: refresh uses this module (store_chain_findings) and loads nothing of surgery.
    from .surgery.transcript import Transcript
    t = Transcript.load(path) if data is None else Transcript.from_bytes(data, path)
    return verify_transcript(t, sidechain_file, pending)


def verify_transcript(t: Transcript, sidechain_file: bool | None = None, pending: bool | None = None) -> Report:
    """``verify_file`` of a transcript as loaded (``apply`` shares the one it
    gives the gate): the chain fields of its records, and their bytes parsed
    again only where a check reads more (the blocks of the active chain)."""
    path = Path(t.path) if t.path is not None else Path("")
    if pending is None:
        pending = path.name.endswith(PENDING_SUFFIX)
    report = Report(str(path))
    lines = t.lines
    # A last line without a newline counts only when it is a whole object (ingest.lines.read_lines).
    if lines and not lines[-1].ending.endswith(b"\n") and not is_whole_object(lines[-1].raw + lines[-1].ending):
        lines = lines[:-1]
    end = lines[-1].offset + lines[-1].size + lines[-1].end if lines else 0  # where the last whole line ends
    nodes: list[chainmod.Node] = []
    line_of: dict[int, int] = {}
    uuid_lines: dict[str, int] = {}
    last_prompts: list[tuple[int, str]] = []
    summaries: list[tuple[int, str]] = []
    add = report.findings.append
    records = t.records
    for ln in lines:
        report.lines += 1
        error = ln.error if ln.raw.strip() else "blank line"
        if error:
            if ln.count > 1 and error.endswith(GLUED):
                # Claude Code (2.1.328) reads the first object of the line and
                # drops the rest: only a message among them is lost to resume.
                dropped = [records[i].node.type for i in ln.records[1:]]
                lost = [t for t in dropped if t in MESSAGE_TYPES]
                if lost:
                    add(Finding("error", "parse", f"{error}; Claude Code reads only the first object, so "
                                f"resume loses {_plural(len(lost), 'user/assistant message')}", ln.number))
                else:
                    add(Finding("warning", "parse", f"{error}; Claude Code reads only the first object "
                                f"and loses no message ({', '.join(dropped)} left out)", ln.number))
            else:
                add(Finding("error" if ln.count != 1 else "warning", "parse", error, ln.number))
        for rec in (records[i] for i in ln.records):
            report.records += 1
            node = rec.node
            uuid = node.uuid
            if uuid:
                if uuid in uuid_lines:
                    add(Finding("warning", "duplicate_uuid", f"uuid {uuid} also on line {uuid_lines[uuid]}", ln.number))
                uuid_lines[uuid] = ln.number
            if rec.chained:
                nodes.append(node)
                line_of[rec.offset] = ln.number
            if node.leaf_uuid and node.type == "last-prompt":
                last_prompts.append((ln.number, node.leaf_uuid))
            elif node.leaf_uuid and node.type == "summary":
                summaries.append((ln.number, node.leaf_uuid))
    unfinished = len(t.data[end:].strip())
    if unfinished:
        if pending:
            add(Finding("error", "unfinished_last_line",
                        f"the last line is cut short ({_plural(unfinished, 'byte')} without a newline that are "
                        "no whole JSON object); a pending copy is never being written", report.lines + 1))
        else:
            add(Finding("note", "unfinished_last_line",
                        f"the last line is unfinished ({_plural(unfinished, 'byte')} without a newline): "
                        "being written? left out", report.lines + 1))
    if pending and report.records == 0:
        original = path.with_name(path.name[: -len(".pending")])
        size = original.stat().st_size if original.is_file() else 0
        if size:
            add(Finding("error", "empty_pending_copy",
                        f"the pending copy holds no record while its original {original.name} "
                        f"holds {_plural(size, 'byte')}"))

    def obj(n: chainmod.Node) -> dict:
        return t.record_at(n.offset).parse()

    by_uuid = chainmod.index(nodes)
    chain = chainmod.active_chain(nodes)
    leaf = chain[-1] if chain else None
    report.chain_length = len(chain)
    report.leaf_uuid = leaf.uuid if leaf else None
    if sidechain_file is None:
        sidechain_file = bool(nodes) and all(n.is_sidechain for n in nodes if n.uuid)

    if not chain:
        add(Finding("note", "no_chain", "no conversation to resume in this file"))
    elif not any(n.type in MESSAGE_TYPES for n in chain):
        add(Finding("note", "no_messages", "the active chain holds no user or assistant message"))
    _check_missing_parents(nodes, by_uuid, chain, line_of, sidechain_file, add)

    roots = [n for n in nodes if n.uuid and n.parent_uuid is None and n.type in chainmod.CHAIN_TYPES
             and not (n.type == "system" and obj(n).get("subtype") == "compact_boundary")]
    if len(roots) > 1:
        add(Finding("note", "multiple_roots",
                    f"{len(roots)} roots (lines {', '.join(str(line_of[r.offset]) for r in roots[:8])})"))

    # tool_use / tool_result pairing along the active chain.
    uses: dict[str, int] = {}
    results: dict[str, int] = {}
    for pos, n in enumerate(chain):
        for b in _blocks(obj(n)):
            if not isinstance(b, dict):
                continue
            if b.get("type") == "tool_use" and isinstance(b.get("id"), str):
                uses[b["id"]] = pos
            elif b.get("type") == "tool_result" and isinstance(b.get("tool_use_id"), str):
                results[b["tool_use_id"]] = pos
    for tid, pos in results.items():
        if tid not in uses:
            add(Finding("error", "orphan_tool_result",
                        f"tool_result for {tid} has no tool_use on the active chain",
                        line_of.get(chain[pos].offset)))
        elif uses[tid] > pos:
            add(Finding("error", "tool_result_before_use",
                        f"tool_result for {tid} comes before its tool_use", line_of.get(chain[pos].offset)))
    last = len(chain) - 1
    for tid, pos in uses.items():
        if tid not in results:
            # Mid-conversation, resume drops a call that was never answered (and with it
            # a line holding nothing else); the last turn's may still be running.
            if pos >= last - 1:
                add(Finding("note", "tool_use_without_result",
                            f"tool_use {tid} has no tool_result on the active chain", line_of.get(chain[pos].offset)))
            else:
                add(Finding("error", "tool_use_without_result",
                            f"tool_use {tid} has no tool_result on the active chain; resume drops the call",
                            line_of.get(chain[pos].offset)))

    for number, leaf_uuid in last_prompts[-1:]:
        if leaf_uuid not in by_uuid:
            add(Finding("warning", "last_prompt_dangling",
                        f"last-prompt points at {leaf_uuid}, which is not in the file", number))
    for number, leaf_uuid in summaries:
        if leaf_uuid not in by_uuid:
            add(Finding("note", "summary_outside",
                        f"summary leafUuid {leaf_uuid} points outside the file", number))
            break

    _check_sidecars(t, path, add)

    prev = None
    out_of_order = 0
    first_line = None
    for n in chain:
        ts = n.timestamp
        if ts is not None:
            if prev is not None and ts < prev:
                out_of_order += 1
                first_line = first_line or line_of.get(n.offset)
            prev = ts
    if out_of_order:
        add(Finding("note", "timestamps_out_of_order",
                    f"{out_of_order} chain timestamp(s) older than their predecessor", first_line))
    return report


def _check_sidecars(t: Transcript, path: Path, add) -> None:
    """Markers whose sidecar is not at the path they name: the model's Read
    of that path fails (a moved projects tree, a deleted file)."""
    if not t.path:
        return
    from .ingest.discover import session_stem
    from .surgery import sidecar

    moved, missing = sidecar.unreadable_referenced(t.data, path, session_stem(path))
    if moved:
        add(Finding("warning", "sidecar_moved",
                    f"{_plural(len(moved), 'persisted path')} not where the markers say (first: {moved[0]}), "
                    "found under the session's folder: run `txdb migrate-persisted` to re-point them"))
    if missing:
        add(Finding("warning", "sidecar_missing",
                    f"{_plural(len(missing), 'persisted path')} found nowhere (first: {missing[0]}): "
                    "the model cannot read that content back"))
