"""compact-range A..B: a closed stretch of the conversation becomes one user
message that says where it went.

Positions A..B of the active chain (of the copy the pass runs on, as for
every command) collapse into one survivor carrying a ``<persisted-range>``
marker (``sidecar.range_marker``: from, to, count, the folder, the summary,
a preview of the first messages). Each record of the range is saved whole,
its bytes exactly as they were, to ``<sessionId>/persisted/message/<uuid>.json``
(``sidecar.plan``: an existing file with other bytes is never touched); the
engine writes those files after the gate and before the pending copy that
names them (``sidecar.Writes``).

Rules, each one here:

- Refused when the range holds the leaf: resuming walks back from it.
- Refused when the range cuts a tool call: a tool_use and its tool_result
  (the first result of that id after it on the chain) are both inside the
  range or both outside, and the range may not sit between them either (the
  survivor would land between a call and its result). The refusal names
  both positions.
- The survivor is always a plain user message (``type`` user, ``message``
  ``{role: user, content: <marker>}``), whatever the range's first record
  was: a system or attachment record keeps neither its envelope nor its
  type, since Claude Code sends neither to the model. It keeps that
  record's uuid, parent and timestamp, and the session envelope (cwd,
  sessionId, version, gitBranch, slug, ...) of the first record that has it,
  (in a fork, its ``forkedFrom`` and ``strippedBy`` too), and lists the saved
  files' names in chain order as ``persistedRange.files``
  (so ``apply`` checks each one is on disk, and a reader knows which files
  of the shared folder are this range's).
- Records that are state rather than conversation stay where they are,
  uncounted: what the CLI announced to the model (``*_delta``,
  ``skill_listing``: it computes the next announcement from them, and
  re-announces everything when they go) and the system prompt
  (``prompt_snapshot``, ``deferred_tools_record``). The survivor is the
  first record of the range that is not one of them.
- The other records of the range are removed with ``Transcript.remove``
  (records hanging off them, off the chain, and ``last-prompt`` pointers
  follow to the survivor); the record after the range becomes the child of
  the last record left of it (also when it was joined to the range only by
  Claude Code's bridge over a missing parent).
- Idempotent: a range of one record that already is a plain-user survivor
  (a record whose content is a marker and nothing else),
  or exactly the range its survivor says it compacted (the same command
  run again on the pending copy), changes nothing, unless a different
  ``--summary`` is given: then only the marker's Summary line changes.
  One record carrying a marker in another envelope (a survivor written by
  an older tool) is converted to a plain user message, its marker kept.
- A range starting at a survivor and reaching further compacts again: the
  old survivor is saved like any record, so its own marker stays readable.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Callable

from txdb.errors import SurgeryError
from txdb.model.policy import is_state
from txdb.model.records import TITLE_KEY, human_prompt
from txdb.model import sidecar as sc
from txdb.surgery.fork import FORK_FIELDS
from txdb.surgery.ops import Op, check_positions, tool_spans
from txdb.surgery.persist import one_line, outline
from txdb.model.transcript import Record, Transcript, load_object

PREVIEW_MESSAGES = 3
PREVIEW_LINE_CHARS = 200
# The extractive summary (no --summary): what it lists at most, so its cost stays bounded.
SUMMARY_PROMPTS, SUMMARY_PROMPT_CHARS = 8, 200
SUMMARY_FILES, SUMMARY_COMMANDS, SUMMARY_COMMAND_CHARS = 12, 8, 100
SUMMARY_MAX_CHARS = 3_000
READS = ("Read", "NotebookRead")
WRITES = {"Write": "file_path", "Edit": "file_path", "MultiEdit": "file_path", "NotebookEdit": "notebook_path"}
# The session envelope a survivor carries (Claude Code's user-record keys).
ENVELOPE = ("userType", "entrypoint", "cwd", "sessionId", "version", "gitBranch", "slug")
RANGE_FIELD = sc.RANGE_FIELD
ENVELOPE_RECORDS = 8  # the envelope is looked for in the range's first records
# Keys that make a user record something other than a plain prompt.
NOT_PLAIN = ("isMeta", "isCompactSummary", "isVisibleInTranscriptOnly", "toolUseResult", "sourceToolAssistantUUID")

Ranges = Callable[[Transcript, Transcript], list[tuple[int, int]]]


class CompactRangeOp(sc.Writes, Op):
    """``op(t, original)`` for ``run_surgery``: one range (``frm``..``to``), or the
    ranges ``ranges_of`` picks per session (``--where``); one ``summary`` for each."""

    def __init__(self, frm: int | None = None, to: int | None = None, summary: str | None = None,
                 ranges_of: Ranges | None = None):
        super().__init__()
        self.frm, self.to = frm, to
        if summary:
            try:
                summary.encode("utf-8")
            except UnicodeEncodeError:
                raise SurgeryError("the summary is not valid UTF-8 text") from None
        self.summary = _clean(summary) if summary else None
        self.ranges_of = ranges_of

    def check_positions(self, t: Transcript, positions) -> None:
        """The engine's range check (``ops.check_positions``), except for exactly
        the range a survivor already compacted (its ``b`` may now lie past the
        shorter chain's end): that run changes nothing, it is not refused."""
        if positions and None not in positions and _same_range(t, *positions):
            return
        check_positions(t, positions)

    def __call__(self, t: Transcript, original: Transcript) -> dict:
        self.plan_files(sc.session_dir(t.path))
        if self.ranges_of is not None:
            ranges = self.ranges_of(t, original)
        else:
            if self.frm is None or self.to is None:
                raise SurgeryError("compact-range needs a range: --from A --to B (or --pos N)")
            ranges = [(self.frm, self.to)]
        out = {"base": t.base, "ranges": [], "records": 0, "compacted": 0,
               "converted": 0, "already": 0, "resummarised": 0, "kept_in_place": 0, "sidecars_new": 0, "sidecars_reused": 0}
        spans = tool_spans(t) if ranges else []
        for a, b in ranges:  # every range is checked before any is changed
            _check(t, a, b, spans, again=_again(t, a, b) is not None)
        # From the last range back, so the positions of the earlier ones stay put.
        for a, b in sorted(ranges, reverse=True):
            out["ranges"].append(self._compact(t, a, b, out))
            t.refresh()
        out["ranges"].reverse()
        return out

    def _compact(self, t: Transcript, a: int, b: int, out: dict) -> dict:
        chain = t.chain
        span = chain[a:b + 1]
        recs = [r for r in span if not stays_in_place(r)]
        kept = len(span) - len(recs)
        first = recs[0]
        fobj = first.parse()
        # The survivor's position: a record kept in place may start the range.
        base = {"from": a, "to": b, "at": first.pos, "uuid": first.uuid, "kept_in_place": kept}
        marker = _again(t, a, b)
        if marker is not None:
            # The same range again, or one survivor alone: at most its envelope
            # changes, and its summary when a new one is given.
            head = sc.range_head(marker)
            count = head[2] if head else 1
            text = sc.with_summary(marker, self.summary) if self.summary else marker
            title = _carried_title(fobj)
            if _plain_user(fobj, marker):
                if text == marker:
                    out["already"] += 1
                    return dict(base, status="already", count=count, files=[])
                t.touch(first, _survivor([fobj], text, title=title))
                out["resummarised"] += 1
                return dict(base, status="resummarised", count=count, summary=self.summary, files=[])
            t.touch(first, _survivor([fobj], text, title=title))
            out["converted"] += 1
            return dict(base, status="converted", count=count, was=_kind(fobj), files=[])
        nxt = chain[b + 1]  # _check: the leaf is never in the range
        folder = self.sdir / "persisted" / "message"
        files: list[str] = []
        objs: list[dict] = []
        preview: list = []
        for r in recs:
            side = self.plan(sc.relative_path("message", r.uuid or f"offset-{r.offset}"), bytes(r.source))
            self.add(side)
            out["sidecars_reused" if side.reused else "sidecars_new"] += 1
            files.append(str(side.path))
            if len(objs) < ENVELOPE_RECORDS or len(preview) < PREVIEW_MESSAGES:
                o = r.parse()
                if len(objs) < ENVELOPE_RECORDS:
                    objs.append(o)  # where the survivor's envelope comes from
                # The preview quotes the record as its file holds it: a marker this
                # pass left in it names a file the saved record supersedes.
                line = _preview_line(r, o if r.new is None else load_object(r.source))
                if line and len(preview) < PREVIEW_MESSAGES:
                    preview.append(line)
        title = _title_prompt(t, recs)
        summary = self.summary or extract_summary(recs, files)
        text = sc.range_marker(a, b, folder, summary, preview, len(recs))
        t.touch(first, _survivor(objs, text, [Path(p).name for p in files], title))
        t.remove(recs[1:], pairs_checked=True)  # _check: no tool call of the chain is cut
        # The record after the range hangs off the last one left of it (also
        # when only Claude Code's bridge over a missing parent joined them).
        tail = next(r for r in reversed(span) if not r.removed)
        if nxt.parent_uuid != tail.uuid:
            o = nxt.parse()
            o["parentUuid"] = tail.uuid
            t.touch(nxt, o)
        out["records"] += len(recs)
        out["compacted"] += 1
        out["kept_in_place"] += kept
        return dict(base, status="compacted", count=len(recs), was=_kind(fobj), folder=str(folder),
                    summary=self.summary, files=files)


def _again(t: Transcript, a: int, b: int) -> str | None:
    """The marker of the range's survivor when running a..b again changes at most
    that record's envelope: the range's only record to compact carries a marker,
    or its first one carries the marker of exactly this range. Else None."""
    recs = [r for r in t.chain[a:b + 1] if not stays_in_place(r)]
    if not recs:
        return None
    marker = _survivor_marker(recs[0].parse())
    if marker is None:
        return None
    return marker if len(recs) == 1 or _same_range(t, a, b) else None


def _same_range(t: Transcript, a: int, b: int) -> bool:
    """Whether a..b is exactly the range a survivor already compacted: the first
    record from ``a`` on that does not stay in place carries the marker of
    a..b. The chain is shorter since, so ``b`` may lie past its end now."""
    first = next((r for r in t.chain[a:] if not stays_in_place(r)), None)
    if first is None or first.pos > b:
        return False
    head = sc.range_head(_survivor_marker(first.parse()))
    return head is not None and head[:2] == (a, b)


def stays_in_place(r: Record) -> bool:
    """Records a range leaves in place: what the CLI announced, its state
    snapshots, the system prompt (``policy.is_state``)."""
    return is_state(r.type, r.attachment_type)


def _check(t: Transcript, a: int, b: int, spans: list[tuple[int, int, str]], again: bool = False) -> None:
    """The range's refusals (see module doc), naming positions; ``spans``: the
    chain's tool calls (``ops.tool_spans``). ``again``: the range's survivor
    is all it would change (a record holding only a marker, no tool block), so
    only the position rules apply."""
    last = len(t.chain) - 1
    if a > b:
        raise SurgeryError(f"--from {a} is after --to {b}: give the range lowest position first")
    if _same_range(t, a, b):
        return  # the same command again: its survivor is all it may change
    if b > last:
        raise SurgeryError(f"the range {a}..{b} is past the end of the active chain (positions 0..{last})")
    if b == last:
        raise SurgeryError(f"the range {a}..{b} holds the leaf message of the active chain (position {last}): "
                           f"resuming starts from it; end the range before it")
    if again:
        return
    if all(stays_in_place(r) for r in t.chain[a:b + 1]):
        raise SurgeryError(f"the range {a}..{b} holds only records compact-range leaves in place (tool, agent "
                           f"and skill announcements, the CLI's state snapshots, the system prompt): "
                           f"nothing to compact")
    for use, result, tid in spans:
        if (a <= use and result <= b) or result < a or use > b:
            continue  # both inside, or both outside
        if a <= use <= b:
            why = f"the tool_use at position {use} is inside it and its tool_result at position {result} is not"
        elif a <= result <= b:
            why = f"the tool_result at position {result} is inside it and its tool_use at position {use} is not"
        else:
            why = f"it sits between the tool_use at position {use} and its tool_result at position {result}"
        raise SurgeryError(f"the range {a}..{b} splits tool call {tid}: {why}; a tool call and its "
                           f"result must both be inside the range or both outside")
    for r in [r for r in t.chain[a:b + 1] if not stays_in_place(r)][1:]:
        if r.uuid in t.repeated:
            raise SurgeryError(f"position {r.pos}: its uuid {r.uuid} is on more than one line of the file, "
                               f"so removing it would re-point the other copy's children")


def _survivor_marker(obj: dict) -> str | None:
    """The ``<persisted-range>`` marker of a record that is a survivor: one whose
    content is the marker and nothing else, as a user or assistant message's
    content (a string or one text block), or, in the envelope an older tool
    kept, a system or attachment record's ``content``. A marker quoted inside
    a longer message, a tool result or a file does not make a survivor."""
    msg = obj.get("message")
    if isinstance(msg, dict):
        c = msg.get("content")
        if isinstance(c, list) and 1 <= len(c) <= 2 and isinstance(c[0], dict) and c[0].get("type") == "text" \
                and (len(c) == 1 or _carried_title(obj) is not None):
            c = c[0].get("text")
        return c if sc.range_head(c) is not None else None
    for holder in (obj, obj.get("attachment")):
        if isinstance(holder, dict) and sc.range_head(holder.get("content")) is not None:
            return holder["content"]
    return None


def _plain_user(obj: dict, marker: str) -> bool:
    msg = obj.get("message")
    if obj.get("type") != "user" or not isinstance(msg, dict) or msg.get("role") != "user":
        return False
    if any(obj.get(k) for k in NOT_PLAIN):
        return False
    content = msg.get("content")
    return content == marker or (isinstance(content, list) and 1 <= len(content) <= 2
                                 and isinstance(content[0], dict) and content[0].get("text") == marker
                                 and (len(content) == 1 or _carried_title(obj) is not None))


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def _clean(text: str) -> str:
    """Text for one line of a marker: whitespace runs as one space, no control
    characters, and no closing tag that would end the marker early."""
    return one_line(_CONTROL.sub(" ", text)).replace(f"</{sc.RANGE_TAG}", f"< /{sc.RANGE_TAG}")


def _kind(obj: dict) -> str:
    """What a record was: ``user``, ``system/informational``, ``attachment/skill_listing``."""
    sub = obj.get("subtype")
    att = obj.get("attachment")
    if isinstance(att, dict):
        sub = att.get("type")
    return f"{obj.get('type')}/{sub}" if isinstance(sub, str) and sub else str(obj.get("type"))


def _survivor(objs: list[dict], marker: str, files: list[str] | None = None, title: str | None = None) -> dict:
    """The plain user record that stands for the range (module doc). ``files``:
    the names of the saved records in the marker's folder, in chain order, kept
    as ``persistedRange.files`` (a survivor rebuilt keeps its list). ``title``:
    the session's first prompt, when the range held it, carried as a second
    text block (``_title_prompt``), so the title rule picks the same title."""
    first = objs[0]
    content = marker if title is None else [{"type": "text", "text": marker}, {"type": "text", "text": title}]
    out = {"parentUuid": first.get("parentUuid"), "isSidechain": bool(first.get("isSidechain", False)),
           "type": "user", "message": {"role": "user", "content": content}, "uuid": first.get("uuid"),
           "timestamp": first.get("timestamp")}
    for key in ENVELOPE:
        value = next((o[key] for o in objs if isinstance(o.get(key), str) and o[key]), None)
        if value is not None:
            out[key] = value
    if out["timestamp"] is None:
        out["timestamp"] = next((o["timestamp"] for o in objs if isinstance(o.get("timestamp"), str)), None)
        if out["timestamp"] is None:
            del out["timestamp"]
    for key in FORK_FIELDS:  # it stands for its first record: in a fork, that record's lineage
        if isinstance(first.get(key), dict):
            out[key] = first[key]
    kept = first.get(RANGE_FIELD)
    if files is not None:
        out[RANGE_FIELD] = {"files": files}
    elif isinstance(kept, dict):
        out[RANGE_FIELD] = kept
    return out


def _preview_line(r: Record, obj: dict) -> str | None:
    """``[role] excerpt`` of a message, on one line; None for what has no text to show."""
    if r.type not in ("user", "assistant") or obj.get("isMeta"):
        return None
    msg = obj.get("message")
    if not isinstance(msg, dict):
        return None
    # (a line may hold a lone surrogate escape: shown replaced, never refused)
    text = _clean(outline(msg.get("content")).encode("utf-8", "replace").decode("utf-8"))
    if not text:
        return None
    if len(text) > PREVIEW_LINE_CHARS:
        text = text[:PREVIEW_LINE_CHARS].rstrip() + " ..."
    return f"[{msg.get('role') or r.type}] {text}"


def contiguous(positions: list[int]) -> list[tuple[int, int]]:
    """Sorted positions as runs: [3, 4, 5, 9] -> [(3, 5), (9, 9)]."""
    runs: list[tuple[int, int]] = []
    for p in sorted(set(positions)):
        if runs and p == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], p)
        else:
            runs.append((p, p))
    return runs


def _title_prompt(t: Transcript, recs: list[Record]) -> str | None:
    """The first human prompt of the file (in file order: the title rule's
    last fallback, ``records.note_title``) when it is among ``recs``, whitespace
    folded and cut to ``SUMMARY_PROMPT_CHARS``; None when the range does not
    hold it (or it is no fallback: a title line of a kind that outranks it)."""
    if getattr(t, "fork_of", None) or any(r.type in TITLE_KEY for r in t.live()):
        return None  # a fork has its own title line; so has a session a title line outranks the prompt in
    inside = {r.rid for r in recs}
    for r in t.records:
        if r.removed or r.type != "user":
            continue
        p = human_prompt(load_object(r.source) if r.rid in inside else r.parse())
        if p is None:
            continue
        if r.rid not in inside:
            return None
        return " ".join(p.split())[:SUMMARY_PROMPT_CHARS] or None
    return None


def _carried_title(obj: dict) -> str | None:
    """The first prompt a survivor carries as its second text block (``_survivor``)."""
    msg = obj.get("message")
    c = msg.get("content") if isinstance(msg, dict) else None
    if isinstance(c, list) and len(c) == 2 and all(isinstance(b, dict) and b.get("type") == "text" for b in c) \
            and sc.range_head(c[0].get("text")) is not None and isinstance(c[1].get("text"), str) \
            and not sc.is_marker(c[1]["text"]):
        return c[1]["text"]
    return None


def extract_summary(recs: list[Record], files: list[str]) -> str:
    """What a range held, from the records as saved (no --summary given): the
    prompts typed (the first ``SUMMARY_PROMPT_CHARS`` each, with the file each
    record is saved to), the files read and written, the commands run, the
    tools called and how often. One line, at most ``SUMMARY_MAX_CHARS``."""
    prompts: list[str] = []
    n_prompts = 0
    reads: dict[str, None] = {}
    writes: dict[str, None] = {}
    commands: list[str] = []
    n_commands = 0
    tools: dict[str, int] = {}
    for r, path in zip(recs, files):
        raw = r.source
        if r.type == "user" and b'"tool_result"' not in raw:
            p = human_prompt(load_object(raw))
            if p is not None:
                n_prompts += 1
                if len(prompts) < SUMMARY_PROMPTS:
                    text = _clean(p)
                    text = text if len(text) <= SUMMARY_PROMPT_CHARS else text[:SUMMARY_PROMPT_CHARS].rstrip() + "..."
                    prompts.append(f'"{text}" ({Path(path).name})')
        elif r.type == "assistant" and b'"tool_use"' in raw:
            for b in load_object(raw).get("message", {}).get("content") or ():
                if not isinstance(b, dict) or b.get("type") != "tool_use":
                    continue
                name = b.get("name") if isinstance(b.get("name"), str) else "?"
                tools[name] = tools.get(name, 0) + 1
                inp = b.get("input") if isinstance(b.get("input"), dict) else {}
                if name in READS and isinstance(inp.get("file_path"), str):
                    reads[inp["file_path"]] = None
                elif name in WRITES and isinstance(inp.get(WRITES[name]), str):
                    writes[inp[WRITES[name]]] = None
                elif name == "Bash" and isinstance(inp.get("command"), str):
                    n_commands += 1
                    if len(commands) < SUMMARY_COMMANDS:
                        cmd = _clean(inp["command"])
                        commands.append(cmd if len(cmd) <= SUMMARY_COMMAND_CHARS
                                        else cmd[:SUMMARY_COMMAND_CHARS].rstrip() + "...")
    parts = []
    if prompts:
        parts.append(f"{n_prompts} prompt{'s' if n_prompts != 1 else ''}: " + "; ".join(prompts)
                     + (f" (+{n_prompts - len(prompts)} more)" if n_prompts > len(prompts) else ""))
    for label, names in (("read", list(reads)), ("wrote", list(writes))):
        if names:
            parts.append(f"{label} {len(names)} file{'s' if len(names) != 1 else ''}: "
                         + ", ".join(_clean(n) for n in names[:SUMMARY_FILES])
                         + (f" (+{len(names) - SUMMARY_FILES} more)" if len(names) > SUMMARY_FILES else ""))
    if commands:
        parts.append(f"ran {n_commands} command{'s' if n_commands != 1 else ''}: " + "; ".join(f"`{c}`" for c in commands)
                     + (f" (+{n_commands - len(commands)} more)" if n_commands > len(commands) else ""))
    if tools:
        parts.append("tools: " + ", ".join(f"{k} x{v}" for k, v in sorted(tools.items(), key=lambda kv: (-kv[1], kv[0]))))
    parts.append(f"each of the {len(recs)} records saved whole as <uuid>.json in the folder above")
    text = "Extracted (no summary given): " + " | ".join(parts)
    if len(text) > SUMMARY_MAX_CHARS:
        text = text[:SUMMARY_MAX_CHARS - 4].rstrip() + " ..."
    return _clean(text)
