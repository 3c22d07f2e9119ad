"""The op of each declared command for a SESSION (``commands.py`` holds a
reference to its factory here; its ``--where`` op is in ``where_ops``).

``factory(command, options)`` builds the ``op(t, original)`` that
``engine.run_surgery`` runs; the op returns the command's typed result
(``results``). ``options`` are the command's own options (plain values: the
CLI passes what the user gave, a library caller the same keys) and may
carry ``positions`` (--from/--to). A key the command does not know is
ignored, a missing one takes the command's default.
"""

from __future__ import annotations

from typing import Callable

from txdb.surgery import ops
from txdb.surgery.results import (AttachmentsResult, CompactResult, ImagesResult, MigrateResult, PersistResult,
    RangesResult, RescueResult, Result, StripResult, UsageResult)


class _Typed(ops.Op):
    """``op`` whose report comes back as a typed result (``make``); the rest of the op is its own."""

    def __init__(self, op, make: Callable[[dict], Result]):
        self.op, self.make = ops.as_op(op), make

    def __call__(self, t, original):
        return self.make(self.op(t, original))

    def check_positions(self, t, positions):
        self.op.check_positions(t, positions)

    def write_files(self, owner=None):
        return self.op.write_files(owner)

    def remove_files(self):
        self.op.remove_files()


def typed(op, make: Callable[[dict], Result]) -> ops.Op:
    return _Typed(op, make)


def strip_tools(command: str, options: dict):
    return typed(lambda t, _o: ops.strip_tools(
        t, tools=options.get("tools"), only_inputs=bool(options.get("only_inputs")),
        only_results=bool(options.get("only_results")), keep_last_lines=options.get("keep_last_lines"),
        positions=options.get("positions")), StripResult.of_tools)


def strip_thinking(command: str, options: dict):
    return typed(lambda t, _o: ops.strip_thinking(t, positions=options.get("positions")), StripResult.of_thinking)


def strip_all(command: str, options: dict):
    return typed(lambda t, _o: ops.strip_all(t, tools=options.get("tools"),
                                             keep_last_lines=options.get("keep_last_lines"),
                                             positions=options.get("positions")), StripResult.of)


def strip_attachments(command: str, options: dict):
    """The policy: the newest ``keep_recent`` (default 1) of each superseded type."""
    kw = attachment_options(options)
    return typed(lambda t, _o: ops.strip_attachments(t, **kw), AttachmentsResult.of)


def attachment_options(options: dict) -> dict:
    """strip-attachments' keywords of ``ops.attachment_plan`` for a SESSION (also
    what ``--list`` shows)."""
    kr = options.get("keep_recent")
    return dict(types=options.get("types"), keep_recent=1 if kr is None else kr,
                drop_all=bool(options.get("drop_all")), include_free=bool(options.get("include_free")),
                positions=options.get("positions"))


def replace_images(command: str, options: dict):
    from txdb.surgery import images

    return typed(lambda t, _o: images.replace_images(t, options["dir"], drop_missing=bool(options.get("drop_missing")),
                                                     positions=options.get("positions")), ImagesResult.of)


def reset_usage(command: str, options: dict):
    """The op is the reset (the caller turns the engine's own reset after an edit off)."""
    from txdb.surgery.usage import reset_usage as reset

    def op(t, original):
        # Standalone (no earlier pass in a pending copy): no "before" to compare with.
        standalone = t.fork_of is not None or t.digest() == original.digest()
        return reset(t, None if standalone else original)
    return typed(op, UsageResult.of)


def fork(command: str, options: dict):
    """The engine's fork is the whole pass: the op changes nothing."""
    return typed(lambda _t, _o: {}, Result.of)


def compact(command: str, options: dict):
    """``options``: ``before``, the first chain position kept."""
    from txdb.surgery.compact import compact_before
    from txdb.surgery.usage import context_estimator

    before = options["before"]
    return typed(lambda t, original: compact_before(t, before, source=str(original.path),
                                                    pre_tokens=context_estimator(original)(original)),
                 CompactResult.of)


def compact_range(command: str, options: dict):
    """The range ``positions`` (--from/--to)."""
    from txdb.surgery.compact_range import CompactRangeOp

    frm, to = options.get("positions") or (None, None)
    return typed(CompactRangeOp(frm, to, options.get("summary")), RangesResult.of)


# What each persist command moves, beside the options that narrow it.
_PERSIST_KINDS = {"persist-tool": ("tool",), "persist-tools": ("tool",), "persist-thinking": ("thinking",),
                  "persist-thinkings": ("thinking",), "persist-text": ("text",), "persist-texts": ("text",),
                  "persist-range": ("tool", "thinking", "text")}


def persist(command: str, options: dict):
    """``options``: ``id`` (persist-tool), ``pos`` (and ``idx``), ``tools``, ``kinds``
    (persist-range), ``min_chars``, ``keep_recent``, ``positions``, ``summary`` (the
    marker's, for one target) and ``summaries`` (a table, as ``load_summaries`` reads)."""
    from txdb.surgery import persist as per

    if command == "persist-message":
        sel = per.Selection(message_pos=options["pos"])
    else:
        tool_id = options.get("id")
        sel = per.Selection(kinds=tuple(options.get("kinds") or _PERSIST_KINDS[command]),
                            positions=options.get("positions"), tools=options.get("tools"),
                            tool_ids={tool_id} if tool_id else None, pos=options.get("pos"), idx=options.get("idx"),
                            min_chars=options.get("min_chars") or 0, keep_recent=options.get("keep_recent") or 0)
    return typed(per.PersistOp(sel, per.Summaries(options.get("summaries"), options.get("summary"))),
                 PersistResult.of)


def migrate_persisted(command: str, options: dict):
    from txdb.surgery.migrate import MigrateOp

    return typed(MigrateOp(), MigrateResult.of)


def rescue(command: str, options: dict):
    """``options``: ``target`` (None: the resume's window less the margin),
    ``summary``, ``keep_recent``, ``window`` (None: ``rescue.resume_window``'s)."""
    from txdb.surgery.rescue import DEFAULT_KEEP_RECENT, RescueOp

    kr = options.get("keep_recent")
    return typed(RescueOp(options.get("target"), options.get("summary"), DEFAULT_KEEP_RECENT if kr is None else kr,
                          options.get("window")), RescueResult.of)
