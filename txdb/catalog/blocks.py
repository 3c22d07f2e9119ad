"""The latest 5-hour block, found without computing every block.

The view ``usage_blocks`` states the rule over the whole history: a block
starts at its first message's hour (UTC, floored) and holds the messages up
to 5 hours after that start; the first message after it starts the next.
Walking that from the first message costs a lookup per block ever used. A
message more than 5 hours after the one before it always starts a block
(the block before ended at most 5 hours after its own first message), so
the walk may begin at the latest such gap and finds the same last block
(held to the view by tests/test_statusline.py). Date arithmetic is
SQLite's, as in the view.
"""

from __future__ import annotations

import datetime as dt
import sqlite3

GAP_DAYS = 5 / 24
_BATCH = 2000


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
        start, end = conn.execute("SELECT strftime('%Y-%m-%dT%H:00:00.000Z', ?), "
                                  "strftime('%Y-%m-%dT%H:00:00.000Z', ?, '+5 hours')", (first, first)).fetchone()
        (nxt,) = conn.execute("SELECT min(timestamp) FROM usage WHERE timestamp > ?", (end,)).fetchone()
        if nxt is None:
            return start, end
        first = nxt


def active_block(conn: sqlite3.Connection, now: dt.datetime | None = None) -> tuple[str, str] | None:
    """The latest block while its 5 hours have not ended at ``now``, else None."""
    block = last_block(conn)
    if block is None:
        return None
    now = (now or dt.datetime.now(dt.timezone.utc)).astimezone(dt.timezone.utc)
    return block if block[1] > now.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z" else None
