"""`txdb doctor`: what Claude Code's cleanup will delete next, and whether
the catalog could give it back.

Claude Code deletes a transcript at start-up once its mtime is older than
``cleanupPeriodDays`` (default 30): it ``stat``s each file and unlinks
those with ``mtime < now - period``. The setting is read from the settings
files, the one of highest precedence winning: managed settings, the
project's ``.claude/settings.local.json``, its ``.claude/settings.json``,
then the user's ``<config dir>/settings.json``. A value that is not a
positive integer is refused by Claude Code (and reported here, not used).
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import orjson

from txdb.catalog import cost
from txdb.model.claude_code import plugin_info
from txdb.catalog.ingest.discover import Found, Unreadable, discover
from txdb.model.regular import open_regular, read_regular

DEFAULT_DAYS = 30
DAY_S = 86400
SETTINGS_LIMIT = 1024 * 1024  # a settings file larger than this is not read
MANAGED_SETTINGS = (Path("/Library/Application Support/ClaudeCode/managed-settings.json")
                    if os.uname().sysname == "Darwin" else Path("/etc/claude-code/managed-settings.json"))
PLUGIN_KEY = "txdb@txdb"  # plugin@marketplace, as `txdb plugin` installs it


@dataclass
class SettingsValue:
    path: str
    scope: str  # managed, local, project, user
    value: object  # what the file holds (absent files are not listed)
    used: bool = False
    problem: str | None = None


@dataclass
class Retention:
    days: int
    source: str  # the file it comes from, or "default"
    scope: str  # managed, local, project, user, default
    cutoff: str  # files with an older mtime go at Claude Code's next start (ISO 8601 UTC)
    found: list[SettingsValue] = field(default_factory=list)


@dataclass
class DueSession:
    session_id: str
    project: str | None
    path: str
    mtime: str  # ISO 8601 UTC
    deleted_in_days: float  # <= 0: at Claude Code's next start
    files: int  # the session file and its subagent transcripts
    whole: bool  # every one catalogued to its last byte: `txdb restore` gives it back
    not_whole: list[str] = field(default_factory=list)


@dataclass
class Hook:
    installed: bool
    how: list[str]  # where it was found enabled: plugin settings, a hook naming txdb-hook
    command_on_path: str | None


@dataclass
class DoctorReport:
    retention: Retention
    due: list[DueSession]
    within_days: float
    session_files: int
    not_catalogued: list[str]
    stale: list[str]
    unreadable: list[dict]
    hook: Hook
    prices: dict
    history: dict

    def as_dict(self) -> dict:
        from dataclasses import asdict

        return asdict(self)


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def settings_files(config_dir: Path, cwd: Path, managed: Path | None = None) -> list[tuple[str, Path]]:
    """(scope, path) of each settings file Claude Code reads, highest precedence first."""
    return [("managed", managed or MANAGED_SETTINGS), ("local", cwd / ".claude" / "settings.local.json"),
            ("project", cwd / ".claude" / "settings.json"), ("user", config_dir / "settings.json")]


def _load(path: Path) -> tuple[dict | None, str | None]:
    """The settings object at ``path`` (None when absent), or what is wrong with it."""
    try:
        data = read_regular(path, limit=SETTINGS_LIMIT)
    except FileNotFoundError:
        return None, None
    except OSError as e:
        return None, e.strerror or type(e).__name__
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None, "not valid JSON"
    return (obj, None) if isinstance(obj, dict) else (None, "not a JSON object")


def retention(config_dir: Path, cwd: Path, managed: Path | None = None, now: float | None = None) -> Retention:
    """The cleanupPeriodDays in effect for a Claude Code started in ``cwd``, and where it comes from."""
    now = time.time() if now is None else now
    found: list[SettingsValue] = []
    chosen: SettingsValue | None = None
    for scope, path in settings_files(config_dir, cwd, managed):
        obj, problem = _load(path)
        if problem:
            found.append(SettingsValue(str(path), scope, None, problem=problem))
            continue
        if obj is None or "cleanupPeriodDays" not in obj:
            continue
        v = obj["cleanupPeriodDays"]
        sv = SettingsValue(str(path), scope, v)
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            sv.problem = "not a whole number of days of at least 1: Claude Code refuses it"
        elif chosen is None:
            chosen, sv.used = sv, True
        found.append(sv)
    days = int(chosen.value) if chosen else DEFAULT_DAYS  # type: ignore[call-overload]
    return Retention(days=days, source=chosen.path if chosen else "default", scope=chosen.scope if chosen else "default",
                     cutoff=_iso(now - days * DAY_S), found=found)


def _sha256(path: str) -> str | None:
    h = hashlib.sha256()
    try:
        with open_regular(path) as fh:
            while chunk := fh.read(1 << 20):
                h.update(chunk)
    except OSError:
        return None
    return h.hexdigest()


def _whole(conn: sqlite3.Connection, f: Found, hash_if_touched: bool = False) -> bool:
    """The catalog holds every byte of the file as it is on disk (restore is
    byte-identical); with ``hash_if_touched``, a file of the catalogued size
    whose mtime moved is hashed against the catalogued sha256."""
    row = conn.execute("SELECT size, mtime_ns, cursor, sha256, inode FROM files WHERE path = ?", (f.path,)).fetchone()
    if row is None or not row[0] == f.stat.st_size == row[2] or row[3] is None or row[4] is None:
        return False
    return row[1] == f.stat.st_mtime_ns or (hash_if_touched and _sha256(f.path) == row[3])


def hook_status(config_dir: Path, cwd: Path, managed: Path | None = None) -> Hook:
    """Whether Claude Code runs txdb's hook: the plugin enabled in a settings file, or a hook naming txdb-hook."""
    info = plugin_info()
    how = []
    for scope, path in settings_files(config_dir, cwd, managed):
        obj, _ = _load(path)
        if not obj:
            continue
        enabled = obj.get("enabledPlugins")
        if isinstance(enabled, dict) and enabled.get(PLUGIN_KEY) is True:
            how.append(f"plugin {PLUGIN_KEY} enabled in {path}")
        if info.hook_command.encode() in orjson.dumps(obj.get("hooks")):
            how.append(f"a hook runs {info.hook_command} in {path}")
    return Hook(installed=bool(how) and info.hook_found is not None, how=how, command_on_path=info.hook_found)


def doctor(conn: sqlite3.Connection, config_dir: Path, roots: list[Path], cwd: Path, within_days: float = 7,
           managed: Path | None = None, now: float | None = None) -> DoctorReport:
    """The retention in effect, the sessions Claude Code deletes within
    ``within_days`` (and whether the catalog holds each whole), the session
    files the catalog lacks or has out of date, the hook, the price data.

    Example:

        doctor(conn, Path.home() / ".claude", [Path.home() / ".claude/projects"], Path.cwd())
    """
    now = time.time() if now is None else now
    ret = retention(config_dir, cwd, managed, now)
    unreadable: list[Unreadable] = []
    found = discover(roots, unreadable)
    subagents: dict[tuple[str | None, str | None], list[Found]] = {}
    for f in found:
        if f.kind == "subagent":
            subagents.setdefault((f.project, f.parent_session_id), []).append(f)
    known = {p for (p,) in conn.execute("SELECT path FROM files")}
    not_catalogued = [f.path for f in found if f.path not in known]
    stale = [f.path for f in found if f.path in known and not _whole(conn, f)]
    due = []
    for f in found:
        if f.kind != "session":
            continue
        left = (f.stat.st_mtime + ret.days * DAY_S - now) / DAY_S
        if left > within_days:
            continue
        stem = Path(f.path).stem
        group = [f] + subagents.get((f.project, stem), [])
        missing = [g.path for g in group if not _whole(conn, g, hash_if_touched=True)]
        due.append(DueSession(session_id=stem, project=f.project, path=f.path, mtime=_iso(f.stat.st_mtime),
                              deleted_in_days=round(max(left, 0.0), 2), files=len(group), whole=not missing,
                              not_whole=missing))
    due.sort(key=lambda d: d.deleted_in_days)
    prices = cost.price_source(conn)
    if prices["data_date"] is None:  # a catalog that priced nothing yet: the library's own date
        prices["data_date"] = cost.data_date()
    hist = conn.execute("SELECT count(*), count(DISTINCT session_id) FROM history").fetchone()
    before = conn.execute("SELECT count(*) FROM history_sessions WHERE status = 'gone before txdb'").fetchone()[0]
    return DoctorReport(
        retention=ret, due=due, within_days=within_days, session_files=len(found),
        not_catalogued=not_catalogued, stale=stale, unreadable=[u.as_dict() for u in unreadable],
        hook=hook_status(config_dir, cwd, managed), prices=prices,
        history={"prompts": hist[0], "sessions": hist[1], "gone_before_txdb": before},
    )
