"""Preserved thinking: an edit of earlier history makes the API drop every
later thinking block (on the models docs/surgery.md names).

Each thinking block's signature binds it to the history before it and to
the previous thinking block. Removing thinking blocks from the front of the
history is safe; any other edit (tool inputs or results, attachments,
ranges, a thinking block removed after a surviving one) makes the API drop
every thinking block after it. ``dropped_thinking`` compares the original
with the result and lists those blocks; ``remove_dropped`` takes them out,
so the file and the gauge match what the model sees.

Nothing readable is lost: ``SavedThinking`` moves the text of each dropped
block to its sidecar (``persisted/thinking/<uuid>.txt``, as persist-thinking
names it) before the block goes, and leaves its ``<persisted-thinking>``
marker in the record's ``persistedThinking`` list (``sidecar.DROPPED_FIELD``),
a field the CLI never sends (the model would not have seen the block: its
pointer costs the request nothing). A record the removal takes whole (a
line of thinking only) hands its markers to the next record of the chain
that stays. ``sidecar.referenced`` reads them as it reads every marker
(apply checks the files, undo counts them); refresh catalogs them as
persisted markers (``show-thinking`` lists them) and the files as sidecars.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from txdb.model import sidecar as sc
from txdb.model.records import record_tokens
from txdb.model.transcript import Transcript, dumps
from txdb.surgery.ops import (BlockRef, content_list, is_thinking_block, message_role, record_estimate,
    strip_thinking, thinking_size)

# Claude Fable 5.1, Opus 5.5, Sonnet 5.5, Haiku 5.5. Older models (Opus
# 4.8, ...) and Claude Mythos 5.1 do not bind thinking this way.
_AFFECTED = re.compile(r"(?:^|[-_/.])(fable-5[-.]1|opus-5[-.]5|sonnet-5[-.]5|haiku-5[-.]5)(?:$|[-_@.\[])")


def model_binds_thinking(model: str | None) -> bool:
    return bool(model) and _AFFECTED.search(model.lower()) is not None


@dataclass
class DroppedThinking:
    edit_pos: int | None = None  # first edited chain position (original numbering)
    count: int = 0
    chars: int = 0
    first_pos: int | None = None  # chain position (result numbering) of the first dropped block
    blocks: set[BlockRef] = field(default_factory=set)

    def as_dict(self) -> dict:
        return {"edit_pos": self.edit_pos, "count": self.count, "chars": self.chars, "first_pos": self.first_pos}


def _sans_thinking(o: dict) -> bytes:
    content = content_list(o)
    if content is not None:
        role = message_role(o)
        return dumps([b for b in content if not is_thinking_block(b, role)])
    body = {k: v for k, v in o.items() if k in ("attachment", "content", "message", "rendered")}
    return dumps(body)


def _thinking_count(o: dict) -> int:
    content = content_list(o)
    if not content:
        return 0
    role = message_role(o)
    return sum(1 for b in content if is_thinking_block(b, role))


def dropped_thinking(original: Transcript, result: Transcript) -> DroppedThinking:
    out = DroppedThinking()
    edit = None
    surviving_before = False
    # Thinking blocks of the original's unchanged records, by record: a pass (rescue) asks again each step.
    counts = original.__dict__.setdefault("_thinking_counts", {})
    for pos, o in enumerate(original.chain):
        r = result.by_uuid.get(o.uuid) if o.uuid else None
        if r is not None and o.same_bytes(r):
            if b"think" not in o.raw:
                continue  # unchanged and no thinking block in it (nor a <think> text): nothing to compare
            if o.new is None:
                n = counts.get(o.offset)
                if n is None:
                    n = counts[o.offset] = _thinking_count(o.parse())
                if n:
                    surviving_before = True
                continue
        oo = o.parse()
        if r is None:
            content = content_list(oo)
            only_thinking = bool(content) and _thinking_count(oo) == len(content)
            if not only_thinking or surviving_before:
                edit = pos
                break
            continue
        ro = oo if o.same_bytes(r) else r.parse()
        if ro is not oo and _sans_thinking(oo) != _sans_thinking(ro):
            edit = pos
            break
        if _thinking_count(ro) < _thinking_count(oo) and surviving_before:
            edit = pos
            break
        if _thinking_count(ro):
            surviving_before = True
    out.edit_pos = edit
    if edit is None:
        return out
    orig_pos = {rec.uuid: i for i, rec in enumerate(original.chain) if rec.uuid}
    for pos, rec in enumerate(result.chain):
        if not rec.uuid:
            continue
        opos = orig_pos.get(rec.uuid)
        if opos is not None and opos <= edit:
            continue
        if not model_binds_thinking(rec.model) or b"think" not in rec.raw:
            continue  # no thinking block in it (nor a <think> text)
        obj = rec.parse()
        content = content_list(obj)
        if not content:
            continue
        role = message_role(obj)
        for idx, b in enumerate(content):
            if is_thinking_block(b, role):
                out.count += 1
                out.chars += thinking_size(b)
                out.blocks.add(BlockRef(rec.uuid, idx))
                if out.first_pos is None:
                    out.first_pos = pos
    return out


def dropped_tokens(result: Transcript, info: DroppedThinking) -> dict[str, int]:
    """Raw chain tokens ``remove_dropped`` takes off each record of ``result``
    (by uuid; a message left empty goes whole), without changing it: what a
    pass that measures its own result (rescue) counts before the engine
    removes them."""
    by_uuid: dict[str, set[int]] = {}
    for b in info.blocks:
        by_uuid.setdefault(b.uuid, set()).add(b.idx)
    out: dict[str, int] = {}
    for uuid, idxs in by_uuid.items():
        rec = result.by_uuid.get(uuid)
        if rec is None or rec.pos is None:
            continue
        obj = rec.parse()
        keep = [b for i, b in enumerate(content_list(obj) or ()) if i not in idxs]
        after = record_tokens(dict(obj, message=dict(obj["message"], content=keep)), opens=False) if keep else 0
        out[uuid] = max(0, record_estimate(rec) - after)  # neither with its message's wrapper
    return out


def remove_dropped(result: Transcript, info: DroppedThinking) -> dict:
    if not info.blocks:
        return {"blocks": 0}
    return strip_thinking(result, blocks=info.blocks)


class SavedThinking(sc.Writes):
    """The readable thinking ``remove_dropped`` takes out, saved (module doc):
    ``plan`` before the removal, ``place`` after it; the engine writes the
    files with the op's (``write_files``), after the gate and before the copy."""

    def __init__(self, shared: sc.Writes | None = None):
        super().__init__(shared)
        self.markers: dict[str, list[str]] = {}  # uuid of the record that held them -> markers
        self.order: list[str] = []               # those uuids in chain order
        self.saved = 0
        self.chars = 0

    def plan_dropped(self, result: Transcript, info: DroppedThinking) -> None:
        self.plan_files(sc.session_dir(result.path))
        by_uuid: dict[str, list[int]] = {}
        for b in info.blocks:
            by_uuid.setdefault(b.uuid, []).append(b.idx)
        self.chain = list(result.chain)  # the order the holders are looked for in, before the removal
        for rec in self.chain:
            idxs = by_uuid.get(rec.uuid or "")
            if not idxs:
                continue
            content = content_list(rec.parse()) or []
            first = next((i for i, x in enumerate(content) if isinstance(x, dict) and x.get("type") == "thinking"),
                         None)
            for idx in sorted(idxs):
                b = content[idx] if idx < len(content) else None
                # a thinking block's text, or a text block that is one <thinking> span
                text = b.get("thinking" if b.get("type") == "thinking" else "text") if isinstance(b, dict) else None
                if not isinstance(text, str) or not text:
                    continue  # a signature only, redacted: nothing a reader could read back
                key = rec.uuid if idx == first else f"{rec.uuid}_{idx}"
                side = self.plan(sc.relative_path("thinking", key), text.encode("utf-8", "surrogatepass"))
                self.add(side)
                mark = sc.marker("thinking", side.path, len(text), DROPPED_SUMMARY, sc.preview(text))
                if rec.uuid not in self.markers:
                    self.order.append(rec.uuid)
                self.markers.setdefault(rec.uuid, []).append(mark)
                self.saved += 1
                self.chars += len(text)

    def place(self, result: Transcript) -> None:
        """Leave each marker on its record, or on the next record of the chain
        the removal kept (a thinking-only line goes whole)."""
        at = {r.uuid: i for i, r in enumerate(self.chain) if r.uuid}
        held: dict[int, list[str]] = {}
        for uuid in self.order:
            i = at[uuid]
            while i < len(self.chain) and self.chain[i].removed:
                i += 1
            if i == len(self.chain):  # never: the leaf stays (a placeholder text at least)
                i = at[uuid]
            held.setdefault(i, []).extend(self.markers[uuid])
        for i, marks in held.items():
            rec = self.chain[i]
            obj = rec.parse()
            kept = obj.get(sc.DROPPED_FIELD)
            obj[sc.DROPPED_FIELD] = (kept if isinstance(kept, list) else []) + marks
            result.touch(rec, obj)

    def as_dict(self) -> dict:
        return {"saved": self.saved, "chars_saved": self.chars,
                "sidecars": [str(s.path) for s in self.sidecars]}


DROPPED_SUMMARY = "thinking the API drops after an earlier edit (not sent); saved here"
