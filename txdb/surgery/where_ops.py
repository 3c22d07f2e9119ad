"""The ops of the ``--where`` commands over the rows a condition selected in
one session (each command's factory in ``command_ops.py`` builds its op here
for ``--where``).

Each op first finds its rows' records in the snapshot it edits (``resolve``):
a row whose record is not where the catalog saw it means the file was
rewritten since it was indexed, and that session is refused.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from ..errors import SurgeryError
from . import images, ops

TOOL_KINDS = ("tool_use", "tool_result")
THINKING_KINDS = ("thinking",)
_STATS = {"targets": 0, "not_strippable": 0, "after_snapshot": 0}


def _resolve(original, rows: list[dict], stats: dict) -> list[tuple[dict, object]]:
    """(row, record in the snapshot being edited); a row whose record is not where
    the catalog saw it means the file was rewritten: refuse this session."""
    out = []
    for r in rows:
        rec = original.record_at(r["offset"])
        if rec is None and r["offset"] >= original.size:
            stats["after_snapshot"] += 1  # appended after the pending copy was taken: apply discards it
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


def rows_op(command: str, rows: list[dict], options: dict, stats: dict) -> Callable:
    """The ``op(t, original)`` of ``run_surgery`` for this session's rows.

    ``options``: tools, only_inputs, only_results, keep_last_lines (tool strips);
    types, keep_recent (default 0), drop_all (attachments; include_free is implied);
    dir, drop_missing (images).
    """
    stats.update(_STATS, rows=len(rows))

    def op(t, original):
        resolved = _resolve(original, rows, stats)
        if command == "replace-images":
            # By uuid: a pending copy from an earlier pass has other offsets.
            uuids = {rec.uuid for _r, rec in resolved if rec.uuid}
            stats["targets"] = len(uuids)
            return images.replace_images(t, options["dir"], drop_missing=bool(options.get("drop_missing")),
                                         uuids=uuids)
        if command == "strip-attachments":
            uuids = {rec.uuid for _r, rec in resolved if rec.uuid}
            stats["targets"] = len(uuids)
            if not uuids:
                return {"attachments": 0, "removed": 0, "tokens_saved": 0, "by_type": {}}
            kr = options.get("keep_recent")
            res = ops.strip_attachments(
                t, uuids=uuids, types=options.get("types"), keep_recent=0 if kr is None else kr,
                drop_all=bool(options.get("drop_all")), include_free=True)  # implied: the condition chose them
            res["kept"] = len(uuids) - res["removed"]
            return res
        skip = "tool_use" if options.get("only_results") else "tool_result" if options.get("only_inputs") else None
        tool_rows = [(r, rec) for r, rec in resolved
                     if r["kind"] in TOOL_KINDS and r["tool_use_id"] and r["kind"] != skip]
        think_rows = [(r, rec) for r, rec in resolved if r["kind"] in THINKING_KINDS]
        if command == "strip-tools":
            think_rows = []
        elif command == "strip-thinking":
            tool_rows = []
        stats["not_strippable"] = len(resolved) - len(tool_rows) - len(think_rows)
        stats["targets"] = len(tool_rows) + len(think_rows)
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

    return op


def persist_op(_command: str, rows: list[dict], options: dict, stats: dict):
    stats.update(_STATS, rows=len(rows))
    """persist-tools over the selected rows: a tool_use or tool_result row moves that call's result."""
    from . import persist

    def narrow(_t, original):
        resolved = _resolve(original, rows, stats)
        ids = persist.persist_tool_ids(r for r, _rec in resolved if r["kind"] in TOOL_KINDS)
        stats["not_strippable"] = sum(1 for r, _rec in resolved if r["kind"] not in TOOL_KINDS)
        stats["targets"] = len(ids)
        return ids

    sel = persist.Selection(kinds=("tool",), tools=options.get("tools"), keep_recent=options.get("keep_recent") or 0,
                            min_chars=options.get("min_chars") or 0, narrow=narrow)
    return persist.PersistOp(sel, persist.Summaries(options.get("summaries")))


def compact_range_op(_command: str, rows: list[dict], options: dict, stats: dict):
    stats.update(_STATS, rows=len(rows))
    """compact-range over the selected chain rows: each run of consecutive
    positions (in the copy being edited) is one range."""
    from .compact_range import CompactRangeOp, contiguous

    def ranges_of(t, original):
        uuids = {rec.uuid for _r, rec in _resolve(original, rows, stats) if rec.uuid}
        positions = [t.by_uuid[u].pos for u in uuids if u in t.by_uuid and t.by_uuid[u].pos is not None]
        stats["targets"] = len(positions)
        return contiguous(positions)

    return CompactRangeOp(summary=options.get("summary"), ranges_of=ranges_of)
