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

from dataclasses import asdict, dataclass, field
from pathlib import Path

from txdb.model import chain as chainmod
from txdb.model.lines import GLUED, is_whole_object
from txdb.model import sidecar
from txdb.model.paths import is_pending_name, session_of_copy, session_stem
from txdb.model.chain_health import MESSAGE_TYPES, Finding, missing_parent_findings, plural
from txdb.model.records import message_content
from txdb.model.transcript import Transcript

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


def _check_missing_parents(nodes, by_uuid, chain, line_of, sidechain_file, add) -> None:
    for finding, _offset in missing_parent_findings(nodes, by_uuid, chain, line_of, sidechain_file):
        add(finding)


def verify_file(path: str | Path, sidechain_file: bool | None = None, data: bytes | None = None,
                pending: bool | None = None) -> Report:
    """Verify the file at ``path``, or ``data`` (its bytes, e.g. a snapshot
    prefix or an unwritten copy) reported under that path. A pending copy
    (``pending``; by default, a path ending in ``.jsonl.pending``) is never
    being written: an unfinished last line is an error there, and so is an
    empty copy of a non-empty original."""
    t = Transcript.load(path) if data is None else Transcript.from_bytes(data, path)
    return verify_transcript(t, sidechain_file, pending)


def verify_transcript(t: Transcript, sidechain_file: bool | None = None, pending: bool | None = None) -> Report:
    """``verify_file`` of a transcript as loaded (``apply`` shares the one it
    gives the gate): the chain fields of its records, and their bytes parsed
    again only where a check reads more (the blocks of the active chain).
    One pass over the lines (``_scan``), then one function per check, in
    the order their findings are listed."""
    path = Path(t.path) if t.path is not None else Path("")
    if pending is None:
        pending = is_pending_name(path.name)
    report = Report(str(path))
    add = report.findings.append
    s = _scan(t, report, add)
    _check_end(t, s, report, path, pending, add)
    chain = s.chain
    report.chain_length = len(chain)
    report.leaf_uuid = chain[-1].uuid if chain else None
    if sidechain_file is None:
        sidechain_file = bool(s.nodes) and all(n.is_sidechain for n in s.nodes if n.uuid)
    _check_chain(s, sidechain_file, add)
    _check_roots(s, add)
    _check_tool_pairing(s, add)
    _check_leaf_pointers(s, add)
    _check_sidecars(t, path, add)
    _check_timestamps(s, add)
    return report


@dataclass
class _Scanned:
    """What one pass over a transcript's lines gathers for the checks."""
    t: Transcript
    end: int  # where the last whole line ends
    nodes: list = field(default_factory=list)
    line_of: dict = field(default_factory=dict)  # record offset -> line number
    last_prompts: list = field(default_factory=list)  # (line, leafUuid)
    summaries: list = field(default_factory=list)  # (line, leafUuid)
    by_uuid: dict = field(default_factory=dict)
    chain: list = field(default_factory=list)

    def obj(self, n: chainmod.Node) -> dict:
        return self.t.record_at(n.offset).parse()


def _scan(t: Transcript, report: Report, add) -> _Scanned:
    """Lines and records: parse errors (a glued line as Claude Code reads
    it), duplicate uuids, and the chain nodes, leaf pointers and line
    numbers the other checks read."""
    lines = t.lines
    # A last line without a newline counts only when it is a whole object (ingest.lines.read_lines).
    if lines and not lines[-1].ending.endswith(b"\n") and not is_whole_object(lines[-1].raw + lines[-1].ending):
        lines = lines[:-1]
    s = _Scanned(t, lines[-1].offset + lines[-1].size + lines[-1].end if lines else 0)
    uuid_lines: dict[str, int] = {}
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
                                f"resume loses {plural(len(lost), 'user/assistant message')}", ln.number))
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
                s.nodes.append(node)
                s.line_of[rec.offset] = ln.number
            if node.leaf_uuid and node.type == "last-prompt":
                s.last_prompts.append((ln.number, node.leaf_uuid))
            elif node.leaf_uuid and node.type == "summary":
                s.summaries.append((ln.number, node.leaf_uuid))
    s.by_uuid = chainmod.index(s.nodes)
    s.chain = chainmod.active_chain(s.nodes)
    return s


def _check_end(t: Transcript, s: _Scanned, report: Report, path: Path, pending: bool, add) -> None:
    """An unfinished last line (an error in a pending copy, which is never
    being written), and a pending copy left empty of a non-empty original."""
    unfinished = len(t.data[s.end:].strip())
    if unfinished:
        if pending:
            add(Finding("error", "unfinished_last_line",
                        f"the last line is cut short ({plural(unfinished, 'byte')} without a newline that are "
                        "no whole JSON object); a pending copy is never being written", report.lines + 1))
        else:
            add(Finding("note", "unfinished_last_line",
                        f"the last line is unfinished ({plural(unfinished, 'byte')} without a newline): "
                        "being written? left out", report.lines + 1))
    if pending and report.records == 0:
        original = session_of_copy(path)
        size = original.stat().st_size if original.is_file() else 0
        if size:
            add(Finding("error", "empty_pending_copy",
                        f"the pending copy holds no record while its original {original.name} "
                        f"holds {plural(size, 'byte')}"))


def _check_chain(s: _Scanned, sidechain_file: bool, add) -> None:
    """Something to resume, and the missing parents (``missing_parent_findings``)."""
    if not s.chain:
        add(Finding("note", "no_chain", "no conversation to resume in this file"))
    elif not any(n.type in MESSAGE_TYPES for n in s.chain):
        add(Finding("note", "no_messages", "the active chain holds no user or assistant message"))
    _check_missing_parents(s.nodes, s.by_uuid, s.chain, s.line_of, sidechain_file, add)


def _check_roots(s: _Scanned, add) -> None:
    """More than one root (a compact boundary's own root does not count)."""
    roots = [n for n in s.nodes if n.uuid and n.parent_uuid is None and n.type in chainmod.CHAIN_TYPES
             and not (n.type == "system" and s.obj(n).get("subtype") == "compact_boundary")]
    if len(roots) > 1:
        add(Finding("note", "multiple_roots",
                    f"{len(roots)} roots (lines {', '.join(str(s.line_of[r.offset]) for r in roots[:8])})"))


def _check_tool_pairing(s: _Scanned, add) -> None:
    """tool_use / tool_result pairing along the active chain."""
    chain, line_of = s.chain, s.line_of
    uses: dict[str, int] = {}
    results: dict[str, int] = {}
    for pos, n in enumerate(chain):
        for b in _blocks(s.obj(n)):
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


def _check_leaf_pointers(s: _Scanned, add) -> None:
    """The last last-prompt and the summaries point at records of the file."""
    for number, leaf_uuid in s.last_prompts[-1:]:
        if leaf_uuid not in s.by_uuid:
            add(Finding("warning", "last_prompt_dangling",
                        f"last-prompt points at {leaf_uuid}, which is not in the file", number))
    for number, leaf_uuid in s.summaries:
        if leaf_uuid not in s.by_uuid:
            add(Finding("note", "summary_outside",
                        f"summary leafUuid {leaf_uuid} points outside the file", number))
            break


def _check_timestamps(s: _Scanned, add) -> None:
    """Chain timestamps that go back in time."""
    prev = None
    out_of_order = 0
    first_line = None
    for n in s.chain:
        ts = n.timestamp
        if ts is not None:
            if prev is not None and ts < prev:
                out_of_order += 1
                first_line = first_line or s.line_of.get(n.offset)
            prev = ts
    if out_of_order:
        add(Finding("note", "timestamps_out_of_order",
                    f"{out_of_order} chain timestamp(s) older than their predecessor", first_line))


def _check_sidecars(t: Transcript, path: Path, add) -> None:
    """Markers whose sidecar is not at the path they name: the model's Read
    of that path fails (a moved projects tree, a deleted file)."""
    if not t.path:
        return
    moved, missing = sidecar.unreadable_referenced(t.data, path, session_stem(path))
    if moved:
        add(Finding("warning", "sidecar_moved",
                    f"{plural(len(moved), 'persisted path')} not where the markers say (first: {moved[0]}), "
                    "found under the session's folder: run `txdb migrate-persisted` to re-point them"))
    if missing:
        add(Finding("warning", "sidecar_missing",
                    f"{plural(len(missing), 'persisted path')} found nowhere (first: {missing[0]}): "
                    "the model cannot read that content back"))
