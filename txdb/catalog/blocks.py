"""The 5-hour block rule, stated once in Python: a block starts at its
first message's hour (UTC, floored) and holds the messages up to 5 hours
after that start (``bounds``); the first message after it starts the next
(``starts_block``); a block is active while its 5 hours have not ended and
its last message is less than 5 hours old (``is_active``). ``cost.blocks``
(`txdb cost --by block`) and the status line (``last_block``,
``active_block``) use these; the view ``usage_blocks`` states the same rule
in SQL (held to it by tests/test_cost_reports.py).

The latest block is found without computing every block. Walking from the
first message costs a lookup per block ever used. A message more than 5
hours after the one before it always starts a block (the block before ended
at most 5 hours after its own first message), so the walk may begin at the
latest such gap and finds the same last block (held to the view by
tests/test_statusline.py).
"""

from __future__ import annotations

import datetime as dt
import sqlite3

BLOCK_HOURS = 5
SPAN = dt.timedelta(hours=BLOCK_HOURS)
GAP_DAYS = BLOCK_HOURS / 24
_BATCH = 2000


def parse_ts(ts: str) -> dt.datetime:
    """A record's timestamp as an aware UTC datetime, milliseconds kept (ValueError when it is none)."""
    at = dt.datetime.fromisoformat(ts.replace("Z", "+00:00") if ts.endswith("Z") else ts)
    return (at if at.tzinfo else at.replace(tzinfo=dt.timezone.utc)).astimezone(dt.timezone.utc)


def iso(at: dt.datetime) -> str:
    """The block's bounds as the view writes them (``2026-05-08T01:00:00.000Z``)."""
    return at.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.000Z")


def bounds(first: dt.datetime) -> tuple[dt.datetime, dt.datetime]:
    """(start, end) of the block whose first message is at ``first``."""
    start = first.astimezone(dt.timezone.utc).replace(minute=0, second=0, microsecond=0)
    return start, start + SPAN


def starts_block(at: dt.datetime, end: dt.datetime | None) -> bool:
    """A message at ``at`` starts a new block after the one ending at ``end`` (None: no block yet)."""
    return end is None or at > end


def is_active(end: dt.datetime, last: dt.datetime, now: dt.datetime) -> bool:
    """The block's 5 hours have not ended at ``now`` and its last message is less than 5 hours old."""
    return now < end and now - last < SPAN


def _anchor(conn: sqlite3.Connection) -> str | None:
    """The latest message that follows a gap of more than 5 hours (else the first message)."""
    cur = conn.execute("SELECT timestamp, julianday(timestamp) FROM usage WHERE timestamp IS NOT NULL "
                       "ORDER BY timestamp DESC")
    later = None  # (timestamp, julianday) of the message after the one read
    while True:
        rows = cur.fetchmany(_BATCH)
        if not rows:
            return later[0] if later else None
        for ts, jd in rows:
            if later is not None and jd is not None and later[1] is not None and later[1] - jd > GAP_DAYS:
                return later[0]
            later = (ts, jd)


def last_block(conn: sqlite3.Connection) -> tuple[str, str] | None:
    """(block_start, block_end) of the latest block, as ``usage_blocks`` has them."""
    first = _anchor(conn)
    if first is None:
        return None
    while True:
        start, end = (iso(t) for t in bounds(parse_ts(first)))
        (nxt,) = conn.execute("SELECT min(timestamp) FROM usage WHERE timestamp > ?", (end,)).fetchone()
        if nxt is None:
            return start, end
        first = nxt


def active_block(conn: sqlite3.Connection, now: dt.datetime | None = None) -> tuple[str, str] | None:
    """The latest block while it is active at ``now`` (``is_active``), else None."""
    block = last_block(conn)
    if block is None:
        return None
    now = (now or dt.datetime.now(dt.timezone.utc)).astimezone(dt.timezone.utc)
    (last,) = conn.execute("SELECT max(timestamp) FROM usage WHERE timestamp <= ?", (block[1],)).fetchone()
    return block if is_active(parse_ts(block[1]), parse_ts(last), now) else None
