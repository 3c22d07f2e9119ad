"""The op of each declared command (``commands.py`` names its factory here):
one factory per command builds the ``op(t, original)`` that
``engine.run_surgery`` runs, for a SESSION and for ``--where``.

``factory(command, options, rows, stats)``: ``options`` are the command's
own options (plain values: the CLI passes what the user gave, a library
caller the same keys); for a SESSION, ``rows`` is None and ``options`` may
carry ``positions`` (--from/--to); for ``--where``, ``rows`` are the rows
the condition selected in one session and ``stats`` collects what
``where_ops`` counts of them. A key the command does not know is ignored,
a missing one takes the command's default.
"""

from __future__ import annotations

from . import ops


def _where():
    """``where_ops`` (and the image ops it imports): loaded by a ``--where``
    pass only."""
    from . import where_ops

    return where_ops


def strip_tools(command: str, options: dict, rows: list | None, stats: dict):
    if rows is not None:
        return _where().rows_op(command, rows, options, stats)
    return lambda t, _o: ops.strip_tools(
        t, tools=options.get("tools"), only_inputs=bool(options.get("only_inputs")),
        only_results=bool(options.get("only_results")), keep_last_lines=options.get("keep_last_lines"),
        positions=options.get("positions"))


def strip_thinking(command: str, options: dict, rows: list | None, stats: dict):
    if rows is not None:
        return _where().rows_op(command, rows, options, stats)
    return lambda t, _o: ops.strip_thinking(t, positions=options.get("positions"))


def strip_all(command: str, options: dict, rows: list | None, stats: dict):
    if rows is not None:
        return _where().rows_op(command, rows, options, stats)
    return lambda t, _o: ops.strip_all(t, tools=options.get("tools"), keep_last_lines=options.get("keep_last_lines"),
                                       positions=options.get("positions"))


def strip_attachments(command: str, options: dict, rows: list | None, stats: dict):
    """SESSION: the policy (the newest ``keep_recent``, default 1, of each superseded
    type); --where: the rows it chose (``keep_recent`` 0, ``include_free`` implied)."""
    if rows is not None:
        return _where().rows_op(command, rows, options, stats)
    kw = attachment_options(options)
    return lambda t, _o: ops.strip_attachments(t, **kw)


def attachment_options(options: dict) -> dict:
    """strip-attachments' keywords of ``ops.attachment_plan`` for a SESSION (also
    what ``--list`` shows)."""
    kr = options.get("keep_recent")
    return dict(types=options.get("types"), keep_recent=1 if kr is None else kr,
                drop_all=bool(options.get("drop_all")), include_free=bool(options.get("include_free")),
                positions=options.get("positions"))


def replace_images(command: str, options: dict, rows: list | None, stats: dict):
    if rows is not None:
        return _where().rows_op(command, rows, options, stats)
    from . import images

    return lambda t, _o: images.replace_images(t, options["dir"], drop_missing=bool(options.get("drop_missing")),
                                               positions=options.get("positions"))


def reset_usage(command: str, options: dict, rows: list | None, stats: dict):
    """The op is the reset (the caller turns the engine's own reset after an edit off)."""
    from .usage import reset_usage as reset

    def op(t, original):
        # Standalone (no earlier pass in a pending copy): no "before" to compare with.
        standalone = t.fork_of is not None or t.digest() == original.digest()
        return reset(t, None if standalone else original)
    return op


def fork(command: str, options: dict, rows: list | None, stats: dict):
    """The engine's fork is the whole pass: the op changes nothing."""
    return lambda _t, _o: {}


def compact(command: str, options: dict, rows: list | None, stats: dict):
    """``options``: ``before``, the first chain position kept."""
    from .compact import compact_before
    from .usage import context_estimator

    before = options["before"]
    return lambda t, original: compact_before(t, before, source=str(original.path),
                                              pre_tokens=context_estimator(original)(original))


def compact_range(command: str, options: dict, rows: list | None, stats: dict):
    """SESSION: the range ``positions`` (--from/--to); --where: each run of selected rows."""
    if rows is not None:
        return _where().compact_range_op(command, rows, options, stats)
    from .compact_range import CompactRangeOp

    frm, to = options.get("positions") or (None, None)
    return CompactRangeOp(frm, to, options.get("summary"))


# What each persist command moves, beside the options that narrow it.
_PERSIST_KINDS = {"persist-tool": ("tool",), "persist-tools": ("tool",), "persist-thinking": ("thinking",),
                  "persist-thinkings": ("thinking",), "persist-text": ("text",), "persist-texts": ("text",),
                  "persist-range": ("tool", "thinking", "text")}


def persist(command: str, options: dict, rows: list | None, stats: dict):
    """``options``: ``id`` (persist-tool), ``pos`` (and ``idx``), ``tools``, ``kinds``
    (persist-range), ``min_chars``, ``keep_recent``, ``positions``, ``summary`` (the
    marker's, for one target) and ``summaries`` (a table, as ``load_summaries`` reads)."""
    if rows is not None:
        return _where().persist_op(command, rows, options, stats)
    from . import persist as per

    if command == "persist-message":
        sel = per.Selection(message_pos=options["pos"])
    else:
        tool_id = options.get("id")
        sel = per.Selection(kinds=tuple(options.get("kinds") or _PERSIST_KINDS[command]),
                            positions=options.get("positions"), tools=options.get("tools"),
                            tool_ids={tool_id} if tool_id else None, pos=options.get("pos"), idx=options.get("idx"),
                            min_chars=options.get("min_chars") or 0, keep_recent=options.get("keep_recent") or 0)
    return per.PersistOp(sel, per.Summaries(options.get("summaries"), options.get("summary")))


def migrate_persisted(command: str, options: dict, rows: list | None, stats: dict):
    from .migrate import MigrateOp

    return MigrateOp()


def rescue(command: str, options: dict, rows: list | None, stats: dict):
    """``options``: ``target`` (None: the resume's window less the margin),
    ``summary``, ``keep_recent``, ``window`` (None: ``rescue.resume_window``'s). --where over ``sessions_by_context``: a row is
    a whole session, rescued whole, so the op is the same."""
    from .rescue import DEFAULT_KEEP_RECENT, RescueOp

    if rows is not None:
        stats.update({"rows": len(rows), "targets": len(rows), "not_strippable": 0, "after_snapshot": 0})
    kr = options.get("keep_recent")
    return RescueOp(options.get("target"), options.get("summary"), DEFAULT_KEEP_RECENT if kr is None else kr,
                    options.get("window"))
