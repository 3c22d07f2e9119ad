"""One declaration per surgery command: its name, the kind of result it
returns (``results``: how it reads and what it changed), its op factory for
a SESSION (``command_ops``), and for a ``--where`` command the view it
selects from with its op over the selected rows (``where_ops``).

The ops are references, not names: a misspelled one fails at import, and a
declaration with a view but no ``--where`` op (or the reverse) is refused
here. Everything else is derived from ``COMMANDS``: ``select.VIEWS``, the op
the CLI runs on a SESSION and the one ``select.plan`` runs per session, the
"changed" count of a plan row, the summary line the CLI prints.
``tests/test_wiring.py`` fails for a declared command missing from the CLI
table, the docs, the property tests or the real-CLI acceptance list.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from txdb.surgery import command_ops as co
from txdb.surgery import where_ops as wo
from txdb.surgery.results import (AttachmentsResult, CompactResult, ImagesResult, MigrateResult, PersistResult,
    RangesResult, RescueResult, Result, StripResult, UsageResult)

@dataclass(frozen=True)
class SurgeryCommand:
    name: str
    result: type[Result]
    op: Callable  # ``command_ops``: factory(command, options) -> the op of a SESSION
    view: str | None = None  # the target view of --where; None: SESSION only
    where_op: Callable | None = None  # ``where_ops``: factory(command, rows, options, stats) -> the op of --where
    main_sessions: bool = False  # its --where selects main sessions only (what `claude -r` resumes), no subagents

    def __post_init__(self):
        if not callable(self.op) or (self.where_op is not None and not callable(self.where_op)):
            raise TypeError(f"{self.name}: its ops must be functions or classes")
        if (self.view is None) != (self.where_op is None):
            raise TypeError(f"{self.name}: a target view and a --where op go together")

    def make_op(self, options: dict | None = None, rows: list | None = None, stats=None):
        """The op of this command with ``options``: for a SESSION (``rows`` None;
        ``options`` may carry ``positions``), or for one session's rows a
        ``--where`` selected (``stats``, a ``where_ops.WhereStats``, collects what they came to)."""
        if rows is None:
            return self.op(self.name, options or {})
        if self.where_op is None:
            raise TypeError(f"{self.name} takes no --where")
        return self.where_op(self.name, rows, options or {}, wo.WhereStats() if stats is None else stats)


def _declare(*commands: SurgeryCommand) -> dict[str, SurgeryCommand]:
    return {c.name: c for c in commands}


_PERSIST = ("persist-tool", "persist-thinking", "persist-thinkings", "persist-text", "persist-texts",
            "persist-message", "persist-range")

COMMANDS: dict[str, SurgeryCommand] = _declare(
    SurgeryCommand("strip-tools", StripResult, co.strip_tools, "block_targets", wo.strip_tools),
    SurgeryCommand("strip-thinking", StripResult, co.strip_thinking, "block_targets", wo.strip_thinking),
    SurgeryCommand("strip-all", StripResult, co.strip_all, "block_targets", wo.strip_all),
    SurgeryCommand("strip-attachments", AttachmentsResult, co.strip_attachments, "attachment_targets",
                   wo.strip_attachments),
    SurgeryCommand("replace-images", ImagesResult, co.replace_images, "image_targets", wo.replace_images),
    SurgeryCommand("persist-tools", PersistResult, co.persist, "block_targets", wo.persist_tools),
    SurgeryCommand("compact-range", RangesResult, co.compact_range, "chain_targets", wo.compact_range),
    SurgeryCommand("reset-usage", UsageResult, co.reset_usage),
    SurgeryCommand("fork", Result, co.fork),
    SurgeryCommand("compact", CompactResult, co.compact),
    *(SurgeryCommand(n, PersistResult, co.persist) for n in _PERSIST),
    SurgeryCommand("migrate-persisted", MigrateResult, co.migrate_persisted),
    SurgeryCommand("rescue", RescueResult, co.rescue, "sessions_by_context", wo.rescue, main_sessions=True),
)


def result_kind(name: str) -> type[Result]:
    """How the result of ``name`` reads; an operation no command declares (a
    library caller's own name) reads as a plain result."""
    c = COMMANDS.get(name)
    return c.result if c else Result
