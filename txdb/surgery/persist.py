"""The persist family: heavy content moved to sidecar files, a marker left in its place.

Strips destroy; persist moves. One operation, ``PersistOp``, does every
persist-* command: it walks the records once, picks the blocks its
``Selection`` names (tool results, thinking blocks, text blocks, whole
messages), plans each block's sidecar (``sidecar.plan``: no write yet, so a
dry run writes nothing) and replaces the block with its marker.
``engine.run_surgery`` calls ``write_files`` after the gate and before the
pending copy (or fork) is written: the copy never refers to a file that is
not on disk.

Blocks already persisted (text starting with ``<persisted-``, Claude
Code's own ``<persisted-output>`` included) are skipped, so every command is
idempotent. Summaries come from ``--summary`` or a summaries file
(``load_summaries``: keys ``pos:N``, ``toolu_X``, ``msg:<uuid>``); a key that
summarised nothing is reported with the reason.

``migrate-persisted`` (``surgery/migrate.py``) brings older layouts to this one.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

import orjson

from txdb.model import tokens
from txdb.errors import SurgeryError
from txdb.model.regular import NotRegularFile, open_regular
from txdb.model import sidecar as sc
from txdb.surgery.ops import Op, block_tokens, content_list, loads_tools, message_role, tool_names
from txdb.model.transcript import Record, Transcript, dumps

KINDS = ("tool", "thinking", "text")
DEFAULT_TEXT_MIN_CHARS = 500

Range = tuple[int | None, int | None] | None


# -- summaries -------------------------------------------------------------------

# A summaries file holds one line of text per block; this is far beyond any real one.
MAX_SUMMARIES_BYTES = 64 << 20


def load_summaries(path: str | Path) -> dict[str, str]:
    """A summaries file: a JSON object of strings keyed by ``pos:N``, ``toolu_X``
    or ``msg:<uuid>``. Anything else is one ``SurgeryError`` line."""
    try:
        with open_regular(path) as fh:
            raw = fh.read(MAX_SUMMARIES_BYTES + 1)
    except NotRegularFile:
        raise SurgeryError(f"the summaries file {path} is not a regular file") from None
    except OSError as e:
        raise SurgeryError(f"cannot read the summaries file {path}: {e.strerror}") from None
    if len(raw) > MAX_SUMMARIES_BYTES:
        raise SurgeryError(f"the summaries file {path} is larger than {MAX_SUMMARIES_BYTES >> 20} MB: "
                           "not a summaries file")
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise SurgeryError(f"the summaries file {path} is not JSON: {e}") from None
    if not isinstance(data, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in data.items()):
        raise SurgeryError(f"the summaries file {path} must be a JSON object of strings "
                           "(keys pos:N, toolu_X or msg:<uuid>)")
    for k in data:
        if k.startswith("pos:") and not k[4:].isdigit():
            raise SurgeryError(f"the summaries file {path}: key {k!r} is not pos:<number>")
    return data


def one_line(text: str) -> str:
    return " ".join(text.split())


class Summaries:
    """Looks summaries up by the keys of a block and remembers which keys were used."""

    def __init__(self, table: dict[str, str] | None = None, default: str | None = None):
        # One line each: a summary never adds a line to the marker's shape.
        self.table = {k: one_line(v) for k, v in (table or {}).items()}
        self.default = one_line(default) if default is not None else None
        self.used: set[str] = set()

    def lookup(self, *, pos: int | None, uuid: str | None,
               tool_use_id: str | None = None) -> tuple[str | None, str | None]:
        """(the key that matched or None, the summary); the caller marks the key used."""
        for key in (tool_use_id, f"pos:{pos}" if pos is not None else None, f"msg:{uuid}" if uuid else None):
            if key and key in self.table:
                return key, self.table[key]
        return None, self.default

    def unused(self, t: Transcript) -> list[dict]:
        """Keys that summarised nothing in this pass, with why."""
        out = []
        ids = set(tool_names(t)) if any(not k.startswith(("pos:", "msg:")) for k in self.table) else set()
        for key in sorted(set(self.table) - self.used):
            if key.startswith("pos:"):
                known = int(key[4:]) < len(t.chain)
            elif key.startswith("msg:"):
                known = key[4:] in t.by_uuid
            else:
                known = key in ids
            out.append({"key": key, "reason": "its block was not persisted (already persisted, filtered out, "
                                              "or too small)" if known else "matches nothing in the session"})
        return out


# -- selection -------------------------------------------------------------------

@dataclass
class Selection:
    """What a persist pass touches. ``kinds``: tool, thinking, text; or ``message_pos``
    for persist-message. ``tool_ids`` / ``blocks`` narrow to named targets."""

    kinds: tuple[str, ...] = ()
    positions: Range = None
    tools: list[str] | None = None          # tool name globs
    tool_ids: set[str] | None = None
    pos: int | None = None                  # persist-thinking / persist-text: one chain position
    idx: int | None = None                  # persist-text: one block of that message
    message_pos: int | None = None          # persist-message
    min_chars: int = 0
    keep_recent: int = 0
    max_tokens: int | None = None           # stop once the blocks moved save this much context (rescue)
    narrow: Callable[[Transcript, Transcript], set[str]] | None = None  # --where: tool ids per snapshot

    @property
    def named(self) -> bool:
        """One target named by the user (--id, --pos): moved even when its marker is not smaller."""
        return self.pos is not None or self.message_pos is not None or (self.tool_ids is not None and not self.narrow)


@dataclass
class _Target:
    """A block to move, by place: its text is read again from the record when
    it is processed (``_text``), so the list of targets holds no content."""
    kind: str
    rec: Record
    idx: int | None          # block index (None: the whole message)
    key: str                 # name key for the sidecar
    tool_use_id: str | None = None


_NEEDLE = {"tool": b"tool_result", "thinking": b"thinking"}


class PersistOp(sc.Writes, Op):
    """``op(t, original)`` for ``run_surgery``; ``write_files`` writes the planned sidecars."""

    def __init__(self, selection: Selection, summaries: Summaries | None = None):
        super().__init__()
        self.sel = selection
        self.summaries = summaries or Summaries()

    def __call__(self, t: Transcript, original: Transcript) -> dict:
        self.plan_files(sc.session_dir(t.path))
        base = t.base
        s = self.sel
        for p in (s.pos, s.message_pos):
            if p is not None and p >= len(t.chain):
                raise SurgeryError(f"--pos {p} is past the end of the active chain of the {base} "
                                   f"(positions 0..{len(t.chain) - 1})")
        out = {"base": base, "persisted": {k: 0 for k in KINDS + ("message",)},
               "on_chain": {k: 0 for k in KINDS + ("message",)}, "skipped_persisted": 0,
               "chars_moved": 0, "too_small": 0, "tokens_saved": 0, "context_saved": 0, "sidecars_new": 0, "sidecars_reused": 0, "files": []}
        if s.message_pos is not None:
            targets = self._message_targets(t, out)
        else:
            targets = self._block_targets(t, original, out)
        # Targets come record by record (per kind): one parsed record at a
        # time, stored as soon as its targets are done.
        rec = obj = None
        changed = False
        for tg in targets:
            if tg.rec is not rec:
                if changed:
                    t.touch(rec, obj)
                rec, obj, changed = tg.rec, tg.rec.parse(), False
            trial = self._trial(obj, tg)
            if trial is None:  # the marker would not be smaller: the block stays
                out["too_small"] += 1
                continue
            side, text, old, new, key, summary = trial
            changed = True
            if key:
                self.summaries.used.add(key)
            self.add(side)
            saved = max(0, _tokens(old) - _tokens(new))
            out["tokens_saved"] += saved
            if rec.pos is not None:
                out["context_saved"] += saved  # on the active chain: what the context loses
                out["on_chain"][tg.kind] += 1
            out["persisted"][tg.kind] += 1
            out["chars_moved"] += len(text)
            out["sidecars_reused" if side.reused else "sidecars_new"] += 1
            out["files"].append({"kind": tg.kind, "pos": rec.pos, "uuid": rec.uuid, "tool_use_id": tg.tool_use_id,
                                 "path": str(side.path), "chars": len(text), "summary": summary})
            if s.max_tokens is not None and out["context_saved"] >= s.max_tokens:
                break  # in target order (oldest first): enough moved
        if changed:
            t.touch(rec, obj)
        out["summaries_unused"] = self.summaries.unused(t)
        out["blocks"] = sum(out["persisted"].values())
        return out

    # -- picking blocks ------------------------------------------------------
    def _block_targets(self, t: Transcript, original: Transcript, out: dict) -> list[_Target]:
        s = self.sel
        ids = s.tool_ids
        if s.narrow is not None:
            ids = s.narrow(t, original)
        names = tool_names(t) if s.tools else {}
        found_ids: set[str] = set()
        by_kind: dict[str, list[_Target]] = {k: [] for k in KINDS}
        # Without text to move, a record whose bytes name no block kind asked for holds no target
        # (a name spelled with \u escapes aside): it is not parsed.
        needles = None if "text" in s.kinds else tuple(_NEEDLE[k] for k in s.kinds) + (b"\\u",)
        for rec in t.live():
            if s.pos is not None and rec.pos != s.pos:
                continue
            if rec.type not in ("user", "assistant") or not t.in_range(rec, s.positions):
                continue  # (the type is known unparsed: most records of a long session are neither)
            if needles is not None:
                raw = rec.raw
                if not any(n in raw for n in needles):
                    continue
            obj = rec.parse()
            role = message_role(obj)
            if role not in ("user", "assistant"):
                continue
            msg = obj["message"]
            content = msg.get("content")
            if isinstance(content, str):
                if "text" in s.kinds and (s.idx in (None, 0)):
                    self._text_target(rec, 0, content, by_kind, out)
                continue
            if not isinstance(content, list):
                continue
            for idx, b in enumerate(content):
                if not isinstance(b, dict):
                    continue
                btype = b.get("type")
                if btype == "tool_result" and "tool" in s.kinds:
                    tid = b.get("tool_use_id")
                    if not isinstance(tid, str) or (ids is not None and tid not in ids):
                        continue
                    found_ids.add(tid)
                    if s.tools and not any(fnmatch.fnmatchcase(names.get(tid, ""), p) for p in s.tools):
                        continue
                    text = _result_text(b.get("content"))
                    if text is None or b.get("is_error") or loads_tools(b.get("content")):
                        continue
                    if sc.is_marker(text):
                        out["skipped_persisted"] += 1
                        continue
                    if len(text) < s.min_chars:
                        continue
                    by_kind["tool"].append(_Target("tool", rec, idx, tid, tid))
                elif btype == "thinking" and "thinking" in s.kinds and role == "assistant":
                    text = b.get("thinking")
                    if not isinstance(text, str) or not text or len(text) < s.min_chars:
                        continue
                    if s.idx is not None and idx != s.idx:
                        continue
                    first = next(i for i, x in enumerate(content) if isinstance(x, dict)
                                 and x.get("type") == "thinking")
                    key = rec.uuid or f"offset-{rec.offset}"
                    by_kind["thinking"].append(_Target("thinking", rec, idx, key if idx == first
                                                       else f"{key}_{idx}"))
                elif btype == "text" and "text" in s.kinds:
                    if s.idx is not None and idx != s.idx:
                        continue
                    text = b.get("text")
                    if isinstance(text, str):
                        self._text_target(rec, idx, text, by_kind, out)
        if ids is not None and s.narrow is None and s.tool_ids is not None:
            unknown = sorted(s.tool_ids - found_ids)
            if unknown:
                raise SurgeryError(f"no tool result with id {unknown[0]} in the {t.base}"
                                   + (f" (+{len(unknown) - 1} more)" if len(unknown) > 1 else ""))
        targets = []
        for kind, items in by_kind.items():
            if s.keep_recent:
                items = self._keep_recent(items)
            targets.extend(items)
        return targets

    def _keep_recent(self, items: list[_Target]) -> list[_Target]:
        """``items`` less the newest ``keep_recent`` on the active chain that
        would move (what the next turns read; a block too small to shrink
        does not count, and off the chain nothing is recent context)."""
        chain = sorted((tg for tg in items if tg.rec.pos is not None), key=lambda tg: (tg.rec.pos, tg.idx or 0))
        kept: set[int] = set()
        for tg in reversed(chain):
            if len(kept) >= self.sel.keep_recent:
                break
            if self._trial(tg.rec.parse(), tg) is not None:
                kept.add(id(tg))
        return [tg for tg in items if id(tg) not in kept]

    def _trial(self, obj: dict, tg: _Target):
        """Put the target's marker in ``obj``: ``(side, text, old, new, key,
        summary)``, or None (``obj`` as it was) when the marker would not be
        smaller and no one named the target."""
        text = _text(obj, tg)
        if not self.sel.named and _marker_is_larger(obj, tg, text):
            return None  # known without planning its file or building its marker
        data = text.encode("utf-8", "surrogatepass")
        rel = sc.relative_path("message" if tg.kind == "message" else tg.kind, tg.key, tg.idx)
        side = self.plan(rel, data)
        rec = tg.rec
        key, summary = self.summaries.lookup(pos=rec.pos, uuid=rec.uuid, tool_use_id=tg.tool_use_id)
        old = _part(obj, tg)
        _replace(obj, tg, side, text, summary)
        new = _part(obj, tg)
        if not self.sel.named and len(dumps(new)) >= len(dumps(old)):
            _restore(obj, tg, old)
            return None
        return side, text, old, new, key, summary

    def _text_target(self, rec: Record, idx: int, text: str, by_kind: dict, out: dict) -> None:
        if sc.is_marker(text):
            out["skipped_persisted"] += 1
            return
        if not text or len(text) < max(self.sel.min_chars, 1):
            return
        by_kind["text"].append(_Target("text", rec, idx, rec.uuid or f"offset-{rec.offset}"))

    def _message_targets(self, t: Transcript, out: dict) -> list[_Target]:
        rec = t.chain[self.sel.message_pos]
        group = _tool_closure(t, rec)
        for r in group:
            if r is t.leaf:
                which = "is" if r is rec else "would take along"
                raise SurgeryError(f"persist-message {which} the leaf message of the active chain "
                                   f"(position {r.pos}): resuming needs it")
        targets = []
        for r in sorted(group, key=lambda r: r.rid):
            obj = r.parse()
            msg = obj.get("message")
            if r.type not in ("user", "assistant") or not isinstance(msg, dict):
                raise SurgeryError(f"position {r.pos} is a {r.type} line, not a message")
            content = msg.get("content")
            if _is_message_marker(content):
                out["skipped_persisted"] += 1
                continue
            key = r.uuid or f"offset-{r.offset}"
            targets.append(_Target("message", r, None, key))
        return targets


def _result_text(content) -> str | None:
    """The text of a tool result that persists as text (a string, or text blocks only)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and content and all(
            isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str) for b in content):
        return "\n".join(b["text"] for b in content)
    return None


def _is_message_marker(content) -> bool:
    if isinstance(content, str):
        return sc.is_marker(content)
    return isinstance(content, list) and len(content) == 1 and isinstance(content[0], dict) \
        and sc.is_marker(content[0].get("text"))


def _tool_ids(rec: Record) -> tuple[set[str], set[str]]:
    uses, results = set(), set()
    for b in content_list(rec.parse()) or ():
        if isinstance(b, dict):
            if b.get("type") in ("tool_use", "server_tool_use") and isinstance(b.get("id"), str):
                uses.add(b["id"])
            elif b.get("type") == "tool_result" and isinstance(b.get("tool_use_id"), str):
                results.add(b["tool_use_id"])
    return uses, results


def _tool_closure(t: Transcript, rec: Record) -> list[Record]:
    """``rec`` and every message its tool pairs tie it to (a tool_use's result
    message, a result's tool_use message), transitively."""
    index: dict[str, list[Record]] = {}
    for r in t.live():
        if r.type not in ("user", "assistant"):
            continue
        u, res = _tool_ids(r)
        for i in u | res:
            index.setdefault(i, []).append(r)
    group = {rec.rid: rec}
    todo = [rec]
    while todo:
        r = todo.pop()
        u, res = _tool_ids(r)
        for i in u | res:
            for other in index.get(i, ()):
                if other.rid not in group:
                    group[other.rid] = other
                    todo.append(other)
    return list(group.values())


def _replace(obj: dict, tg: _Target, side: sc.Sidecar, text: str, summary: str | None) -> None:
    """Put the marker of ``text`` (the target's text, moved to ``side``) in its place."""
    msg = obj["message"]
    if tg.kind == "tool":
        block = msg["content"][tg.idx]
        block["content"] = sc.tool_marker(side.path, len(side.data), text, summary)
    elif tg.kind == "thinking":
        msg["content"][tg.idx] = {"type": "text", "text": sc.marker("thinking", side.path, len(text), summary,
                                                                   sc.preview(text))}
    elif tg.kind == "text":
        mark = sc.marker("text", side.path, len(text), summary, sc.preview(text))
        if isinstance(msg.get("content"), str):
            msg["content"] = mark
        else:
            msg["content"][tg.idx] = dict(msg["content"][tg.idx], text=mark)
            msg["content"][tg.idx].pop("citations", None)
    else:
        role = msg.get("role") or obj.get("type")
        msg["content"] = [{"type": "text", "text": sc.marker("message", side.path, len(text), summary,
                                                            _message_preview(role, msg.get("content")))}]


def _text(obj: dict, tg: _Target) -> str:
    """What goes into a target's sidecar, read from its record's object."""
    content = obj["message"]["content"]
    if tg.kind == "message":
        return dumps(content).decode("utf-8", "surrogatepass")
    if isinstance(content, str):
        return content
    block = content[tg.idx]
    if tg.kind == "tool":
        return _result_text(block.get("content"))
    return block["thinking"] if tg.kind == "thinking" else block["text"]


def _message_preview(role, content) -> str:
    return f"[{role}] " + sc.preview(outline(content))


def outline(content) -> str:
    """A message's content as text for a preview: its text, tool calls and
    results as ``[tool_use NAME ID]`` / ``[tool_result ID] text``, other blocks as ``[type]``."""
    parts = []
    if isinstance(content, str):
        parts.append(content)
    elif isinstance(content, list):
        for b in content:
            if not isinstance(b, dict):
                continue
            bt = b.get("type")
            if bt == "text":
                parts.append(str(b.get("text", "")))
            elif bt == "tool_use":
                parts.append(f"[tool_use {b.get('name')} {b.get('id')}]")
            elif bt == "tool_result":
                parts.append(f"[tool_result {b.get('tool_use_id')}] {_result_text(b.get('content')) or ''}")
            elif bt == "thinking":
                parts.append("[thinking]")
            elif bt:
                parts.append(f"[{bt}]")
    return "\n".join(parts)


def _marker_is_larger(obj: dict, tg: _Target, text: str) -> bool:
    """Whether a tool result's marker is surely larger than the result: a
    string, or one text block, that the marker's preview holds whole
    (``sc.TOOL_PREVIEW_CHARS``) beside its head and path (which outweigh one
    block's envelope). The most common result of a long session (most are
    short): ``_trial``'s answer for it without a sidecar plan or a marker."""
    if tg.kind != "tool" or len(text) > sc.TOOL_PREVIEW_CHARS:
        return False
    content = obj["message"]["content"][tg.idx].get("content")
    return isinstance(content, str) or (isinstance(content, list) and len(content) == 1)


def _part(obj: dict, tg: _Target):
    """What a target replaces: its block (a copy), or the message's whole content."""
    content = obj["message"]["content"]
    if tg.kind == "message" or isinstance(content, str):
        return content if isinstance(content, str) else list(content)
    return dict(content[tg.idx])


def _restore(obj: dict, tg: _Target, old) -> None:
    if tg.kind == "message" or isinstance(old, str):
        obj["message"]["content"] = old
    else:
        obj["message"]["content"][tg.idx] = old


def _tokens(part) -> int:
    if isinstance(part, str):
        return tokens.text_tokens(part)
    if isinstance(part, list):
        return sum(block_tokens(b) for b in part if isinstance(b, dict))
    return block_tokens(part)


def persist_tool_ids(rows: Iterable[dict]) -> set[str]:
    """The tool ids of ``--where`` rows (a tool_use row persists that call's result)."""
    return {r["tool_use_id"] for r in rows if r.get("tool_use_id")}
