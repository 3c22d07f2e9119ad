"""`txdb statusline`: the one line Claude Code's ``statusLine`` command shows.

Claude Code runs the command on every update with a JSON payload on stdin
(``session_id``, ``transcript_path``, ``model``, ``context_window``...).
The line says the model, the context txdb estimates for that session
against its window, what the session and today cost, and the time left in
the current 5-hour block. It reads the catalog read-only with a handful of
indexed queries (no migration, no price sync, no ingest: it must cost
little CPU on every update); it never writes and never fails: what it
cannot know it leaves out.
"""

from __future__ import annotations

import datetime as dt
import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from txdb.model import regular

# A payload is a few kB; more is not Claude Code's.
MAX_PAYLOAD = 1 << 20
SEP = " \u00b7 "


@dataclass
class Status:
    model: str | None = None
    context_tokens: int | None = None
    window_tokens: int | None = None
    context_source: str | None = None  # "txdb" (the catalog's estimate) or "recorded" (the payload's usage)
    session_usd: float | None = None
    session_unpriced: int = 0
    today_usd: float | None = None
    block_end: str | None = None
    minutes_left: int | None = None
    note: str | None = None  # why something is missing (no catalog, session not catalogued yet)

    def line(self) -> str:
        parts = [self.model or "Claude"]
        if self.context_tokens is not None:
            ctx = f"{_short(self.context_tokens)}"
            if self.window_tokens:
                pct = 100.0 * self.context_tokens / self.window_tokens
                ctx += f"/{_short(self.window_tokens)} ({pct:.0f}%)"
            parts.append("ctx " + ctx)
        if self.session_usd is not None:
            parts.append(f"{_usd(self.session_usd)}{'+' if self.session_unpriced else ''} session")
        if self.today_usd is not None:
            parts.append(f"{_usd(self.today_usd)} today")
        if self.minutes_left is not None:
            h, m = divmod(self.minutes_left, 60)
            parts.append(f"{h}h{m:02d}m left in block" if h else f"{m}m left in block")
        if self.note:
            parts.append(self.note)
        return SEP.join(parts)

    def as_dict(self) -> dict:
        return {**self.__dict__, "line": self.line()}


def _short(n: int) -> str:
    if n >= 1_000_000:
        return f"{n / 1_000_000:.2f}".rstrip("0").rstrip(".") + "M"
    if n >= 1000:
        return f"{n / 1000:.1f}".rstrip("0").rstrip(".") + "k"
    return str(n)


def _usd(v: float) -> str:
    return f"${v:,.2f}"


def parse_payload(data: bytes) -> dict:
    """The statusLine payload, or {} for anything that is not a JSON object."""
    import json

    try:
        value = json.loads(data[:MAX_PAYLOAD].decode("utf-8", "replace"))
    except (ValueError, RecursionError):
        return {}
    return value if isinstance(value, dict) else {}


def _text(v, limit: int = 200) -> str | None:
    return v[:limit] if isinstance(v, str) and v else None


def _model_name(payload: dict) -> str | None:
    model = payload.get("model")
    if isinstance(model, dict):
        return _text(model.get("display_name"), 60) or _text(model.get("id"), 60)
    return _text(model, 60)


def _recorded_context(payload: dict) -> tuple[int | None, int | None]:
    """The payload's own context figures (newer releases send them): tokens
    of the last request and the window size."""
    cw = payload.get("context_window")
    if not isinstance(cw, dict):
        return None, None
    size = cw.get("context_window_size")
    size = size if isinstance(size, int) and 0 < size < 1 << 40 else None
    usage = cw.get("current_usage")
    if not isinstance(usage, dict):
        return None, size
    keys = ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
    vals = [usage.get(k) for k in keys]
    if not all(isinstance(v, int) and 0 <= v < 1 << 40 for v in vals if v is not None) or all(v is None for v in vals):
        return None, size
    return sum(v or 0 for v in vals), size


def _open(db_path: str | Path) -> sqlite3.Connection | None:
    if not os.path.isfile(db_path):
        return None
    try:
        regular.check_sqlite_side_files(Path(db_path).resolve())  # a FIFO there would hang the status line
    except OSError:
        return None
    conn = sqlite3.connect(Path(db_path).resolve().as_uri() + "?mode=ro", uri=True, timeout=0.2)
    conn.execute("PRAGMA query_only = 1")
    return conn


def _file_row(conn, payload: dict):
    """The catalog's row of the payload's session file: by its path, else by
    its session id (the session file, not a subagent's)."""
    path = _text(payload.get("transcript_path"), 4096)
    if path:
        row = conn.execute("SELECT id, path, size, mtime_ns FROM files WHERE path = ?", (path,)).fetchone()
        if row is None:
            real = os.path.realpath(path)
            row = conn.execute("SELECT id, path, size, mtime_ns FROM files WHERE path = ?", (real,)).fetchone()
        if row is not None:
            return row
    sid = _text(payload.get("session_id"), 100)
    if sid:
        return conn.execute("SELECT id, path, size, mtime_ns FROM files WHERE session_id = ? AND kind = 'session' "
                            "ORDER BY gone, id DESC LIMIT 1", (sid,)).fetchone()
    return None


def _changed_since(path: str, size, mtime_ns) -> bool:
    try:
        st = os.stat(path)
    except OSError:
        return False
    return st.st_size != size or st.st_mtime_ns != mtime_ns


def local_day_start(now: dt.datetime) -> str:
    """Midnight of ``now``'s local day, as the catalog writes times (ISO, UTC)."""
    local = now.astimezone()
    start = local.replace(hour=0, minute=0, second=0, microsecond=0)
    return start.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.000Z")


def status(db_path: str | Path, payload: dict, now: dt.datetime | None = None) -> Status:
    """What the line says for this payload. Raises only sqlite3.Error and
    OSError (the caller prints what the payload alone tells, then)."""
    from txdb.catalog import blocks

    now = now or dt.datetime.now(dt.timezone.utc)
    st = Status(model=_model_name(payload))
    recorded, size = _recorded_context(payload)
    conn = _open(db_path)
    if conn is None:
        st.context_tokens, st.window_tokens, st.context_source = recorded, size, "recorded"
        st.note = "no txdb catalog"
        return st
    try:
        row = _file_row(conn, payload)
        if row is None:
            st.context_tokens, st.window_tokens, st.context_source = recorded, size, "recorded"
            st.note = "not catalogued yet"
        else:
            file_id, path, fsize, mtime = row
            est = conn.execute("SELECT est_context_tokens, cost_usd, unpriced_messages FROM session_costs "
                               "WHERE file_id = ?", (file_id,)).fetchone()
            gauge = conn.execute("SELECT window_tokens, gauge_tokens FROM context_gauge WHERE file_id = ?",
                                 (file_id,)).fetchone()
            # the live CLI knows the window it runs in; the catalog's rule is for files alone
            st.window_tokens = size or (gauge[0] if gauge else None)
            if est:
                st.session_usd, st.session_unpriced = est[1], est[2] or 0
            # The catalog's estimate describes the file as it read it. A turn
            # the CLI made since (the payload's usage is not the catalog's
            # last gauge, and the file changed) is described by its own usage.
            new_turn = (recorded is not None and (gauge is None or gauge[1] != recorded)
                        and _changed_since(path, fsize, mtime))
            if est and est[0] is not None and not new_turn:
                st.context_tokens, st.context_source = est[0], "txdb"
            else:
                st.context_tokens, st.context_source = (recorded, "recorded") if recorded is not None else (
                    (est[0], "txdb") if est else (None, None))
        today = conn.execute("SELECT sum(cost_usd) FROM billed_cost WHERE timestamp >= ?",
                             (local_day_start(now),)).fetchone()
        st.today_usd = today[0] if today and today[0] is not None else 0.0
        active = blocks.active_block(conn, now)
        if active is not None:
            st.block_end = active[1]
            end = dt.datetime.strptime(active[1], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=dt.timezone.utc)
            st.minutes_left = max(0, int((end - now).total_seconds() // 60))
    finally:
        conn.close()
    return st


def fallback(payload: dict, why: str) -> Status:
    """The line when the catalog cannot be read: what the payload alone says."""
    recorded, size = _recorded_context(payload)
    return Status(model=_model_name(payload), context_tokens=recorded, window_tokens=size,
                  context_source="recorded" if recorded is not None else None, note=why)
