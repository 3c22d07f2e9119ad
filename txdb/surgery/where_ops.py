"""The ``--where`` op of each command that has a target view
(``commands.py`` holds a reference to it here): ``factory(command, rows,
options, stats)`` builds the ``op(t, original)`` of one session's selected
rows; the op returns the command's typed result (``results``) and counts
what the rows came to in ``stats`` (a ``WhereStats``).

Each op first finds its rows' records in the snapshot it edits (``resolve``):
a row whose record is not where the catalog saw it means the file was
rewritten since it was indexed, and that session is refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from txdb.errors import SurgeryError
from txdb.surgery import ops
from txdb.surgery.command_ops import typed
from txdb.surgery.results import AttachmentsResult, ImagesResult, PersistResult, RangesResult, StripResult

TOOL_KINDS = ("tool_use", "tool_result")
THINKING_KINDS = ("thinking",)


@dataclass
class WhereStats:
    """What one session's selected rows came to."""

    rows: int = 0
    targets: int = 0
    not_strippable: int = 0  # selected rows the command does not change (plain text, commands)
    after_snapshot: int = 0  # appended after the pending copy was taken: apply discards them


def _resolve(original, rows: list[dict], stats: WhereStats) -> list[tuple[dict, object]]:
    """(row, record in the snapshot being edited); a row whose record is not where
    the catalog saw it means the file was rewritten: refuse this session."""
    out = []
    for r in rows:
        rec = original.record_at(r["offset"])
        if rec is None and r["offset"] >= original.size:
            stats.after_snapshot += 1
            continue
        if rec is None or (r["record_uuid"] or None) != (rec.uuid or None):
            raise SurgeryError(f"{Path(r['path']).name} changed since it was indexed (no record "
                               f"{r['record_uuid'] or ''} at offset {r['offset']}): run `txdb refresh` "
                               f"and the command again")
        out.append((r, rec))
    return out


def _merge(a: dict, b: dict) -> dict:
    out = dict(a)
    for k, v in b.items():
        out[k] = out.get(k, 0) + v if isinstance(v, int) else v
    return out


def _start(rows: list[dict], stats: WhereStats) -> None:
    stats.rows, stats.targets, stats.not_strippable, stats.after_snapshot = len(rows), 0, 0, 0


def _strip(rows: list[dict], options: dict, stats: WhereStats, *, tools: bool, thinking: bool):
    """The strip of the selected tool and/or thinking rows; ``options``: tools,
    only_inputs, only_results, keep_last_lines."""
    _start(rows, stats)

    def op(t, original):
        resolved = _resolve(original, rows, stats)
        skip = "tool_use" if options.get("only_results") else "tool_result" if options.get("only_inputs") else None
        tool_rows = [(r, rec) for r, rec in resolved
                     if tools and r["kind"] in TOOL_KINDS and r["tool_use_id"] and r["kind"] != skip]
        think_rows = [(r, rec) for r, rec in resolved if thinking and r["kind"] in THINKING_KINDS]
        stats.not_strippable = len(resolved) - len(tool_rows) - len(think_rows)
        stats.targets = len(tool_rows) + len(think_rows)
        out: dict = {}
        if tool_rows:
            inputs = {r["tool_use_id"] for r, _ in tool_rows if r["kind"] == "tool_use"}
            results = {r["tool_use_id"] for r, _ in tool_rows if r["kind"] == "tool_result"}
            kw = dict(tools=options.get("tools"), keep_last_lines=options.get("keep_last_lines"))
            tools_res = {"inputs": 0, "results": 0, "kept_errors": 0, "chars_before": 0, "chars_after": 0,
                         "records": 0, "tokens_saved": 0}
            if inputs:
                tools_res = _merge(tools_res, ops.strip_tools(t, only_inputs=True, tool_use_ids=inputs, **kw))
            if results:
                tools_res = _merge(tools_res, ops.strip_tools(t, only_results=True, tool_use_ids=results, **kw))
            out["tools"] = tools_res
        if think_rows:
            refs = {ops.BlockRef(rec.uuid, r["idx"]) for r, rec in think_rows if rec.uuid}
            out["thinking"] = ops.strip_thinking(t, blocks=refs)
        out["tokens_saved"] = sum(v.get("tokens_saved", 0) for v in out.values() if isinstance(v, dict))
        return out

    return typed(op, StripResult.of)


def strip_tools(_command: str, rows: list[dict], options: dict, stats: WhereStats):
    return _strip(rows, options, stats, tools=True, thinking=False)


def strip_thinking(_command: str, rows: list[dict], options: dict, stats: WhereStats):
    return _strip(rows, options, stats, tools=False, thinking=True)


def strip_all(_command: str, rows: list[dict], options: dict, stats: WhereStats):
    return _strip(rows, options, stats, tools=True, thinking=True)


def strip_attachments(_command: str, rows: list[dict], options: dict, stats: WhereStats):
    """The selected attachment lines; ``options``: types, keep_recent (default 0),
    drop_all; include_free is implied: the condition chose them."""
    _start(rows, stats)

    def op(t, original):
        uuids = {rec.uuid for _r, rec in _resolve(original, rows, stats) if rec.uuid}
        stats.targets = len(uuids)
        if not uuids:
            return {"attachments": 0, "removed": 0, "tokens_saved": 0, "by_type": {}, "kept": 0}
        kr = options.get("keep_recent")
        res = ops.strip_attachments(t, uuids=uuids, types=options.get("types"), keep_recent=0 if kr is None else kr,
                                    drop_all=bool(options.get("drop_all")), include_free=True)
        res["kept"] = len(uuids) - res["removed"]
        return res

    return typed(op, AttachmentsResult.of)


def replace_images(_command: str, rows: list[dict], options: dict, stats: WhereStats):
    """The images of the selected records; ``options``: dir, drop_missing."""
    _start(rows, stats)

    def op(t, original):
        from txdb.surgery import images  # only a pass that replaces images loads them

        # By uuid: a pending copy from an earlier pass has other offsets.
        uuids = {rec.uuid for _r, rec in _resolve(original, rows, stats) if rec.uuid}
        stats.targets = len(uuids)
        return images.replace_images(t, options["dir"], drop_missing=bool(options.get("drop_missing")), uuids=uuids)

    return typed(op, ImagesResult.of)


def persist_tools(_command: str, rows: list[dict], options: dict, stats: WhereStats):
    """persist-tools over the selected rows: a tool_use or tool_result row moves that call's result."""
    from txdb.surgery import persist

    _start(rows, stats)

    def narrow(_t, original):
        resolved = _resolve(original, rows, stats)
        ids = persist.persist_tool_ids(r for r, _rec in resolved if r["kind"] in TOOL_KINDS)
        stats.not_strippable = sum(1 for r, _rec in resolved if r["kind"] not in TOOL_KINDS)
        stats.targets = len(ids)
        return ids

    sel = persist.Selection(kinds=("tool",), tools=options.get("tools"), keep_recent=options.get("keep_recent") or 0,
                            min_chars=options.get("min_chars") or 0, narrow=narrow)
    return typed(persist.PersistOp(sel, persist.Summaries(options.get("summaries"))), PersistResult.of)


def compact_range(_command: str, rows: list[dict], options: dict, stats: WhereStats):
    """compact-range over the selected chain rows: each run of consecutive
    positions (in the copy being edited) is one range."""
    from txdb.surgery.compact_range import CompactRangeOp, contiguous

    _start(rows, stats)

    def ranges_of(t, original):
        uuids = {rec.uuid for _r, rec in _resolve(original, rows, stats) if rec.uuid}
        positions = [t.by_uuid[u].pos for u in uuids if u in t.by_uuid and t.by_uuid[u].pos is not None]
        stats.targets = len(positions)
        return contiguous(positions)

    return typed(CompactRangeOp(summary=options.get("summary"), ranges_of=ranges_of), RangesResult.of)


def rescue(command: str, rows: list[dict], options: dict, stats: WhereStats):
    """A row of ``sessions_by_context`` is a whole session, rescued whole: the op of a SESSION."""
    from txdb.surgery.command_ops import rescue as session_op

    _start(rows, stats)
    stats.targets = len(rows)
    return session_op(command, options)
