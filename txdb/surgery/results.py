"""What a surgery command's op reports, typed: each kind of result knows its
summary line (``describe``), what it changed (``changed``) and its JSON
(``as_dict``: the op's own report, unchanged).

A declared command's op (built in ``command_ops`` / ``where_ops``) returns
one of these; ``of`` reads the fields it needs from the op's report, so a
report missing one is an error where it is built, never a silent 0.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar


def _read(cls, data: dict) -> dict:
    """The keys of ``data`` that are fields of ``cls`` (``data`` itself excluded); each must be there."""
    names = [f.name for f in fields(cls) if f.init and f.name != "data"]
    missing = [n for n in names if n not in data]
    if missing:
        raise KeyError(f"{cls.__name__}: the op's report has no {', '.join(missing)}")
    return {n: data[n] for n in names}


@dataclass
class Result:
    """A plain result (fork; a library op no command declares): nothing to describe."""

    data: dict = field(default_factory=dict, repr=False)  # the op's report, what --json prints

    positional: ClassVar[bool] = False  # what it reports names positions of the copy it edited
    one_per_line: ClassVar[bool] = False  # describe's first clause heads the line, each other one a line of its own
    targets_header: ClassVar[str] = "targets"  # the --where plan's column of what each session's pass aimed at

    @classmethod
    def of(cls, data: dict | None):
        data = data or {}
        return cls(data, **_read(cls, data))

    def as_dict(self) -> dict:
        return self.data

    def targets(self, rows: int) -> int | str:
        """A --where plan row's targets cell: the rows the condition selected."""
        return rows

    @classmethod
    def no_targets(cls, rows: int) -> int | str:
        """The targets cell of a row whose pass was refused (no result)."""
        return rows

    def idle(self) -> str | None:
        """A --where plan row's status when the pass changed nothing and says why (None: the pass's status)."""
        return None

    def describe(self, dry_run: bool) -> list[str]:
        return []

    @property
    def changed(self) -> int:
        """Blocks / records / attachments this pass changed."""
        return 0

    def notes(self, verbose: bool = False) -> list[str]:
        """Lines the report prints after the summary (``verbose``: -v, the detail too)."""
        return []

    def warnings(self) -> list[str]:
        """Lines the report prints on stderr."""
        return []


@dataclass
class ToolsCleared:
    inputs: int
    results: int
    kept_errors: int

    @classmethod
    def of(cls, data: dict) -> ToolsCleared:
        return cls(**_read(cls, data))


@dataclass
class ThinkingRemoved:
    blocks: int
    records_removed: int
    tokens_not_counted: int
    counts_thinking: bool
    model: str | None

    @classmethod
    def of(cls, data: dict) -> ThinkingRemoved:
        return cls(**_read(cls, data))


@dataclass
class StripResult(Result):
    """strip-tools / strip-thinking / strip-all: what was cleared of tools, what
    of thinking (None: that kind was not stripped)."""

    tools: ToolsCleared | None = None
    thinking: ThinkingRemoved | None = None

    @classmethod
    def of(cls, data: dict) -> StripResult:
        """strip-all's report, and any --where strip's: a ``tools`` and a ``thinking`` section, each if stripped."""
        return cls(data, ToolsCleared.of(data["tools"]) if "tools" in data else None,
                   ThinkingRemoved.of(data["thinking"]) if "thinking" in data else None)

    @classmethod
    def of_tools(cls, data: dict) -> StripResult:
        return cls(data, tools=ToolsCleared.of(data))

    @classmethod
    def of_thinking(cls, data: dict) -> StripResult:
        return cls(data, thinking=ThinkingRemoved.of(data))

    def describe(self, dry_run):
        tools, thinking = self.tools, self.thinking
        parts = []
        if tools:
            parts.append(f"{tools.results} tool results and {tools.inputs} tool inputs cleared"
                         + (f" ({tools.kept_errors} error results kept)" if tools.kept_errors else ""))
        if thinking:
            parts.append(f"{thinking.blocks} thinking blocks removed"
                         + (f" ({thinking.records_removed} emptied records re-parented)"
                            if thinking.records_removed else ""))
            if thinking.tokens_not_counted:
                parts.append(f"no context saved by it: the API does not count thinking on {thinking.model}"
                             if not thinking.counts_thinking else
                             f"{thinking.tokens_not_counted:,} tokens of it written by another model, "
                             f"which the request on {thinking.model} leaves out: not saved")
        return parts

    @property
    def changed(self):
        tools = (self.tools.inputs + self.tools.results) if self.tools else 0
        return tools + (self.thinking.blocks if self.thinking else 0)


@dataclass
class AttachmentsResult(Result):
    attachments: int = 0
    removed: int = 0

    def describe(self, dry_run):
        return [f"{self.removed} of {self.attachments} attachments dropped"]

    @property
    def changed(self):
        return self.removed


@dataclass
class ImagesResult(Result):
    images: int = 0
    replaced: int = 0
    dropped: int = 0
    kept: int = 0
    invalid: int = 0
    transcripts: int = 0
    transcripts_used: int = 0
    ignored: int = 0

    def describe(self, dry_run):
        return [f"{self.replaced} of {self.images} images replaced by transcripts"
                + (f", {self.dropped} dropped" if self.dropped else "")
                + (f", {self.kept} kept (no transcript)" if self.kept else "")
                + (f"; {self.invalid} with invalid base64" if self.invalid else "")
                + f" ({self.transcripts_used} of {self.transcripts} <sha256>.txt files used"
                + (f"; {self.ignored} other entries of --dir ignored" if self.ignored else "") + ")"]

    @property
    def changed(self):
        return self.replaced + self.dropped


@dataclass
class CompactResult(Result):
    before: int = 0
    summarized: int = 0
    dialogue_messages: int = 0
    kept: int = 0
    kept_state: int = 0

    def describe(self, dry_run):
        return [f"positions 0..{self.before - 1} ({self.summarized} records, {self.dialogue_messages} "
                f"messages of dialogue) summarised behind a compact boundary; {self.kept} records kept "
                f"with fresh uuids"
                + (f"; {self.kept_state} announcement and system-prompt records before the cut carried "
                   f"over" if self.kept_state else "")]

    @property
    def changed(self):
        return self.summarized


@dataclass
class UsageResult(Result):
    capped: int = 0

    def describe(self, dry_run):
        n = self.capped
        return [f"{n:,} turn's usage capped" if n == 1 else f"{n:,} turns' usage capped"]

    @property
    def changed(self):
        return self.capped


_PERSISTED = {"tool": "tool result", "thinking": "thinking block", "text": "text block", "message": "message"}


@dataclass
class PersistResult(Result):
    persisted: dict[str, int] = field(default_factory=dict)
    on_chain: dict[str, int] = field(default_factory=dict)
    chars_moved: int = 0
    sidecars_new: int = 0
    sidecars_reused: int = 0
    skipped_persisted: int = 0
    too_small: int = 0
    blocks: int = 0
    files: list[dict] = field(default_factory=list)
    summaries_unused: list[dict] = field(default_factory=list)

    positional = True

    def describe(self, dry_run):
        from txdb.model.chain_health import plural
        from txdb.model.sidecar import PREVIEW_CHARS, TOOL_PREVIEW_CHARS

        on = self.on_chain
        moved = ", ".join(f"{plural(n, _PERSISTED.get(k, k))} ({on.get(k, 0)} on the active chain)"
                          for k, n in self.persisted.items() if n) or "nothing"
        off = sum(self.persisted.values()) - sum(on.values())
        return [f"persisted {moved}" + (f"; the other {off} are off it: they shrink the file, not the context"
                                        if off else "")
                + f"; {self.chars_moved:,} chars to {plural(self.sidecars_new, 'new sidecar file')}"
                + (f", {self.sidecars_reused} reused" if self.sidecars_reused else "")
                + (f"; {self.skipped_persisted} already persisted" if self.skipped_persisted else "")
                + (f"; {self.too_small:,} left in place, too small to shrink (a marker keeps a preview: "
                   f"{TOOL_PREVIEW_CHARS:,} chars of a tool result, {PREVIEW_CHARS:,} of thinking or text)"
                   if self.too_small else "")]

    @property
    def changed(self):
        return self.blocks

    def notes(self, verbose=False):
        if not self.files:
            return []
        from txdb.model.chain_health import plural

        # The folder once; each file relative to it (a full path per block ran to ~200 columns).
        folder = os.path.commonpath([os.path.dirname(f["path"]) for f in self.files])
        if not verbose:
            return [f"Sidecars in: {folder} (-v lists the {plural(len(self.files), 'moved block')}; --json too)"]
        return [f"Sidecars in: {folder}"] + [
            f"  {f['kind']:<8} {f['tool_use_id'] if f['tool_use_id'] else 'pos ' + str(f['pos'])}: "
            f"{f['chars']:,} chars -> {os.path.relpath(f['path'], folder)}" for f in self.files]

    def warnings(self):
        return [f"Summary key {u['key']!r} not used: {u['reason']}." for u in self.summaries_unused]


@dataclass
class RangesResult(Result):
    ranges: list[dict] = field(default_factory=list)
    records: int = 0
    converted: int = 0
    resummarised: int = 0

    positional = True

    def describe(self, dry_run):
        parts = []
        for rg in self.ranges:
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

    @property
    def changed(self):
        return self.records + self.converted + self.resummarised


@dataclass
class MigrateResult(Result):
    images: int = 0
    tool_results_moved: int = 0
    markers_repointed: int = 0

    positional = True

    def describe(self, dry_run):
        return [f"{self.images} image transcripts persisted, {self.tool_results_moved} .tool-results "
                f"files moved, {self.markers_repointed} markers re-pointed"]

    @property
    def changed(self):
        return self.images + self.tool_results_moved + self.markers_repointed


_RESCUE_MOVED = {"persist-tools": "tool result", "persist-thinkings": "thinking block",
                 "persist-texts": "text block"}


@dataclass
class RescueResult(Result):
    """rescue: its plan, one step a line, each with the estimate after it."""

    target: int = 0
    target_default: bool = False
    aim: int = 0
    tolerance: float | None = None
    tokens_start: int = 0
    reached: bool = False
    steps: list[dict[str, Any]] = field(default_factory=list)

    one_per_line = True
    targets_header = "target"

    def targets(self, rows):
        return f"{self.target:,}" + (" (default)" if self.target_default else "")

    @classmethod
    def no_targets(cls, rows):
        return ""

    def idle(self):
        return "already under" if self.reached and not self.steps else None

    def describe(self, dry_run):
        from txdb.model.chain_health import plural

        tol = self.tolerance
        aim = f"the aim (target less {tol:.0%})" if tol is not None else "the aim"
        parts = [f"target {self.target:,}" + (" (default)" if self.target_default else "")
                 + f", {aim} ~{self.aim:,}"
                 + ("" if self.steps else f": already under (~{self.tokens_start:,}), nothing to do")]
        res = self.data
        if self.target_default and res.get("window"):
            parts.append(f"   = window {res['window']:,} ({res['window_reason']}) less {res['margin']:,} (Claude "
                         f"Code's output reserve and auto-compact buffer) less {res['release_room']:,} (room for "
                         f"{res['release_worst']}'s system prompt and tools over {res['release_base']}'s; the "
                         f"session last ran on {res['release'] or 'an unknown release'})")
        for i, st in enumerate(self.steps, 1):
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

    @property
    def changed(self):
        # A step's shape is rescue's: a compaction moves records, a thinking step may also drop some.
        return sum(st.get("moved", 0) + st.get("dropped", 0) for st in self.steps)
