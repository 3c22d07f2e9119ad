"""rescue: bring a session under a context target in one pass, with the least loss.

``RescueOp(target)`` is one ``op(t, original)`` for ``engine.run_surgery``:
one pending copy (or fork), one gate, one entry in the surgeries log whose
result lists every step. It runs the existing operations, cheapest loss
first, and stops as soon as the calibrated estimate (the engine's
``tokens_after``: ``usage.context_estimator`` fitted on the original) is at
or under the *aim*: the target less the estimate's tolerance
(``ESTIMATE_TOLERANCE``, 2%: the most the estimate may read under what the
CLI sends, the bound ``bench/bench_truth.py`` holds it to), so that what the
CLI then sends is at or under the target itself:

1. ``strip-attachments``: superseded attachments, by the attachment policy
   (``ops.strip_attachments``; free: the CLI renders the newest of a kind);
2. ``persist-tools``: tool results to sidecars, oldest first, the newest
   ``keep_recent`` left in place (``persist.PersistOp``);
3. ``persist-thinkings``: thinking blocks to sidecars from the front; one
   with no text (a signature only, ``redacted_thinking``: nothing to save)
   is dropped (``ops.strip_thinking``) in the same chain order;
4. ``persist-texts``: text blocks of at least ``persist.DEFAULT_TEXT_MIN_CHARS``
   chars, oldest first, the newest ``keep_recent`` left;
5. ``compact-range``: the oldest closed span ``0..B`` (``B`` the smallest
   end that reaches the target and cuts no tool call; the leaf never in it)
   becomes one survivor, each record saved whole
   (``compact_range.CompactRangeOp``), with ``summary`` or the placeholder;
   should that fall short, the next span starts after that survivor (never
   one survivor inside another made by the same pass).

Steps 2-4 touch only the active chain (what the estimate and the CLI
count; a block off it costs no context) and move a budget of tokens per
round (``Selection.max_tokens``, counted on the chain) and measure again;
the budget is the remaining gap over the fall of the estimate per raw
token (the fit's factor, then what the rounds so far showed), so a step
moves at most one block more than it must (after ``MAX_ROUNDS`` rounds
the budget doubles each round). The estimate counts the result as the
engine writes it: without the thinking blocks an edit makes the API drop
(``thinking.dropped_tokens``); the first round of a step moves one block,
so the fall of such a first edit is measured before any budget is set. The sidecars of every step are planned into one table
(``sidecar.Writes.shared``) and written by the engine after the gate
(``write_files``), before the copy that names them.

Already under the aim: nothing changes (no pending copy). When even step
5 leaves the estimate above the aim, ``SurgeryError``: the engine writes
nothing.

Default target (``default_target``): the window a resume runs in
(``resume_window``: ``--window``, else 1M for a model named ``[1m]``, else
the smallest window a known release runs the model in, ``windows``: 200k
for every model on 2.1.250, though 2.1.300 and later run claude-opus-5-5
in 1M; a session there past 200k would be auto-compacted on resume by 2.1.250)
less what Claude Code 2.1.x keeps
free before it auto-compacts: the output reserve (``min(max output tokens,
20,000)``) and the auto-compact buffer (13,000); less the room the largest
system prompt and tools among the releases txdb knows
(``RELEASE_OVERHEAD``, measured with each real CLI) need over those of the
release the session last ran on (its records' ``version``), whose the
estimate already counts: so 161,973 for a 200k window on 2.1.328, and a
rescued session loads whole on each of those releases. The result says the
window, why, and the release (``window``, ``window_reason``, ``release``,
``release_room``).
"""

from __future__ import annotations

import math

from txdb.errors import SurgeryError
from txdb.surgery import ops
from txdb.surgery import persist as per
from txdb.model import sidecar as sc
from txdb.model import windows
from txdb.surgery import thinking
from txdb.surgery.compact_range import CompactRangeOp, stays_in_place
from txdb.surgery.ops import Op, chain_estimate, system_prompt_tokens, tool_spans
from txdb.model.transcript import Transcript
from txdb.surgery.usage import chain_images, context_estimator, unsent_tokens

WINDOW = windows.WINDOW
LONG_WINDOW = windows.LONG_WINDOW
OUTPUT_RESERVE = 20_000      # Claude Code: min(maxOutputTokens, 20000) off the window
AUTOCOMPACT_BUFFER = 13_000  # Claude Code: the auto-compact threshold is the rest less 13000
MARGIN = OUTPUT_RESERVE + AUTOCOMPACT_BUFFER
DEFAULT_KEEP_RECENT = 3
MAX_ROUNDS = 4               # per persist step at the measured rate; then the budget doubles
ACTIVE_CHAIN = (0, None)     # persist only what the estimate (and the CLI) counts: the active chain
SURVIVOR_ALLOWANCE = 300     # raw tokens of a compact-range survivor's marker
ESTIMATE_TOLERANCE = 0.02    # the most the estimate reads under what the CLI sends (bench_truth's bound)

# What each release sends beside the conversation (system prompt and tools),
# as the fake API bills it (request chars / 4), resuming one CLI-made session
# (5a73f7d9) with each real CLI: 2.1.300 sends 5,027 more than 2.1.328.
RELEASE_OVERHEAD = {"2.1.250": 14_122, "2.1.300": 14_688, "2.1.328": 9_661, "2.1.332": 9_661}
WINDOWS = {"200k": WINDOW, "1m": LONG_WINDOW}

STEPS = ("strip-attachments", "persist-tools", "persist-thinkings", "persist-texts", "compact-range")
_KIND = {"persist-tools": "tool", "persist-thinkings": "thinking", "persist-texts": "text"}


def window_of(t: Transcript) -> int:
    """The context window the session ran in: 1M when any turn the file
    records ran on a ``[1m]`` model or recorded a context past 200k (only a
    1M window holds that: the window is the model's, not the current size,
    so a session a rescue brought under 200k keeps it); else the window the
    session's release (``first_release``) runs its last turn's model in
    (``windows.model_window``). The rule of the ``context_gauge`` view's
    ``window_tokens`` (what ``sessions_near_limit`` and ``txdb sessions``
    judge by), held to it by tests/test_rules.py."""
    last, at = None, -1
    for r in t.records:  # each turn's model and recorded context are kept on it (no parse here)
        if r.type != "assistant":
            continue
        if "[1m]" in (r.model or "").lower() or (ops.recorded_context(r) or 0) > WINDOW:
            return LONG_WINDOW
        if r.pos is not None and r.pos > at and r.model and r.model != "<synthetic>":
            last, at = r.model, r.pos
    return windows.model_window(last, first_release(t))


def first_release(t: Transcript) -> str | None:
    """The ``version`` of the first user or assistant record that has one (the catalog's ``sessions.version``)."""
    for r in t.records:
        if r.type in ("user", "assistant"):
            v = r.parse().get("version")
            if isinstance(v, str) and v:
                return v
    return None


def parse_window(text: str | int | None) -> int | None:
    """``--window``: ``200k``, ``1m`` or a number of tokens (``k``/``m`` suffixes too)."""
    if text is None or isinstance(text, int):
        return text
    v = str(text).strip().lower().replace(",", "").replace("_", "")
    if v in WINDOWS:
        return WINDOWS[v]
    scale = {"k": 1_000, "m": 1_000_000}.get(v[-1:], 1)
    num = v[:-1] if scale != 1 else v
    try:
        n = int(float(num) * scale) if num else 0
    except ValueError:
        n = 0
    if n <= MARGIN:
        raise SurgeryError(f"--window {text}: give 200k, 1m or a number of tokens above {MARGIN:,}")
    return n


def last_release(t: Transcript) -> str | None:
    """The CLI release the session last ran on: the ``version`` of its last record that has one."""
    for r in reversed(t.records):
        if r.removed or r.type not in ("user", "assistant", "system", "attachment"):
            continue
        v = r.parse().get("version")
        if isinstance(v, str) and v:
            return v
    return None


def _release_key(v: str) -> tuple:
    return tuple(int(x) if x.isdigit() else 0 for x in v.split("."))


def release_room(release: str | None) -> tuple[int, str, str]:
    """(tokens, the release that sends the most beside the conversation, the
    known release taken for ``release``): how much more than ``release`` the
    largest of ``RELEASE_OVERHEAD`` sends. A release txdb does not know is
    taken as the newest known one at or before it (before all of them: the
    smallest)."""
    worst = max(RELEASE_OVERHEAD, key=lambda k: RELEASE_OVERHEAD[k])
    known = sorted(RELEASE_OVERHEAD, key=_release_key)
    base = None
    if release:
        at = [k for k in known if _release_key(k) <= _release_key(release)]
        base = at[-1] if at else None
    if base is None:
        base = min(RELEASE_OVERHEAD, key=lambda k: RELEASE_OVERHEAD[k])
    return RELEASE_OVERHEAD[worst] - RELEASE_OVERHEAD[base], worst, base


def resume_window(t: Transcript, window: int | None = None) -> tuple[int, str]:
    """(the window a resume runs in, why): ``window`` (``--window``); else 1M
    for a ``[1m]`` model; else the smallest window any known release runs
    the session's model in (``windows.windows_by_release``), so the result
    loads whole on each of them, saying so when a turn recorded more."""
    if window is not None:
        return window, "--window"
    peak, model = 0, None
    for r in t.records:
        if r.type != "assistant" or r.model == "<synthetic>":
            continue
        model = r.model or model
        if "[1m]" in (r.model or "").lower():
            return LONG_WINDOW, f"the model {r.model} has a 1M window"
        peak = max(peak, ops.recorded_context(r) or 0)
    by = windows.windows_by_release(model)
    win = min(by.values())
    name = model or "of the session"
    longer = [r for r, w in by.items() if w > win]
    if longer:
        shorter = [r for r, w in by.items() if w == win]
        why = (f"the model {name} runs in {win // 1000:,}k on {', '.join(shorter)} (1M on {', '.join(longer)}): "
               "the target fits the smallest (pass --window 1m to keep 1M)")
    else:
        why = f"the model {name} runs in {win // 1000:,}k on every known release unless resumed as [1m]"
        if peak > WINDOW:
            why += (f"; a turn recorded {peak:,} (it ran on a 1M window), but Claude Code auto-compacts a resume "
                    "that is not [1m] (pass --window 1m to keep 1M)")
    return win, why


def default_target(t: Transcript, window: int | None = None) -> int:
    return target_plan(t, window)["target"]


def target_plan(t: Transcript, window: int | None = None) -> dict:
    """The default target and what it is made of (module doc)."""
    win, why = resume_window(t, window)
    release = last_release(t)
    room, worst, base = release_room(release)
    return {"target": win - MARGIN - room, "window": win, "window_reason": why, "release": release,
            "release_room": room, "release_worst": worst, "release_base": base, "margin": MARGIN}


def aim_of(target: int) -> int:
    """The estimate rescue brings a session to for ``target``: low enough that
    the request is under ``target`` even when the estimate reads
    ``ESTIMATE_TOLERANCE`` under what the CLI sends."""
    return math.floor(target * (1 - ESTIMATE_TOLERANCE))


class RescueOp(sc.Writes, Op):
    """``op(t, original)`` for ``run_surgery`` (module doc). ``target`` None: ``default_target``."""

    def __init__(self, target: int | None = None, summary: str | None = None,
                 keep_recent: int = DEFAULT_KEEP_RECENT, window: int | str | None = None):
        super().__init__()
        if target is not None and target <= 0:
            raise SurgeryError(f"--target {target}: give a positive number of tokens")
        self.target = target
        self.window = parse_window(window)
        self.summary = summary
        self.keep_recent = keep_recent
        self.ops: list[sc.Writes] = []

    # The sidecars of every step: written (and taken back) together.
    def write_files(self, owner: tuple[int, int] | None = None) -> int:
        n = 0
        try:
            for op in self.ops:
                n += op.write_files(owner)
        except BaseException:
            self.remove_files()
            raise
        return n

    def remove_files(self) -> None:
        for op in self.ops:
            op.remove_files()

    def _persist_round(self, t: Transcript, sel: per.Selection) -> dict:
        op = self._sub(per.PersistOp(sel))
        res = op(t, t)
        op.files = res["files"]  # which record each planned file is for (``_unplan_compacted``)
        return res

    def _sub(self, op: sc.Writes) -> sc.Writes:
        op.shared = self
        self.ops.append(op)
        return op

    def __call__(self, t: Transcript, original: Transcript) -> dict:
        self.plan_files(sc.session_dir(t.path))
        self.ops = []
        measure = context_estimator(original)
        plan = target_plan(original, self.window)
        target = self.target if self.target is not None else plan["target"]
        aim = aim_of(target)
        start = _Progress(t, original, measure).now
        out = {"base": t.base, "target": target, "aim": aim, "tolerance": ESTIMATE_TOLERANCE,
               "target_default": self.target is None, **{k: v for k, v in plan.items() if k != "target"},
               "tokens_start": start, "steps": [],
               "reached": start <= aim, "sidecars_new": 0, "sidecars_reused": 0, "chars_moved": 0}
        self._original = original
        state = _Progress(t, original, measure)
        for name in STEPS:
            if state.now <= aim:
                break
            if name == "strip-attachments":
                step = self._attachments(t, state)
            elif name == "compact-range":
                step = self._compact(t, state, aim)
            elif name == "persist-thinkings":
                step = self._thinking(t, state, aim)
            else:
                step = self._persist(t, state, aim, name)
            if step is not None:
                out["steps"].append(step)
                out["sidecars_new"] += step.get("sidecars_new", 0)
                out["sidecars_reused"] += step.get("sidecars_reused", 0)
                out["chars_moved"] += step.get("chars_moved", 0)
        if any(isinstance(op, CompactRangeOp) for op in self.ops):
            self._unplan_compacted(t, out)
        out["tokens_after"] = state.now
        out["reached"] = state.now <= aim
        if not out["reached"]:
            done = ", ".join(f"{s['step']} -> {s['tokens_after']:,}" for s in out["steps"]) or "no step applies"
            raise SurgeryError(f"rescue cannot bring the session under {target:,} tokens (the aim, the target "
                               f"less {ESTIMATE_TOLERANCE:.0%}: ~{aim:,}): every step leaves ~{state.now:,} "
                               f"({done}); nothing was written")
        return out

    def _unplan_compacted(self, t: Transcript, out: dict) -> None:
        """A block an earlier step moved whose record compact-range then saved
        whole: that record's file holds the line as the session held it, so
        the block's own sidecar would be named by nothing. Such files are not
        written (a file another record's marker names still is)."""
        named: set[str] = set()
        for op in self.ops:
            if isinstance(op, per.PersistOp):
                for uuid in {f["uuid"] for f in op.files if f.get("uuid")}:
                    rec = t.by_uuid.get(uuid)
                    if rec is not None and not rec.removed:
                        named |= sc.referenced(rec.raw)
        for op in self.ops:
            if not isinstance(op, per.PersistOp):
                continue
            keep = [s for s in op.sidecars if str(s.path) in named]
            for s in op.sidecars:
                if str(s.path) not in named:
                    out["sidecars_reused" if s.reused else "sidecars_new"] -= 1
                    out["sidecars_unused"] = out.get("sidecars_unused", 0) + 1
            op.sidecars = keep

    # -- the steps -----------------------------------------------------------
    def _attachments(self, t: Transcript, state: "_Progress") -> dict | None:
        res = ops.strip_attachments(t)
        if not res["removed"]:
            return None
        state.update()
        return {"step": "strip-attachments", "tokens_after": state.now, "dropped": res["removed"],
                "by_type": res["by_type"], "moved": 0}

    def _persist(self, t: Transcript, state: "_Progress", target: int, name: str) -> dict | None:
        kind = _KIND[name]
        step = _persist_step(name, state)
        rnd = 0
        while state.now > target:
            budget = _round_budget(state, target, rnd)
            rnd += 1
            sel = per.Selection(kinds=(kind,), positions=ACTIVE_CHAIN, keep_recent=self.keep_recent,
                                min_chars=per.DEFAULT_TEXT_MIN_CHARS if kind == "text" else 0, max_tokens=budget)
            res = self._persist_round(t, sel)
            if not res["blocks"]:
                break
            state.update()
            _moved(step, res, state)
        return step if step["moved"] else None

    def _thinking(self, t: Transcript, state: "_Progress", target: int) -> dict | None:
        """The thinking step: thinking blocks from the front of the chain, each
        readable one moved to a sidecar, each empty one (a signature only, or
        ``redacted_thinking``: nothing a user can read back, so nothing to
        save) dropped as strip-thinking drops it (``ops.strip_thinking``), in
        chain order, so what goes is always a front of the thinking (which
        the API keeps valid: docs/surgery.md, preserved thinking)."""
        if sum(n for _p, _m, n in ops.chain_thinking(t)) <= unsent_tokens(t):
            return None  # no thinking on the chain counts (usage.unsent_tokens): moving it saves nothing
        step = _persist_step("persist-thinkings", state)
        rnd = 0
        while state.now > target:
            budget = _round_budget(state, target, rnd)
            rnd += 1
            lo, hi = self._movable(t, "thinking")
            blocks = _thinking_blocks(t, lo, hi)
            first_empty = next((i for i, b in enumerate(blocks) if not b[2]), None)
            moved = dropped = 0
            if first_empty != 0 and blocks:
                # the readable blocks before the first empty one: moved, oldest first
                upto = hi if first_empty is None else blocks[first_empty][0] - 1
                sel = per.Selection(kinds=("thinking",), positions=(lo, upto), keep_recent=0, max_tokens=budget)
                res = self._persist_round(t, sel)
                moved = res["blocks"]
            if not moved and first_empty is not None:
                # the run of empty blocks from the first one, up to the next readable block
                refs, saved = set(), 0
                for _pos, ref, readable, n in blocks[first_empty:]:
                    if readable or saved >= budget:
                        break
                    refs.add(ref)
                    saved += n
                dropped = ops.strip_thinking(t, blocks=refs)["blocks"]
            if not moved and not dropped:
                break
            state.update()
            if moved:
                _moved(step, res, state)
            else:
                step["rounds"] += 1
                step["dropped"] += dropped
                step["tokens_after"] = state.now
        return step if step["moved"] or step["dropped"] else None

    def _movable(self, t: Transcript, kind: str) -> tuple[int | None, int | None]:
        """Chain positions a persist round may move from: the active chain; for
        thinking, only before the first block the API drops anyway (its marker
        would cost what the block no longer does; the engine removes it, unless
        told to keep it: ``Transcript.keeps_dropped_thinking``)."""
        if kind == "thinking" and not t.keeps_dropped_thinking:
            first = thinking.dropped_thinking(self._original, t).first_pos
            if first is not None:
                return (0, first - 1)
        return ACTIVE_CHAIN

    def _compact(self, t: Transcript, state: "_Progress", target: int) -> dict | None:
        step = {"step": "compact-range", "tokens_after": state.now, "moved": 0, "dropped": 0, "ranges": [],
                "sidecars_new": 0, "sidecars_reused": 0, "summary": self.summary}
        start = 0
        while state.now > target:
            b = _range_end(t, state.raw_needed(target) + SURVIVOR_ALLOWANCE, start, state.dropped)
            if b is None:
                break
            op = self._sub(CompactRangeOp(start, b, self.summary))
            res = op(t, t)
            t.refresh()
            # A further round starts after this survivor: compacting it again in the same
            # pass would save the record the file held, not the survivor naming these files.
            survivor = t.by_uuid.get(res["ranges"][0]["uuid"]) if res["ranges"] else None
            start = survivor.pos + 1 if survivor is not None and survivor.pos is not None else start
            before = state.now
            state.update()
            if not res["compacted"] or state.now >= before:
                break
            step["moved"] += res["records"]
            step["sidecars_new"] += res["sidecars_new"]
            step["sidecars_reused"] += res["sidecars_reused"]
            step["ranges"].append({"from": res["ranges"][0]["from"], "to": b, "records": res["records"]})
            step["tokens_after"] = state.now
        return step if step["ranges"] else None


def _persist_step(name: str, state: "_Progress") -> dict:
    return {"step": name, "tokens_after": state.now, "moved": 0, "dropped": 0, "chars_moved": 0,
            "sidecars_new": 0, "sidecars_reused": 0, "rounds": 0, "positions": []}


def _round_budget(state: "_Progress", target: int, rnd: int) -> int:
    """Raw tokens a persist round moves. The first round moves one block: the
    first edit of a session whose model binds thinking also drops every later
    thinking block, a fall no budget foresees. Past ``MAX_ROUNDS`` the budget
    doubles each round, so the step ends in a few more."""
    return 1 if rnd == 0 else state.budget(target) * 2 ** max(0, rnd + 1 - MAX_ROUNDS)


def _moved(step: dict, res: dict, state: "_Progress") -> None:
    step["rounds"] += 1
    step["moved"] += res["blocks"]
    step["chars_moved"] += res["chars_moved"]
    step["sidecars_new"] += res["sidecars_new"]
    step["sidecars_reused"] += res["sidecars_reused"]
    step["positions"].extend(f["pos"] for f in res["files"])
    step["tokens_after"] = state.now


def _thinking_blocks(t: Transcript, lo: int, hi: int | None) -> list[tuple[int, ops.BlockRef, bool, int]]:
    """``(chain position, block, readable, raw tokens)`` of the thinking blocks
    of the assistant messages at positions ``lo..hi``, in chain order.
    Readable: a ``thinking`` block with text (what persist moves); the rest
    (a signature only, ``redacted_thinking``) hold nothing to save."""
    out = []
    for pos, rec in enumerate(t.chain):
        if pos < lo or (hi is not None and pos > hi):
            continue
        if rec.type != "assistant" or not rec.uuid or b"thinking" not in rec.raw:
            continue
        for idx, b in enumerate(ops.content_list(rec.parse()) or ()):
            if isinstance(b, dict) and b.get("type") in ("thinking", "redacted_thinking"):
                text = b.get("thinking")
                readable = b["type"] == "thinking" and isinstance(text, str) and bool(text)
                out.append((pos, ops.BlockRef(rec.uuid, idx), readable, ops.block_tokens(b)))
    return out


class _Progress:
    """The estimate as the steps go: the calibrated figure (``now``) and the
    raw chain estimate it is fitted from, so a budget in raw tokens can be
    asked for the remaining gap. Both count the result as the engine will
    write it: less the thinking blocks an edit makes the API drop
    (``thinking.dropped_thinking``), which the engine removes after the op
    (with ``--keep-dropped-thinking`` it keeps them: they count), and less
    the thinking the request leaves out (``usage.unsent_tokens``), as the
    plan's estimate does."""

    def __init__(self, t: Transcript, original: Transcript, measure):
        self.t, self.original, self.measure = t, original, measure
        self.raw = self._raw()
        self.now = measure.of_raw(self.raw, chain_images(t))
        # calibrated tokens per raw token: the fit's factor, then what the steps showed
        self.rate = min(4.0, max(0.25, measure.factor))

    def _raw(self) -> int:
        self.dropped = {} if self.t.keeps_dropped_thinking else thinking.dropped_tokens(
            self.t, thinking.dropped_thinking(self.original, self.t))
        gone = frozenset(r.pos for u in self.dropped if (r := self.t.by_uuid.get(u)) is not None)
        return (chain_estimate(self.t) - system_prompt_tokens(self.t) - sum(self.dropped.values())
                - unsent_tokens(self.t, gone))

    def update(self) -> None:
        self.t.refresh()
        raw = self._raw()
        now = self.measure.of_raw(raw, chain_images(self.t))
        if self.raw - raw > 0 and self.now - now > 0:
            self.rate = min(4.0, max(0.25, (self.now - now) / (self.raw - raw)))
        self.now, self.raw = now, raw

    def raw_needed(self, target: int) -> int:
        return math.ceil(max(0, self.now - target) / self.rate)

    def budget(self, target: int) -> int:
        return max(1, self.raw_needed(target))


def _range_end(t: Transcript, needed: int, start: int = 0, dropped: dict[str, int] | None = None) -> int | None:
    """The smallest end ``B`` of a range ``start..B`` that saves ``needed`` raw tokens,
    cuts no tool call and leaves the leaf out; the largest such end when none
    saves enough; None when there is none. ``dropped``: tokens of a record (by
    uuid) that already count for nothing (thinking the API drops)."""
    dropped = dropped or {}
    chain = t.chain
    last = len(chain) - 1
    open_at = [0] * (len(chain) + 1)  # tool calls open across the boundary after each position
    for use, result, _tid in tool_spans(t):
        open_at[use] += 1
        open_at[result] -= 1
    saved, inside, best, content = 0, 0, None, False
    model = ops.priced_model(t)
    opens = ops.chain_opens(t)
    for b in range(0, last):
        r = chain[b]
        inside += open_at[b]
        if b < start:
            continue
        if not stays_in_place(r):
            saved += ops.record_estimate(r, model, opens[b]) - dropped.get(r.uuid or "", 0)
            content = True
        if inside or not content:
            continue
        best = b
        if saved >= needed:
            return b
    return best
