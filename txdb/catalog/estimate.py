"""Context estimates calibrated against the usage the API recorded.

chars/4 alone is a poor guess of what a session costs (0.3x to 7.6x the
recorded context on real sessions): the system prompt and tool schemas are
not in the file, tokenisers differ from chars/4, and the CLI re-renders
attachments. But every untouched assistant turn carries ground truth: the
context its request used, ``input + cache_read + cache_creation``. So:

- a *turn pair* is ``(estimate, recorded)`` for one assistant turn k on the
  active chain: ``estimate`` = txdb's raw token estimate (``txdb.model.tokens``)
  of the chain lines *before* turn k (what its request carried), and
  ``recorded`` = the context the API recorded for it;
- :func:`fit` fits ``recorded ~ overhead + factor * estimate`` over the
  pairs (least squares, with guards) and remembers the most recent pair as
  an *anchor*; images, where enough turns added some, as a term of their
  own (a pair's third member: the image tokens within its estimate);
- :func:`predict` turns any raw estimate of the same chain into a
  calibrated one: ``recorded_anchor + factor * (estimate - estimate_anchor)``
  (only the difference from a turn the API measured is estimated), else
  ``overhead + factor * estimate``; never negative.

Pure functions over numbers, so the same calibration serves the catalog
(:func:`catalog_pairs`, :func:`session_estimate`) and a transcript being
edited (the post-strip estimate of ``reset-usage``: fit on the pairs of
untouched turns, then ``predict(f, raw_estimate_after_strip)``).
"""

from __future__ import annotations

import bisect
import json
import math
import re
import sqlite3
from dataclasses import asdict, dataclass, replace
from typing import Iterable, Sequence

from txdb.model import deep, journal
from txdb.catalog.ingest.chunks import raw_at
from txdb.model.records import MAX_COUNT, image_tokens
from txdb.model.tokens import THINKING_BLOCK_TOKENS


# Fitted factors outside this range mean the pairs are not linear (a compact,
# a change of tools): fall back to the ratio of sums, then to 1.
MIN_FACTOR = 0.25
MAX_FACTOR = 8.0
# At most this many recent turns take part in a fit: the system prompt and
# tool list drift over a long session, the last turns say most about now.
MAX_TURNS = 40
# Images are fitted as their own term only when at least this many of the
# fitted turns added some: priced by one or two steps, one turn's noise (a
# real session's one image whose turn recorded 230 tokens for txdb's 1,112)
# sets their price, and the factor moves with it (1.22 -> 1.29 there, its
# strip-all predicted 4.5% under what the CLI sent).
MIN_IMAGE_STEPS = 3
# A bounded fit needs this many turns to learn a factor: fewer cannot tell it
# from one turn's noise (a shipped session with its results cut kept two, the
# second a little stale: 1.11 where the CLI-made content costs 1.00, 6% over).
MIN_FIT_TURNS = 5

# The prior, for a session with no recorded turn to fit on: the medians of
# the per-session fits that bench/bench_estimate.py prints for the corpus
# (see docs/catalog.md). Sessions that recorded a system-prompt snapshot (newer CLIs)
# send a fixed part (system prompt, tool schemas) of about
# PRIOR_SNAPSHOT_SHARE of the snapshot's chars/4, and their content costs
# about PRIOR_SNAPSHOT_FACTOR tokens per chars/4 token. Older sessions hold
# no snapshot: their fixed part is about PRIOR_OVERHEAD tokens, and their
# content (more code and JSON, which tokenize denser than prose) about
# PRIOR_FACTOR tokens per chars/4 token.
PRIOR_SNAPSHOT_SHARE = 0.73
PRIOR_SNAPSHOT_FACTOR = 1.00
PRIOR_OVERHEAD = 20_000
PRIOR_FACTOR = 1.16


def prior(system_prompt_tokens: int | None) -> tuple[float, float]:
    """(overhead, factor) to use when a session has no recorded turn."""
    sp = int(system_prompt_tokens or 0)
    if sp > 0:
        return max(overhead_floor(sp), PRIOR_SNAPSHOT_SHARE * sp), PRIOR_SNAPSHOT_FACTOR
    return float(PRIOR_OVERHEAD), PRIOR_FACTOR


# What a request carries before any message: CLI 2.1.328 sends an empty
# session's system prompt and tools as 9,537 chars/4 tokens (measured on the
# real CLI, 2.1.332: 9,534, 2.1.250: 13,920), so no fit may put a session's
# overhead below it; a snapshot of the system prompt (prompt_snapshot) is
# sent at about 0.72 of its chars/4 (CLI-made sessions: 9,726 of 13,461).
EMPTY_SESSION_OVERHEAD = 9_500
SNAPSHOT_FLOOR_SHARE = 0.7
# The plausible tokens per chars/4 token of a session's content: the fits of
# the corpus's sessions range 0.84-2.07 (CLI-made ones 0.99-1.01), a turn's
# own level (recorded less the overhead, over its prefix) the same. A fit is
# held inside it, and a turn whose figure no factor in it explains (with an
# overhead up to MAX_OVERHEAD) describes other content than the file's now.
FACTOR_RANGE = (0.7, 2.5)
MAX_OVERHEAD = 60_000
# From one calibrating turn to the next, the recorded context grows by at
# most STEP_MAX tokens per chars/4 token the chain grew, give or take
# STEP_SLACK_SHARE of the figure (untouched corpus sessions: steps up to 5.5
# a token; what a step adds beyond 6 a token at most 4.4% of its figure,
# a reminder the file does not hold): a larger jump is content the file no
# longer holds (another tool cut it in place), and the turns after it
# measured that content. A fall below STEP_MIN per token grown says the
# earlier turns measured content since removed (after a strip, the reset
# last turn is what is left): those earlier turns give way.
STEP_MAX = 6.0
STEP_MIN = 0.5
STEP_SLACK_SHARE = 0.05
# Cuts of many small results each hide in a step's slack, not in the slope:
# the least-squares slope of the fitted turns' figures over their prefixes
# is at most 2.07 on the corpus's untouched sessions (d3f32579, 423 turns;
# at 2.0 its genuine turns would give way); above MAX_SLOPE the latest turns
# give way until the rest grow as content can (a shipped CLI-made session
# with every result cut read 2.2x what the CLI sends before this, 1.06 after).
MAX_SLOPE = 2.2


def overhead_floor(system_prompt_tokens: int | None) -> float:
    """The least a session's fixed part (system prompt, tools) can cost: what
    CLI 2.1.328 sends for an empty session, or more where the session's own
    snapshot of its system prompt says so."""
    return max(float(EMPTY_SESSION_OVERHEAD), SNAPSHOT_FLOOR_SHARE * float(system_prompt_tokens or 0))


def select_turns(pairs: Sequence[tuple], floor: float = EMPTY_SESSION_OVERHEAD) -> tuple[list[int], dict[int, str]]:
    """Which recorded turns describe the content as it is now: ``(kept
    indices, {rejected index: why})`` over ``pairs`` (``(estimate,
    recorded, ...)`` in chain order). A turn is rejected when its figure is
    outside what its prefix can cost (``FACTOR_RANGE`` with an overhead from
    ``floor``'s share to ``MAX_OVERHEAD``), when it jumps above the last kept
    turn by more than the content added could cost (``STEP_MAX``), and a
    kept turn gives way when a later one falls below it (``STEP_MIN``)."""
    lo_f, hi_f = FACTOR_RANGE
    top = max(float(MAX_OVERHEAD), 3 * floor)
    kept: list[int] = []
    rejected: dict[int, str] = {}
    for i, p in enumerate(pairs):
        e, r = p[0], p[1]
        if e is None or r is None or r <= 0:
            continue
        if r < lo_f * e:
            rejected[i] = f"recorded {r:,.0f}, under what its prefix costs at {lo_f:g} a token ({lo_f * e:,.0f})"
            continue
        if r > top + hi_f * e:
            rejected[i] = (f"recorded {r:,.0f}, over what its prefix could cost ({top + hi_f * e:,.0f}):"
                           " content cut since")
            continue
        jump = False
        while kept:
            j = kept[-1]
            de, dr = e - pairs[j][0], r - pairs[j][1]
            slack = STEP_SLACK_SHARE * max(r, pairs[j][1])
            if dr > STEP_MAX * max(de, 0.0) + slack:
                rejected[i] = f"{dr:,.0f} more than turn {j}'s for {de:,.0f} of content: content cut since"
                jump = True
                break
            if dr < STEP_MIN * de - slack:
                rejected[j] = f"over what turn {i} recorded for its longer prefix: content cut since"
                kept.pop()
                continue
            break
        if not jump:
            kept.append(i)
    # Many small cuts hide in the steps' slack but not in the slope: figures
    # that grow faster than content can cost measured content removed since;
    # the latest give way until the rest grow as content does.
    while _steep(pairs, kept):
        rejected[kept.pop()] = "with the turns before it, grows faster than content can cost: content cut since"
    return kept, rejected


@dataclass(frozen=True)
class Fit:
    """``recorded ~ overhead + factor * estimate``; ``method`` says how it was
    obtained: ``lsq`` (least squares), ``ratio`` (a fit out of range: ratio
    of sums, overhead 0), ``anchor`` (one usable turn: its offset, factor 1)
    or ``raw`` (no usable turn: factor 1, the prior overhead)."""

    overhead: float = 0.0
    factor: float = 1.0
    turns_used: int = 0
    method: str = "raw"
    anchor_estimate: float | None = None
    anchor_recorded: float | None = None
    # Tokens per raw token of images (``records.image_tokens``), fitted as
    # their own term when MIN_IMAGE_STEPS fitted turns added some; None: ``factor``.
    image_factor: float | None = None
    anchor_images: float = 0.0
    # The least the fixed part can cost (``overhead_floor``): with it, no
    # prediction reads under it plus the lowest plausible factor's content.
    floor: float = 0.0

    def as_dict(self) -> dict:
        return asdict(self)


def _usable(pairs: Iterable[tuple]) -> list[tuple[float, float, float]]:
    """``(estimate, recorded, images)`` of the usable pairs; a pair without
    its third member holds no image."""
    out = []
    for p in pairs:
        e, r, i = p[0], p[1], (p[2] if len(p) > 2 else 0)
        if e is None or r is None:
            continue
        e, r, i = float(e), float(r), float(i or 0)
        if e > 0 and r > 0 and math.isfinite(e) and math.isfinite(r) and math.isfinite(i):
            out.append((e, r, i))
    return out


def _fit_images(usable: list[tuple[float, float, float]], lo: float = MIN_FACTOR, hi: float = MAX_FACTOR,
                intercept: float | None = None) -> tuple[float, float] | None:
    """``recorded ~ a + factor * (estimate - images) + image_factor * images``
    by least squares: ``(factor, image_factor)`` (the caller anchors ``a``), or None when the two
    terms cannot be told apart or a factor is out of ``lo``-``hi``. With
    ``intercept``, ``a`` is held at it (the overhead floor)."""
    n = len(usable)
    xs = [(e - i, i, r - (intercept or 0.0)) for e, r, i in usable]
    m1, m2, my = (sum(x[k] for x in xs) / n for k in range(3)) if intercept is None else (0.0, 0.0, 0.0)
    s11 = sum((x - m1) ** 2 for x, _, _ in xs)
    s22 = sum((i - m2) ** 2 for _, i, _ in xs)
    s12 = sum((x - m1) * (i - m2) for x, i, _ in xs)
    s1y = sum((x - m1) * (r - my) for x, _, r in xs)
    s2y = sum((i - m2) * (r - my) for _, i, r in xs)
    det = s11 * s22 - s12 * s12
    if det <= 1e-9 * s11 * s22:
        return None
    b = (s22 * s1y - s12 * s2y) / det
    g = (s11 * s2y - s12 * s1y) / det
    if not (lo <= b <= hi) or g < 0:
        return None
    return b, g


def fit(pairs: Sequence[tuple], max_turns: int = MAX_TURNS,
        prior_overhead: float = 0.0, prior_factor: float = 1.0,
        floor: float | None = None, factor_range: tuple[float, float] | None = None) -> Fit:
    """Calibrate over ``(estimate, recorded)`` pairs of untouched turns, in
    chain order. Pairs where either side is missing or not positive are
    ignored. The most recent usable pair is the anchor of :func:`predict`.
    With no usable pair the fit is ``raw``: ``prior_factor`` and
    ``prior_overhead`` (see :func:`prior`).

    Bounded (what :func:`calibrate` asks): the overhead at least ``floor``,
    the factor inside ``factor_range``; one usable pair anchors at
    ``prior_factor``. Unbounded (a benchmark's change of units), an
    overhead may be negative and one pair anchors at factor 1.

    A pair may carry a third member: the image tokens within its estimate
    (``records.image_tokens``, counted from any fixed point of the chain).
    When at least :data:`MIN_IMAGE_STEPS` turns added images, they are
    fitted as their own term
    (``image_factor``): the API a session was recorded on may bill an image
    otherwise than by its pixels (a fake one billed base64 chars/4, 18x the
    rest's rate), and the growth they bring must not set the factor the
    rest of the content is priced by."""
    usable = _usable(pairs)[-max_turns:] if max_turns else _usable(pairs)
    n = len(usable)
    bounded = floor is not None or factor_range is not None
    lo, hi = factor_range or (MIN_FACTOR, MAX_FACTOR)
    floor = float(floor or 0.0)
    if n == 0:
        return Fit(overhead=max(floor, float(prior_overhead or 0)), factor=float(prior_factor or 1.0))
    anchor_e, anchor_r, anchor_i = usable[-1]
    anchor = {"anchor_estimate": anchor_e, "anchor_recorded": anchor_r, "anchor_images": anchor_i}
    if n == 1 or (bounded and n < MIN_FIT_TURNS):
        b = min(hi, max(lo, float(prior_factor or 1.0))) if bounded else 1.0
        return Fit(overhead=max(floor, anchor_r - b * anchor_e) if bounded else anchor_r - anchor_e,
                   factor=b, turns_used=1, method="anchor", **anchor)
    mx = sum(e for e, _, _ in usable) / n
    my = sum(r for _, r, _ in usable) / n
    if sum(a[2] != b[2] for a, b in zip(usable, usable[1:])) >= MIN_IMAGE_STEPS:
        two = _fit_images(usable, lo, hi)
        if two is not None and bounded:
            mi = sum(i for _, _, i in usable) / n
            if my - two[0] * (mx - mi) - two[1] * mi < floor:
                two = _fit_images(usable, lo, hi, intercept=floor)
        if two is not None:
            b, g = two
            return Fit(overhead=my - b * mx, factor=b, turns_used=n, method="lsq", image_factor=g, **anchor)
    sxx = sum((e - mx) ** 2 for e, _, _ in usable)
    sxy = sum((e - mx) * (r - my) for e, r, _ in usable)
    if bounded:
        b = sxy / sxx if sxx > 0 else sum(r - floor for _, r, _ in usable) / sum(e for e, _, _ in usable)
        b = min(hi, max(lo, b))
        a = my - b * mx
        if a < floor:
            # the line through the floor: least squares of (recorded - floor) ~ factor * estimate
            a = floor
            b = min(hi, max(lo, sum(e * (r - floor) for e, r, _ in usable) / sum(e * e for e, _, _ in usable)))
        return Fit(overhead=a, factor=b, turns_used=n, method="lsq", **anchor)
    if sxx > 0:
        b = sxy / sxx
        if MIN_FACTOR <= b <= MAX_FACTOR:
            return Fit(overhead=my - b * mx, factor=b, turns_used=n, method="lsq", **anchor)
    b = sum(r for _, r, _ in usable) / sum(e for e, _, _ in usable)
    b = min(MAX_FACTOR, max(MIN_FACTOR, b))
    return Fit(overhead=0.0, factor=b, turns_used=n, method="ratio", **anchor)


def calibrate(pairs: Sequence[tuple], system_prompt_tokens: int | None = 0) -> tuple[Fit, list[int], dict[int, str]]:
    """The session's fit from the turns that describe its content now:
    ``(fit, kept indices, {rejected index: why})``. :func:`select_turns`
    picks the turns, :func:`fit` is held to the overhead floor
    (:func:`overhead_floor`) and ``FACTOR_RANGE``; no turn kept: the
    :func:`prior`. The one statement of the session's calibration: the
    catalog's (:func:`session_estimate`) and a pass's
    (``surgery/usage.context_estimator``) both call it."""
    floor = overhead_floor(system_prompt_tokens)
    kept, rejected = select_turns(pairs, floor)
    overhead, factor = prior(system_prompt_tokens)
    f = fit([pairs[i] for i in kept], prior_overhead=overhead, prior_factor=factor,
            floor=floor, factor_range=FACTOR_RANGE)
    return replace(f, floor=floor), kept, rejected


def _steep(pairs: Sequence[tuple], kept: list[int]) -> bool:
    """Whether the recorded figures of the fitted turns grow faster than
    any plausible content cost (least-squares slope over MAX_SLOPE)."""
    xs = [(float(pairs[i][0]), float(pairs[i][1])) for i in kept[-MAX_TURNS:]]
    if len(xs) < 2:
        return False
    mx, my = sum(e for e, _ in xs) / len(xs), sum(r for _, r in xs) / len(xs)
    sxx = sum((e - mx) ** 2 for e, _ in xs)
    return sxx > 0 and sum((e - mx) * (r - my) for e, r in xs) / sxx > MAX_SLOPE


def _value(f: Fit, estimate: float, images: float) -> float:
    if f.method == "raw" or f.anchor_estimate is None or f.anchor_recorded is None:
        return f.overhead + f.factor * estimate
    g = f.factor if f.image_factor is None else f.image_factor
    d_images = images - f.anchor_images
    return f.anchor_recorded + f.factor * (estimate - f.anchor_estimate - d_images) + g * d_images


def predict(f: Fit, estimate: float, images: float = 0.0) -> int:
    """A calibrated token count for a raw ``estimate`` of the same chain;
    ``images``: the image tokens within it, counted as the fit's pairs
    counted theirs (they matter only to a fit with an ``image_factor``)."""
    estimate = max(0.0, float(estimate or 0))
    value = _value(f, estimate, float(images or 0))
    # A chain never costs less than its fixed part and the lowest plausible
    # factor times its raw size: a large removal priced at a steep local
    # factor must not read under what is left (d3f32579 read under chars/4).
    least = f.floor + FACTOR_RANGE[0] * estimate if f.floor > 0 else MIN_FACTOR * estimate
    return max(int(round(least)), int(round(value)))


def as_line(f: Fit, estimate: float | None = None, images: float = 0.0) -> tuple[float, float]:
    """``(overhead, factor)`` with ``predict(f, e) == predict(Fit(overhead,
    factor, method="logged"), e)`` for every ``e``: the anchor folded into
    the overhead, what a surgery logs (``surgeries.fit_*``). With images
    priced apart, the line through the prediction at ``estimate`` (whose
    image tokens are ``images``): a chain that grows from there by text."""
    if estimate is not None:
        return _value(f, float(estimate), float(images or 0)) - f.factor * float(estimate), f.factor
    if f.method != "raw" and f.anchor_estimate is not None and f.anchor_recorded is not None:
        return f.anchor_recorded - f.factor * f.anchor_estimate, f.factor
    return f.overhead, f.factor


def at_factor(f: Fit, factor: float | None) -> Fit:
    """``f`` with content priced at ``factor`` (held to ``FACTOR_RANGE``;
    images at it too) through ``f``'s own anchor: a surgery's result priced
    at its original's factor. The result's recorded turns all measured the
    content before the surgery, so those it made stale bend its own fit
    (30 stale turns took a real session's 1.45 to 1.78, and the unrecorded
    tail after its last turn, 250k tokens, read 54k larger for a strip);
    its reset last turn, the plan's figure for what is left before it, is
    the anchor. None or not a number: ``f``."""
    v = logged_value(factor)
    return f if v is None else replace(f, factor=v, image_factor=None)


def logged_value(factor) -> float | None:
    """A logged factor as the estimate prices at it: held to
    ``FACTOR_RANGE`` (a journal may be forged); None when not a number."""
    if not isinstance(factor, (int, float)) or isinstance(factor, bool) or not math.isfinite(factor):
        return None
    lo, hi = FACTOR_RANGE
    return min(hi, max(lo, float(factor)))


def context(f: Fit, estimate: float, messages: bool, images: float = 0.0) -> int:
    """A session's calibrated context: :func:`predict`, or 0 when its active
    chain holds no message (no conversation: nothing to send, not the
    prior's overhead)."""
    return predict(f, estimate, images) if messages else 0


def leave_last_out(pairs: Sequence[tuple[float, float]], prior_overhead: float = 0.0,
                   prior_factor: float = 1.0, system_prompt_tokens: int | None = None) -> dict:
    """Fit on every usable pair but the last; predict the last. The honest
    check of the calibration: it never sees the value it is judged on.
    With ``system_prompt_tokens``, as :func:`calibrate` fits: over the turns
    :func:`select_turns` keeps, the last kept one judged."""
    if system_prompt_tokens is not None:
        floor = overhead_floor(system_prompt_tokens)
        kept, _rejected = select_turns(pairs, floor)
        if not kept:
            return {"fit": Fit(), "estimate": None, "predicted": None, "recorded": None}
        last_e, last_r = float(pairs[kept[-1]][0]), float(pairs[kept[-1]][1])
        last_i = float(pairs[kept[-1]][2]) if len(pairs[kept[-1]]) > 2 else 0.0
        overhead, factor = prior(system_prompt_tokens)
        f = replace(fit([pairs[i] for i in kept[:-1]], prior_overhead=overhead, prior_factor=factor,
                        floor=floor, factor_range=FACTOR_RANGE), floor=floor)
        return {"fit": f, "estimate": last_e, "predicted": predict(f, last_e, last_i), "recorded": last_r}
    usable = _usable(pairs)
    if not usable:
        return {"fit": Fit(), "estimate": None, "predicted": None, "recorded": None}
    *train, (last_e, last_r, last_i) = usable
    f = fit(train, prior_overhead=prior_overhead, prior_factor=prior_factor)
    return {"fit": f, "estimate": last_e, "predicted": predict(f, last_e, last_i), "recorded": last_r}


CONTEXT_FIELDS = ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")


def field_count(v) -> int:
    # a count out of range (records.MAX_COUNT) is invalid, as the catalog stores it
    return v if isinstance(v, int) and not isinstance(v, bool) and 0 < v <= MAX_COUNT else 0


def context_sum(usage: dict) -> int:
    """input + cache read + cache creation of one usage object (or one of
    its ``iterations[]``), non-numbers, negatives and counts above
    ``records.MAX_COUNT`` as 0."""
    return sum(field_count(usage.get(k)) for k in CONTEXT_FIELDS)


def recorded_context(usage: dict | None) -> int | None:
    """The context gauge of one API usage object, as Claude Code reads it:
    :func:`context_sum` of the last ``iterations[]`` entry when there is
    one, else of the totals; None when the usage records none of the three.
    The one Python statement of the gauge (the catalog's is the
    ``context_gauge`` view, held to this by tests/test_rules.py)."""
    if not isinstance(usage, dict):
        return None
    its = usage.get("iterations")
    src = its[-1] if isinstance(its, list) and its and isinstance(its[-1], dict) else usage
    if all(src.get(k) is None for k in CONTEXT_FIELDS):
        return None
    return context_sum(src)


def before_compaction(timestamp, boundary: str) -> bool:
    """A turn recorded before the compaction its chain now hangs below (a
    preserved segment): its usage measured the old, longer context."""
    return bool(boundary) and isinstance(timestamp, str) and timestamp < boundary


# The active chain from its leaf back, with what a turn needs. Read newest
# first so a refresh can stop after the turns a fit uses, whatever the
# session's length. System-prompt snapshots are stored at 0 tokens (they
# count once per session, in the overhead).
_CHAIN_DESC_SQL = """
SELECT ch.pos, r.type, r.model, r.message_id, r.timestamp, r.tokens
FROM chain ch JOIN records r ON r.file_id = ch.file_id AND r.offset = ch.offset
WHERE ch.file_id = ? ORDER BY ch.pos DESC
"""
# Turns recorded before the latest compaction on the chain (a preserved
# segment) measured the old context: not calibration points.
_BOUNDARY_SQL = """
SELECT coalesce(max(r.timestamp), '') FROM records r
JOIN chain ch ON ch.file_id = r.file_id AND ch.offset = r.offset
WHERE r.file_id = ? AND r.type = 'system' AND r.subtype = 'compact_boundary'
"""
# The file a session's estimate is of, to find the factor its newest swap
# logged (model/journal.logged_factor).
_FILE_SQL = "SELECT path, size, sha256 FROM files WHERE id = ?"
# A turn's figures as the file holds them now (``usage.gauge_*``: after a
# usage reset, the lowered ones; the API's own stay in ``usage``): the
# estimate is of the file, whatever history the catalog saw of it
# (gauge_iterations is stored NULL when it is the row's iterations, 'null'
# when the file holds none: migration 044).
_USAGE_SQL = """
SELECT message_id, gauge_input_tokens, gauge_cache_read_input_tokens, gauge_cache_creation_input_tokens,
       nullif(coalesce(gauge_iterations, iterations), 'null')
FROM usage WHERE file_id = ? AND message_id IN (SELECT value FROM json_each(?))
"""


# Whether the active chain holds a message (a session with none has no context).
_MESSAGES_SQL = """
SELECT EXISTS (SELECT 1 FROM chain ch JOIN records r ON r.file_id = ch.file_id AND r.offset = ch.offset
               WHERE ch.file_id = ? AND r.type IN ('user', 'assistant'))
"""


def calibrates(model: str | None) -> bool:
    """Whether a turn's recorded usage measures the request Claude Code sent:
    a Claude model's. Another model behind Claude Code (a local one, say) may
    cut the prompt to its own window first (Ollama's default is 2,048
    tokens), so its figures size the model's window, not the request; the
    synthetic turns the CLI writes itself record nothing."""
    return isinstance(model, str) and "claude" in model.lower()  # also Bedrock's and Vertex's ids


# A model id's family and version: claude-sonnet-4-5-20250929 (Bedrock's
# and Vertex's forms too), claude-3-7-sonnet-20250219.
_MODEL_VERSION_RE = re.compile(r"claude-(?:(opus|sonnet|haiku)-(\d+)(?:[-.](\d)(?!\d))?|(\d)[-.])")


def counts_thinking(model: str | None) -> bool:
    """Whether the API counts the thinking blocks a request carries back
    (its earlier assistant messages') in the context of a request on
    ``model``. Measured on the recorded turns of real sessions (a fit of
    each turn's recorded context against its thinking and the rest apart;
    docs/catalog.md): on Sonnet 4 and 4.5 and Opus 4.5 thinking adds
    nothing (-0.9 to 0.4 tokens a token, 8 sessions), on Sonnet 4.6, Opus
    4.7 and Opus 5 its size (0.9-1.1). So Sonnet and Haiku up to 4.5, Opus
    up to 4.5 and older families do not count it; later models, and any
    id this does not know, do (tests/test_thinking_counted.py)."""
    m = _MODEL_VERSION_RE.search(model.lower()) if isinstance(model, str) else None
    if m is None:
        return True
    if m.group(4) is not None:  # claude-3-5-sonnet, claude-2.1
        return False
    return (int(m.group(2)), int(m.group(3) or 0)) >= (4, 6)


def unsent_thinking(thinking: Iterable[tuple[int, str | None, int]], before: int, model: str | None) -> int:
    """Thinking tokens a request on ``model`` leaves out of its context:
    the CLI sends a message's thinking only when the message's ``model`` is
    the request's (CLI 2.1.328; tests/test_thinking_model_realcli.py), and
    on a model that does not count thinking carried back
    (:func:`counts_thinking`) none of it is context. ``thinking``: ``(chain
    position, message model, thinking tokens)`` per record that holds
    thinking (``records.thinking_tokens``); counted are those before
    position ``before``. Subtracted from the raw estimate of each
    calibration turn (on its own model) and of the session (on its current
    model: the last assistant turn's); the stored per-record figures keep
    it. The one statement of that rule (:func:`unsent_thinking_at` is it
    for many positions of one chain)."""
    return unsent_thinking_at(thinking)(before, model)


def unsent_thinking_at(thinking: Iterable[tuple[int, str | None, int]]):
    """``(before, model) -> unsent_thinking(thinking, before, model)``, each
    call a lookup in running sums (per model, made on first use), not a
    walk of the chain's thinking: a pass asks it for every turn."""
    rows = sorted(thinking, key=lambda x: x[0])
    positions = [pos for pos, _m, _t in rows]
    every = [0]  # thinking before each row
    carried = [0]  # of it, the rows a model wrote (the ones another model's request leaves out)
    for _pos, m, t in rows:
        every.append(every[-1] + t)
        carried.append(carried[-1] + (t if m and m != "<synthetic>" else 0))
    own: dict[str, list[int]] = {}
    counts: dict[str, bool] = {}

    def at(before: int, model: str | None) -> int:
        if not model or not rows:
            return 0
        i = bisect.bisect_left(positions, before)
        if model not in counts:
            counts[model] = counts_thinking(model)
        if not counts[model]:
            return every[i]
        mine = own.get(model)
        if mine is None:
            mine = own[model] = [0]
            for _pos, m, t in rows:
                mine.append(mine[-1] + (t if m == model and m != "<synthetic>" else 0))
        return carried[i] - mine[i]
    return at


# Thinking on the chain, per record: (position, model, tokens with envelopes).
_THINKING_SQL = """
SELECT ch.pos, r.model, sum(b.tokens) + count(*) * ?
FROM chain ch JOIN records r ON r.file_id = ch.file_id AND r.offset = ch.offset
JOIN blocks b ON b.file_id = r.file_id AND b.offset = r.offset
WHERE ch.file_id = ? AND r.type = 'assistant' AND b.type IN ('thinking', 'redacted_thinking')
GROUP BY ch.pos
"""


def catalog_thinking(conn: sqlite3.Connection, file_id: int) -> list[tuple[int, str | None, int]]:
    """``(chain position, model, thinking tokens)`` of a stored session's
    records that hold thinking, for :func:`unsent_thinking`."""
    return [(int(p), m, int(t or 0)) for p, m, t in conn.execute(_THINKING_SQL, (THINKING_BLOCK_TOKENS, file_id))]


def catalog_current_model(conn: sqlite3.Connection, file_id: int) -> str | None:
    """The model of the last assistant turn on a stored session's chain."""
    row = conn.execute(
        "SELECT r.model FROM chain ch JOIN records r ON r.file_id = ch.file_id AND r.offset = ch.offset"
        " WHERE ch.file_id = ? AND r.type = 'assistant' AND r.model IS NOT NULL AND r.model != '<synthetic>'"
        " ORDER BY ch.pos DESC LIMIT 1", (file_id,)).fetchone()
    return row[0] if row else None


# Records on the chain from a position on that hold an image (one of their
# blocks, or nested in a tool result): what catalog_images prices.
_IMAGES_SQL = """
SELECT ch.pos, r.offset FROM chain ch JOIN records r ON r.file_id = ch.file_id AND r.offset = ch.offset
WHERE ch.file_id = ?1 AND ch.pos >= ?2 AND r.type IN ('user', 'assistant') AND EXISTS (
    SELECT 1 FROM blocks b WHERE b.file_id = r.file_id AND b.offset = r.offset AND (b.kind = 'image' OR b.images > 0))
"""


def catalog_images(conn: sqlite3.Connection, file_id: int, start: int = 0) -> list[tuple[int, int]]:
    """``(chain position, image tokens)`` (``records.image_tokens``) of a
    stored session's chain records from position ``start`` on that hold
    images: the calibration's third term."""
    out = []
    found = conn.execute(_IMAGES_SQL, (file_id, start)).fetchall()
    raws = raw_at(conn, file_id, (o for _, o in found))
    for pos, offset in found:
        raw = raws.get(offset)
        if raw is None:
            continue
        try:
            obj = deep.loads(raw)
        except ValueError:
            continue
        if isinstance(obj, dict) and (n := image_tokens(obj)):
            out.append((int(pos), n))
    return out


def catalog_pairs(conn: sqlite3.Connection, file_id: int, last: int | None = None) -> list[tuple[int, int, int]]:
    """``(estimate, recorded, images)`` per assistant turn on a session's
    stored chain, root first (:func:`catalog_turns` without positions)."""
    return [t[1:] for t in catalog_turns(conn, file_id, last)]


def catalog_turns(conn: sqlite3.Connection, file_id: int, last: int | None = None,
                  thinking: list[tuple[int, str | None, int]] | None = None) -> list[tuple[int, int, int, int]]:
    """``(chain position, estimate, recorded, images)`` per assistant turn
    on a session's stored chain, root first; with ``last``, only the last
    ``last`` turns (read from the leaf back, so the cost does not grow with
    the session). ``images`` is counted from the leaf: minus the image
    tokens from the turn on (the whole chain's is 0, what
    :func:`session_estimate` passes). Read from what the file holds now
    (its records, its usage figures), so a file catalogued through any
    history gives what a fresh catalog of its bytes gives."""
    boundary = conn.execute(_BOUNDARY_SQL, (file_id,)).fetchone()[0]
    if thinking is None:  # the caller's own read of it, else read here
        thinking = catalog_thinking(conn, file_id)
    first_pos: dict[str, int] = {}  # message id -> its first chain position
    models: dict[str, str | None] = {}
    after: dict[str, int] = {}  # message id -> tokens from that position to the leaf
    suffix = 0
    for pos, rtype, model, mid, ts, tokens in conn.execute(_CHAIN_DESC_SQL, (file_id,)):
        suffix += tokens or 0
        if rtype != "assistant" or mid is None or not calibrates(model):
            continue
        if mid not in first_pos and last is not None and len(first_pos) >= last + 1:
            break  # the oldest kept message's first line is behind us
        if (ts or "~") < boundary:
            continue
        first_pos[mid] = pos
        after[mid] = suffix
        models[mid] = model
    total = suffix if last is None else catalog_chain_tokens(conn, file_id)
    turns = sorted(first_pos.items(), key=lambda kv: kv[1])
    if last is not None:
        turns = turns[-last:]
    images = catalog_images(conn, file_id, turns[0][1]) if turns else []
    out = []
    unsent = unsent_thinking_at(thinking)
    # The turns' usage rows in one query (one row per message: the primary key).
    found = {r[0]: r[1:] for r in conn.execute(_USAGE_SQL, (file_id, json.dumps([m for m, _ in turns])))}
    for mid, _pos in turns:
        row = found.get(mid)
        if row is None:
            continue
        inp, cr, cc, its = row
        usage = {"input_tokens": inp, "cache_read_input_tokens": cr, "cache_creation_input_tokens": cc}
        if its:
            try:
                usage["iterations"] = json.loads(its)
            except ValueError:
                pass
        rc = recorded_context(usage)
        if rc:
            out.append((_pos, int(total - after[mid] - unsent(_pos, models[mid])), rc,
                        -sum(n for p, n in images if p >= _pos)))
    return out


def catalog_system_prompt_tokens(conn: sqlite3.Connection, file_id: int) -> int:
    """Tokens of the system prompt as session_costs counts them (the latest
    snapshot of each system-prompt type in the file; 0 when none): the prior
    overhead when no turn was recorded."""
    row = conn.execute("SELECT coalesce(sum(tokens), 0) FROM system_prompt WHERE file_id = ?",
                       (file_id,)).fetchone()
    return int(row[0] or 0) if row else 0


def catalog_chain_tokens(conn: sqlite3.Connection, file_id: int) -> int:
    """chars/4 of the active chain, system-prompt snapshots left out (they
    are stored at 0 tokens and counted once, above): kept on ``sessions``."""
    row = conn.execute("SELECT chain_tokens FROM sessions WHERE file_id = ?", (file_id,)).fetchone()
    return int(row[0] or 0) if row else 0


# How many of a session's latest recorded turns the turn selection reads: enough
# to reach back past a long stretch another tool cut, bounded for refresh.
SELECT_TURNS = 400


def session_estimate(conn: sqlite3.Connection, file_id: int) -> dict:
    """The calibrated context estimate of a session in the catalog, from
    what its file holds now (:func:`catalog_turns`, :func:`calibrate`): the
    same for a file catalogued fresh as for one catalogued through undo,
    redo, another tool's edit or a restore. While the file is byte for
    byte what the newest swap in its journal wrote (``model/journal``:
    read from the session's folder, so a fresh catalog reads it too), the
    content is priced at the factor that swap logged (:func:`at_factor`,
    ``factor_logged``): the one its original's turns learned, the figure
    the pass showed.

    ``raw``: chars/4 of the whole active chain (system-prompt snapshots
    left out), less the thinking of other models than the current one
    (:func:`unsent_thinking`); ``calibrated``: :func:`predict` of it, fitted on the
    recorded turns that still describe the content (with none: the
    :func:`prior`); ``overhead``: what the figure adds to ``factor`` x
    ``raw``; ``turns_used``, ``turns``: the chain positions of the turns
    fitted on; ``rejected``: ``{pos, estimate, recorded, why}`` of the turns
    left out (at most 20; ``rejected_count`` all); ``recorded_last``: the
    context recorded for the last kept turn; ``last_turn_predicted``: the
    leave-last-out prediction of that value (fit without it), the
    accuracy check."""
    thinking = catalog_thinking(conn, file_id)
    turns = catalog_turns(conn, file_id, last=SELECT_TURNS, thinking=thinking)
    pairs = [t[1:] for t in turns]
    unsent = unsent_thinking(thinking, 1 << 62, catalog_current_model(conn, file_id))
    raw = catalog_chain_tokens(conn, file_id) - unsent
    sp = catalog_system_prompt_tokens(conn, file_id)
    f, kept, rejected = calibrate(pairs, sp)
    row = conn.execute(_FILE_SQL, (file_id,)).fetchone()
    logged = at_factor(f, journal.logged_factor(*row)) if row is not None and row[2] else f
    factor_logged = logged is not f
    f = logged
    used = kept[-MAX_TURNS:]
    loo = leave_last_out(pairs, system_prompt_tokens=sp)
    messages = conn.execute(_MESSAGES_SQL, (file_id,)).fetchone()[0]
    if not messages:
        f = Fit(method="empty")
    calibrated = context(f, raw, messages)
    return {
        "raw": raw,
        "unsent": unsent,  # thinking on the chain the request does not count, left out of raw
        "calibrated": calibrated,
        "overhead": round(calibrated - f.factor * raw) if messages else 0,
        "factor": round(f.factor, 4),
        "factor_logged": factor_logged and bool(messages),  # priced at a surgery's logged factor (at_factor)
        "method": f.method,
        "turns_used": f.turns_used,
        "turns": [turns[i][0] for i in used] if messages else [],
        "rejected": [{"pos": turns[i][0], "estimate": turns[i][1], "recorded": turns[i][2], "why": why}
                     for i, why in sorted(rejected.items())][-20:],
        "rejected_count": len(rejected),
        "floor": round(f.floor),
        "recorded_last": pairs[kept[-1]][1] if kept else None,
        "last_turn_predicted": loo["predicted"],
    }


FITTED = "system prompt & tools (fitted)"


def scale_breakdown(rows: Sequence[dict], headline: int, factor: float, unsent: int = 0) -> list[dict]:
    """The raw breakdown of a context (``analyze_by_type`` rows: category,
    tokens) restated so its rows add up to ``headline``, the calibrated
    estimate shown above it. The chain's categories are scaled by the fit's
    ``factor``; what is left of the headline is the fit's overhead, the
    system prompt and tool definitions the transcript does not hold, shown
    as its own row (``FITTED``, in place of the raw system-prompt snapshot).
    When the scaled chain alone exceeds the headline, the chain's rows are
    scaled to it proportionally and there is no fitted row. Whole tokens
    (largest remainders); each row keeps its chars/4 as ``raw_tokens``.
    ``unsent``: chain tokens the estimate leaves out (:func:`unsent_thinking`:
    ``raw`` against the chain's size), taken off the thinking row, then off
    the envelopes (a thinking block's is in it) before scaling."""
    chain = [dict(r) for r in rows if r["category"] != "system_prompt"]
    snapshot = sum(r["tokens"] or 0 for r in rows if r["category"] == "system_prompt")
    counted = [r["tokens"] or 0 for r in chain]
    for kind in ("thinking", "envelope"):
        for i, r in enumerate(chain):
            if r["category"] == kind and unsent > 0:
                take = min(unsent, counted[i])
                counted[i] -= take
                unsent -= take
    raw = sum(counted)
    headline = max(0, int(headline or 0))
    shares = [factor * c for c in counted]
    left = headline - sum(shares)
    if left < 0 or raw == 0:
        shares = [headline * c / raw if raw else 0.0 for c in counted]
        left = headline - sum(shares)
    values = shares + [max(0.0, left)]
    whole = [math.floor(v) for v in values]
    order = sorted(range(len(values)), key=lambda i: values[i] - whole[i], reverse=True)
    for i in order[:headline - sum(whole)]:
        whole[i] += 1
    out = []
    for r, t in zip(chain, whole):
        r["raw_tokens"], r["tokens"] = r["tokens"], t
        out.append(r)
    if whole[-1] > 0:
        out.append({"category": FITTED, "items": None, "tokens": whole[-1], "raw_tokens": snapshot})
    return sorted(out, key=lambda r: -r["tokens"])


def catalog_breakdown(conn: sqlite3.Connection, file_id: int, rows: Sequence[dict],
                      est: dict | None = None) -> list[dict]:
    """A stored session's ``analyze_by_type`` rows as ``analyze`` and the
    session page show them: :func:`scale_breakdown` to its calibrated
    estimate (``est``: :func:`session_estimate`), so they add up to the
    figure above them; each keeps its chars/4 as ``raw_tokens``."""
    e = est if est is not None else session_estimate(conn, file_id)
    return scale_breakdown(rows, e["calibrated"], e["factor"], max(0, e["unsent"]))


def store_session_estimate(conn: sqlite3.Connection, file_id: int) -> int:
    """Compute the calibrated estimate and keep it on ``sessions`` (refresh
    calls this for every file it changed); returns it."""
    e = session_estimate(conn, file_id)
    conn.execute("UPDATE sessions SET est_context_tokens = ?, est_method = ?, est_turns = ?, est_factor_logged = ? "
                 "WHERE file_id = ?", (e["calibrated"], e["method"], e["turns_used"],
                                       e["factor"] if e["factor_logged"] else None, file_id))
    return e["calibrated"]


def recheck_logged(conn: sqlite3.Connection, paths_with_journal: Iterable[str] = ()) -> int:
    """Store again the estimate of each session whose journal now prices it
    otherwise than its stored figure was (``sessions.est_factor_logged``):
    a journal removed, edited or written while the session file stayed as
    it was (a restore writes the file, never its journal). Looks at the
    sessions priced at a logged factor and those with a journal
    (``paths_with_journal``); one journal read each. Returns how many
    estimates changed."""
    rows = conn.execute(
        "SELECT f.id, f.path, f.size, f.sha256, s.est_factor_logged FROM files f JOIN sessions s ON s.file_id = f.id "
        "WHERE f.gone = 0 AND (s.est_factor_logged IS NOT NULL OR f.path IN (SELECT value FROM json_each(?)))",
        (json.dumps(list(paths_with_journal)),)).fetchall()
    changed = 0
    for file_id, path, size, sha, stored in rows:
        now = logged_value(journal.logged_factor(path, size, sha)) if sha else None
        if (None if now is None else round(now, 4)) != stored:
            store_session_estimate(conn, file_id)
            changed += 1
    return changed


def store_every_estimate(conn: sqlite3.Connection) -> int:
    """:func:`store_session_estimate` for every session in the catalog,
    from what it holds (no session file is read; a swap journal beside one
    is, when there is one: :func:`session_estimate`): what a migration that changes the
    estimate's rules asks of the next open (``db.rederive``). Returns the
    number of sessions."""
    ids = [r[0] for r in conn.execute("SELECT file_id FROM sessions")]
    for file_id in ids:
        store_session_estimate(conn, file_id)
    return len(ids)


__all__ = [
    "scale_breakdown", "catalog_breakdown", "FITTED", "Fit", "fit", "predict", "as_line", "context", "leave_last_out",
    "recorded_context",
    "catalog_pairs", "catalog_chain_tokens", "catalog_system_prompt_tokens",
    "session_estimate", "at_factor", "store_session_estimate", "store_every_estimate", "prior", "unsent_thinking",
    "catalog_thinking", "counts_thinking", "calibrate", "select_turns",
    "overhead_floor", "catalog_turns",
]
