"""Chain integrity of one session file, read from disk.

Used by ``txdb verify`` and by ``apply`` (on the pending copy). Findings
have a severity: an ``error`` means Claude Code would not resume the file as
it stands (or would resume less of it); ``warning`` and ``note`` describe
what real CLI-written files also contain and never fail verification.
"""

from __future__ import annotations

import io
from dataclasses import asdict, dataclass, field
from pathlib import Path

from . import chain as chainmod
from .ingest.lines import READ_BUFFER, parse_line, read_lines
from .records import message_content


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


def verify_file(path: str | Path, sidechain_file: bool | None = None, data: bytes | None = None) -> Report:
    """Verify the file at ``path``, or ``data`` (its bytes, e.g. a snapshot
    prefix or an unwritten copy) reported under that path."""
    path = Path(path)
    report = Report(str(path))
    nodes: list[chainmod.Node] = []
    line_of: dict[int, int] = {}
    objs: dict[int, dict] = {}
    uuid_lines: dict[str, int] = {}
    last_prompts: list[tuple[int, str]] = []
    summaries: list[tuple[int, str]] = []
    add = report.findings.append
    with (open(path, "rb", buffering=READ_BUFFER) if data is None else io.BytesIO(data)) as fh:
        for line in read_lines(fh):
            report.lines += 1
            parsed = parse_line(line.raw)
            if parsed.error:
                sev = "error" if not parsed.objects or len(parsed.objects) > 1 else "warning"
                add(Finding(sev, "parse", parsed.error, line.number))
            for start, _length, obj in parsed.objects:
                off = line.offset + start
                report.records += 1
                uuid = obj.get("uuid") if isinstance(obj.get("uuid"), str) else None
                rtype = obj.get("type")
                leaf = obj.get("leafUuid") if isinstance(obj.get("leafUuid"), str) else None
                if uuid:
                    if uuid in uuid_lines:
                        add(Finding("warning", "duplicate_uuid",
                                    f"uuid {uuid} also on line {uuid_lines[uuid]}", line.number))
                    uuid_lines[uuid] = line.number
                node = chainmod.node_from(off, obj)
                if node is not None:
                    nodes.append(node)
                    line_of[off] = line.number
                    objs[off] = obj
                if rtype == "last-prompt" and leaf:
                    last_prompts.append((line.number, leaf))
                elif rtype == "summary" and leaf:
                    summaries.append((line.number, leaf))
    by_uuid = chainmod.index(nodes)
    chain = chainmod.active_chain(nodes)
    leaf = chain[-1] if chain else None
    report.chain_length = len(chain)
    report.leaf_uuid = leaf.uuid if leaf else None
    if sidechain_file is None:
        sidechain_file = bool(nodes) and all(n.is_sidechain for n in nodes if n.uuid)

    if not chain:
        add(Finding("note", "no_chain", "no conversation to resume in this file"))
    else:
        root = chain[0]
        # Walk again with progress lines to find where the chain really stops.
        top = root
        seen = set()
        while top.parent_uuid and top.parent_uuid in by_uuid and top.uuid not in seen:
            seen.add(top.uuid)
            top = by_uuid[top.parent_uuid]
        if top.parent_uuid and top.parent_uuid not in by_uuid:
            where = line_of.get(top.offset)
            if sidechain_file:
                add(Finding("note", "parent_outside_file",
                            f"chain root's parent {top.parent_uuid} lies outside this file "
                            "(subagent transcripts hang off their parent session)", where))
            else:
                add(Finding("error", "dangling_parent",
                            f"active chain broken: parent {top.parent_uuid} is not in the file; "
                            f"resume would drop everything before line {where}", where))
        if not any(objs[n.offset].get("type") in ("user", "assistant") for n in chain):
            add(Finding("note", "no_messages", "the active chain holds no user or assistant message"))

    # Dangling parents off the active chain cut a branch nobody resumes.
    on_chain = {n.offset for n in chain}
    for n in nodes:
        if n.uuid and n.parent_uuid and n.parent_uuid not in by_uuid and n.offset not in on_chain:
            if n.offset == (chain[0].offset if chain else None):
                continue
            add(Finding("warning" if not sidechain_file else "note", "dangling_parent_off_chain",
                        f"parent {n.parent_uuid} is not in the file (off the active chain)",
                        line_of.get(n.offset)))

    roots = [n for n in nodes if n.uuid and n.parent_uuid is None and n.type in chainmod.CHAIN_TYPES
             and not (n.type == "system" and objs[n.offset].get("subtype") == "compact_boundary")]
    if len(roots) > 1:
        add(Finding("note", "multiple_roots",
                    f"{len(roots)} roots (lines {', '.join(str(line_of[r.offset]) for r in roots[:8])})"))

    # tool_use / tool_result pairing along the active chain.
    uses: dict[str, int] = {}
    results: dict[str, int] = {}
    for pos, n in enumerate(chain):
        for b in _blocks(objs[n.offset]):
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
            sev = "note" if pos >= last - 1 else "warning"
            add(Finding(sev, "tool_use_without_result",
                        f"tool_use {tid} has no tool_result on the active chain", line_of.get(chain[pos].offset)))

    for number, leaf_uuid in last_prompts[-1:]:
        if leaf_uuid not in by_uuid:
            add(Finding("warning", "last_prompt_dangling",
                        f"last-prompt points at {leaf_uuid}, which is not in the file", number))
    for number, leaf_uuid in summaries:
        if leaf_uuid not in by_uuid:
            add(Finding("note", "summary_outside",
                        f"summary leafUuid {leaf_uuid} points outside the file", number))
            break

    prev = None
    out_of_order = 0
    first_line = None
    for n in chain:
        ts = objs[n.offset].get("timestamp")
        if isinstance(ts, str):
            if prev is not None and ts < prev:
                out_of_order += 1
                first_line = first_line or line_of.get(n.offset)
            prev = ts
    if out_of_order:
        add(Finding("note", "timestamps_out_of_order",
                    f"{out_of_order} chain timestamp(s) older than their predecessor", first_line))
    return report
