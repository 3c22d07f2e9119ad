"""One declaration per surgery command: its name, the view ``--where``
selects from (none: SESSION only), its op factory (in ``command_ops``: one
for a SESSION and for the rows a ``--where`` selected), and the kind of
result it returns, which knows how to describe itself and how many things
it changed.

Everything else is derived from ``COMMANDS``: ``select.VIEWS``, the op the
CLI runs on a SESSION and the one ``select.plan`` runs per session, the
"changed" count of a plan row, the summary line the CLI prints. To add a
command: write its op (a module of ``txdb/surgery``) and its factory in
``command_ops``, add its ``SurgeryCommand`` here (and its CLI command with
its entry in ``txdb/cli/commands.py``), its docs and its tests.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar


class Result:
    """How a command's result (the JSON-able dict its op returns, kept as the
    report's ``result``) reads: ``describe`` gives the clauses of the summary
    line, ``changed`` the count of blocks / records / attachments changed."""

    positional: ClassVar[bool] = False  # what it reports names positions of the copy it edited
    one_per_line: ClassVar[bool] = False  # describe's first clause heads the line, each other one a line of its own
    targets_header: ClassVar[str] = "targets"  # the --where plan's column of what each session's pass aimed at

    @staticmethod
    def targets(res: dict, rows: int) -> int | str:
        """A --where plan row's targets cell: the rows the condition selected."""
        return rows

    @staticmethod
    def idle(res: dict) -> str | None:
        """A --where plan row's status when the pass changed nothing and says why (None: the pass's status)."""
        return None

    @staticmethod
    def describe(res: dict, dry_run: bool) -> list[str]:
        return []

    @staticmethod
    def changed(res: dict) -> int:
        return 0


class StripResult(Result):
    """strip-tools / strip-thinking / strip-all: ``tools`` and ``thinking``
    sections (or one of them flat, from a SESSION strip of one kind)."""

    @staticmethod
    def _parts(res: dict) -> tuple[dict | None, dict | None]:
        tools = res.get("tools", res if "results" in res else None)
        thinking = res.get("thinking", res if "blocks" in res and "chars" in res else None)
        return tools, thinking

    @staticmethod
    def describe(res, dry_run):
        tools, thinking = StripResult._parts(res)
        parts = []
        if tools:
            parts.append(f"{tools['results']} tool results and {tools['inputs']} tool inputs cleared"
                         + (f" ({tools['kept_errors']} error results kept)" if tools.get("kept_errors") else ""))
        if thinking:
            parts.append(f"{thinking['blocks']} thinking blocks removed"
                         + (f" ({thinking['records_removed']} emptied records re-parented)"
                            if thinking.get("records_removed") else ""))
            if thinking.get("tokens_not_counted"):
                parts.append(f"no context saved by it: the API does not count thinking on {thinking['model']}"
                             if not thinking.get("counts_thinking", True) else
                             f"{thinking['tokens_not_counted']:,} tokens of it written by another model, "
                             f"which the request on {thinking['model']} leaves out: not saved")
        return parts

    @staticmethod
    def changed(res):
        tools, thinking = StripResult._parts(res)
        return ((tools or {}).get("inputs", 0) + (tools or {}).get("results", 0)
                + (thinking or {}).get("blocks", 0))


class AttachmentsResult(Result):
    @staticmethod
    def describe(res, dry_run):
        return [f"{res['removed']} of {res['attachments']} attachments dropped"] if "attachments" in res else []

    @staticmethod
    def changed(res):
        return res.get("removed", 0)


class ImagesResult(Result):
    @staticmethod
    def describe(res, dry_run):
        if "replaced" not in res:
            return []
        return [f"{res['replaced']} of {res['images']} images replaced by transcripts"
                + (f", {res['dropped']} dropped" if res["dropped"] else "")
                + (f", {res['kept']} kept (no transcript)" if res["kept"] else "")
                + (f"; {res['invalid']} with invalid base64" if res["invalid"] else "")
                + f" ({res['transcripts_used']} of {res['transcripts']} <sha256>.txt files used"
                + (f"; {res['ignored']} other entries of --dir ignored" if res.get("ignored") else "") + ")"]

    @staticmethod
    def changed(res):
        return res.get("replaced", 0) + res.get("dropped", 0)


class CompactResult(Result):
    @staticmethod
    def describe(res, dry_run):
        return [f"positions 0..{res['before'] - 1} ({res['summarized']} records, {res['dialogue_messages']} "
                f"messages of dialogue) summarised behind a compact boundary; {res['kept']} records kept "
                f"with fresh uuids"
                + (f"; {res['kept_state']} announcement and system-prompt records before the cut carried "
                   f"over" if res.get("kept_state") else "")]

    @staticmethod
    def changed(res):
        return res.get("summarized", 0)


class UsageResult(Result):
    @staticmethod
    def describe(res, dry_run):
        if "capped" not in res:
            return []
        n = res["capped"]
        return [f"{n:,} turn's usage capped" if n == 1 else f"{n:,} turns' usage capped"]

    @staticmethod
    def changed(res):
        return res.get("capped", 0)


_PERSISTED = {"tool": "tool result", "thinking": "thinking block", "text": "text block", "message": "message"}


class PersistResult(Result):
    positional = True

    @staticmethod
    def describe(res, dry_run):
        if "persisted" not in res:
            return []
        from ..chain_health import plural
        from ..sidecar import PREVIEW_CHARS, TOOL_PREVIEW_CHARS

        on = res.get("on_chain") or {}
        moved = ", ".join(f"{plural(n, _PERSISTED.get(k, k))} ({on.get(k, 0)} on the active chain)"
                          for k, n in res["persisted"].items() if n) or "nothing"
        off = sum(res["persisted"].values()) - sum(on.values())
        return [f"persisted {moved}" + (f"; the other {off} are off it: they shrink the file, not the context"
                                        if off else "")
                + f"; {res['chars_moved']:,} chars to {plural(res['sidecars_new'], 'new sidecar file')}"
                + (f", {res['sidecars_reused']} reused" if res["sidecars_reused"] else "")
                + (f"; {res['skipped_persisted']} already persisted" if res["skipped_persisted"] else "")
                + (f"; {res['too_small']:,} left in place, too small to shrink (a marker keeps a preview: "
                   f"{TOOL_PREVIEW_CHARS:,} chars of a tool result, {PREVIEW_CHARS:,} of thinking or text)"
                   if res.get("too_small") else "")]

    @staticmethod
    def changed(res):
        return res.get("blocks", 0)


class RangesResult(Result):
    positional = True

    @staticmethod
    def describe(res, dry_run):
        parts = []
        for rg in res.get("ranges", []):
            if rg["status"] == "already":
                parts.append(f"positions {rg['from']}..{rg['to']}: already one plain user message (position "
                             f"{rg['at']}) carrying its <persisted-range> marker; nothing to change")
            elif rg["status"] == "resummarised":
                parts.append(f"positions {rg['from']}..{rg['to']}: already compacted; its marker's summary is "
                             f"now {rg['summary']!r}")
            elif rg["status"] == "converted":
                parts.append(f"position {rg['at']}: the {rg['was']} record carrying a <persisted-range> marker "
                             f"is now a plain user message (marker kept)")
            else:
                saved = len(rg["files"])
                verb = "would be saved" if dry_run else "saved"
                parts.append(f"positions {rg['from']}..{rg['to']} ({rg['count']} records) collapsed into one "
                             f"user message at position {rg['at']}; originals {verb} to {rg['folder']} ({saved} "
                             f"{'file' if saved == 1 else 'files'})"
                             + (f"; {rg['kept_in_place']} announcement and system-prompt records left in place"
                                if rg.get("kept_in_place") else "")
                             + ("" if rg.get("summary") else "; no --summary given: the model reads a summary extracted "
                                "from these records (prompts, files, commands, tools; pass --summary TEXT)"))
        return parts

    @staticmethod
    def changed(res):
        return res.get("records", 0) + res.get("converted", 0) + res.get("resummarised", 0)


class MigrateResult(Result):
    positional = True

    @staticmethod
    def describe(res, dry_run):
        if "markers_repointed" not in res:
            return []
        return [f"{res['images']} image transcripts persisted, {res['tool_results_moved']} .tool-results "
                f"files moved, {res['markers_repointed']} markers re-pointed"]

    @staticmethod
    def changed(res):
        return res.get("images", 0) + res.get("tool_results_moved", 0) + res.get("markers_repointed", 0)


_RESCUE_MOVED = {"persist-tools": "tool result", "persist-thinkings": "thinking block",
                 "persist-texts": "text block"}


class RescueResult(Result):
    """rescue: its plan, one step a line, each with the estimate after it."""

    one_per_line = True
    targets_header = "target"

    @staticmethod
    def targets(res, rows):
        if "target" not in res:
            return ""
        return f"{res['target']:,}" + (" (default)" if res.get("target_default") else "")

    @staticmethod
    def idle(res):
        return "already under" if res.get("reached") and not res.get("steps") else None

    @staticmethod
    def describe(res, dry_run):
        if "steps" not in res:
            return []
        from ..chain_health import plural

        tol = res.get("tolerance")
        aim = f"the aim (target less {tol:.0%})" if tol is not None else "the aim"
        parts = [f"target {res['target']:,}" + (" (default)" if res.get("target_default") else "")
                 + f", {aim} ~{res['aim']:,}"
                 + ("" if res["steps"] else f": already under (~{res['tokens_start']:,}), nothing to do")]
        if res.get("target_default") and res.get("window"):
            parts.append(f"   = window {res['window']:,} ({res['window_reason']}) less {res['margin']:,} (Claude "
                         f"Code's output reserve and auto-compact buffer) less {res['release_room']:,} (room for "
                         f"{res['release_worst']}'s system prompt and tools over {res['release_base']}'s; the "
                         f"session last ran on {res['release'] or 'an unknown release'})")
        for i, st in enumerate(res["steps"], 1):
            name = st["step"]
            if name == "strip-attachments":
                did = [f"{plural(st['dropped'], 'superseded attachment')} dropped"]
            elif name == "compact-range":
                n = len(st.get("ranges") or ()) or 1
                did = [f"{plural(st['moved'], 'record')} compacted into "
                       + ("one summary" if n == 1 else f"{n} summaries") + " (saved to sidecars)"]
            else:
                did = [f"{plural(st['moved'], _RESCUE_MOVED.get(name, 'block'))} moved to sidecars"
                       if st.get("moved") else "",
                       f"{plural(st['dropped'], 'empty thinking block')} dropped (a signature only: "
                       "nothing to save)" if st.get("dropped") else ""]
            parts.append(f"{i}. {name}: " + ", ".join(x for x in did if x) + f" -> ~{st['tokens_after']:,} tokens")
            if name == "compact-range" and not st.get("summary"):
                parts.append("   no --summary given: the model reads a summary extracted from the compacted "
                             "records (prompts, files, commands, tools); pass --summary TEXT to say what they were about")
        return parts

    @staticmethod
    def changed(res):
        return sum(st.get("moved", 0) + st.get("dropped", 0) for st in res.get("steps", []))


@dataclass(frozen=True)
class SurgeryCommand:
    name: str
    result: type[Result] = Result
    view: str | None = None  # the target view of --where; None: SESSION only
    op: str | None = None    # its op factory: a function of ``command_ops`` (None: an undeclared name)
    main_sessions: bool = False  # its --where selects main sessions only (what `claude -r` resumes), no subagents

    def make_op(self, options: dict | None = None, rows: list | None = None, stats: dict | None = None):
        """The op of this command with ``options``: for a SESSION (``rows`` None;
        ``options`` may carry ``positions``), or for one session's rows a
        ``--where`` selected (``stats`` collects what they came to)."""
        from . import command_ops

        return getattr(command_ops, self.op)(self.name, options or {}, rows, {} if stats is None else stats)


def _declare(*commands: SurgeryCommand) -> dict[str, SurgeryCommand]:
    return {c.name: c for c in commands}


_PERSIST = ("persist-tool", "persist-thinking", "persist-thinkings", "persist-text", "persist-texts",
            "persist-message", "persist-range")

COMMANDS: dict[str, SurgeryCommand] = _declare(
    SurgeryCommand("strip-tools", StripResult, "block_targets", "strip_tools"),
    SurgeryCommand("strip-thinking", StripResult, "block_targets", "strip_thinking"),
    SurgeryCommand("strip-all", StripResult, "block_targets", "strip_all"),
    SurgeryCommand("strip-attachments", AttachmentsResult, "attachment_targets", "strip_attachments"),
    SurgeryCommand("replace-images", ImagesResult, "image_targets", "replace_images"),
    SurgeryCommand("persist-tools", PersistResult, "block_targets", "persist"),
    SurgeryCommand("compact-range", RangesResult, "chain_targets", "compact_range"),
    SurgeryCommand("reset-usage", UsageResult, op="reset_usage"),
    SurgeryCommand("fork", op="fork"),
    SurgeryCommand("compact", CompactResult, op="compact"),
    *(SurgeryCommand(n, PersistResult, op="persist") for n in _PERSIST),
    SurgeryCommand("migrate-persisted", MigrateResult, op="migrate_persisted"),
    SurgeryCommand("rescue", RescueResult, "sessions_by_context", "rescue", main_sessions=True),
)


def declared(name: str) -> SurgeryCommand:
    """The declaration of ``name``; an operation no command declares (a library
    caller's own name) reads as a plain result."""
    return COMMANDS.get(name) or SurgeryCommand(name)
