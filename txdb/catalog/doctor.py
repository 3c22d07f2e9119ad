"""`txdb doctor`: what Claude Code's cleanup will delete next, and whether
the catalog could give it back.

Claude Code deletes a transcript at start-up once its mtime is older than
``cleanupPeriodDays`` (default 30): it ``stat``s each file and unlinks
those with ``mtime < now - period``; a session's folder (its subagent
transcripts) goes with the session file, by that file's mtime
(:func:`sweep_mtime_ns` says which mtime decides each file). The setting
is read from the settings files, the one of highest precedence winning: managed settings, the
project's ``.claude/settings.local.json``, its ``.claude/settings.json``,
then the user's ``<config dir>/settings.json``. The value is a JavaScript
number, so ``60.0`` and ``1e2`` are the whole numbers 60 and 100.

Claude Code (2.1.332) skips the cleanup altogether, unless managed settings
set the period, when a settings file has an error and one of them cannot be
read or parsed (``settings_unknowable``), or sets ``cleanupPeriodDays``
(``settings_invalid_key_set``; a value it refuses is such an error), or
the user's sets ``desktopSessionCleanupPeriodDays``; also while the user's
settings file is an empty regular file less than 30 days old and no file
sets the period (a FIFO or a device, of st_size 0, is a file it cannot
read). :func:`retention` says so in ``skipped``. It keeps a desktop app's
transcript past the cutoff (:func:`desktop_kept`).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import sqlite3
import stat
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import orjson

from txdb.catalog import cost, units
from txdb.catalog.history import counts as history_counts
from txdb.model import deep
from txdb.model.claude_code import plugin_info
from txdb.catalog.ingest.discover import Found, FoundSidecar, Linked, Unreadable, discover
from txdb.model.paths import NOT_TEXT_PATH, OWN_MTIME_DIRS, SESSION_SUFFIX, SUBAGENT_PREFIX, TOOL_RESULTS, is_text_path, parent_session, shown_path
from txdb.model.regular import TooLarge, open_regular, read_regular

DEFAULT_DAYS = 30
DAY_S = 86400
SETTINGS_LIMIT = 2 * 1024 * 1024  # Claude Code reads no settings file larger than this
JS_DATE_MS = 8.64e15  # the range of a JavaScript Date: a cutoff beyond it and Claude Code deletes nothing
TOO_DEEP = "nested too deeply for txdb doctor to read: what it sets is not known here"
KEYS = ("cleanupPeriodDays", "desktopSessionCleanupPeriodDays")  # a set one and an error: no cleanup
MANAGED_SETTINGS = (Path("/Library/Application Support/ClaudeCode/managed-settings.json")
                    if os.uname().sysname == "Darwin" else Path("/etc/claude-code/managed-settings.json"))
PLUGIN_KEY = "txdb@txdb"  # plugin@marketplace, as `txdb plugin` installs it


@dataclass
class SettingsValue:
    path: str
    scope: str  # managed, local, project, user
    value: object  # what the file holds, if a JSON scalar (absent files are not listed)
    used: bool = False
    problem: str | None = None
    key: str = "cleanupPeriodDays"  # or desktopSessionCleanupPeriodDays (listed when refused)


@dataclass
class Retention:
    days: int
    source: str  # the file it comes from, or "default"
    scope: str  # managed, local, project, user, default
    cutoff: str | None  # files with an older mtime go at Claude Code's next start (ISO 8601 UTC);
    # None: before year 1 (or the start of JavaScript's dates), so no transcript is that old
    found: list[SettingsValue] = field(default_factory=list)
    skipped: str | None = None  # why Claude Code skips the cleanup altogether (None: it runs)
    # Whether Claude Code keeps a desktop app's transcript and an empty session file with no folder
    # (desktop_kept): unless managed settings set cleanupPeriodDays.
    desktop_exempt: bool = True
    desktop_days: int = 0  # desktopSessionCleanupPeriodDays (managed, else the user's): older, not kept; 0: none


@dataclass
class DueSession:
    session_id: str
    project: str | None
    path: str  # the session file, when these go with it; else the first of them
    mtime: str | None  # the mtime they go by (sweep_mtime_ns), ISO 8601 UTC (None: out of the calendar's range)
    deleted_in_days: float  # <= 0: at Claude Code's next start
    files: int  # the files that go at that time: the session file and the transcripts of its folder, or one
    # by one; a tool-results file older than its session file (or without one), by its own mtime
    whole: bool  # every one catalogued to its last byte: `txdb restore` gives it back
    not_whole: list[str] = field(default_factory=list)
    # of not_whole, the files whose last line is unfinished (no newline yet): {"path", "bytes"} after the
    # last newline; refresh reads that line once it ends, not before
    unfinished: list[dict] = field(default_factory=list)
    lone: bool = False  # files of a session whose session file is not on disk
    tool_results: int = 0  # how many of the files are tool-results files


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
    not_catalogued: list[str]  # with those that cannot be (cannot_catalogue)
    stale: list[str]
    unreadable: list[dict]
    hook: Hook
    prices: dict
    history: dict | None  # None: no catalog (history.jsonl is read by refresh)
    cannot_catalogue: list[str] = field(default_factory=list)  # names that are not UTF-8: refresh never reads them
    catalog: bool = True  # False: no catalog yet, so nothing is held
    # catalogued as they are but for a last line with no newline yet ({"path", "bytes" after the last
    # newline}): not in stale, as refresh reads that line only once it ends
    unfinished: list[dict] = field(default_factory=list)
    # symbolic links to folders under a root ({"path", "root", "target", "catalogued",
    # "catalogued_at_target"}): never followed, so the sessions under them are neither counted nor
    # checked here, and refresh catalogues none under the link
    linked: list[dict] = field(default_factory=list)

    def as_dict(self) -> dict:
        from dataclasses import asdict

        return asdict(self)


def _iso(t: float) -> str | None:
    """``t`` (s since the epoch) in ISO 8601 UTC; None outside years 1 to 9999."""
    try:
        return datetime.fromtimestamp(t, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (ValueError, OverflowError, OSError):
        return None


def _cutoff(now: float, days: int) -> float | None:
    """``now`` minus ``days`` days; None when JavaScript's Date cannot hold
    it (Claude Code then deletes nothing) or the calendar has no such date."""
    try:
        t = now - float(days) * DAY_S
    except OverflowError:
        return None
    return t if abs(t * 1000) <= JS_DATE_MS and _iso(t) is not None else None


def sweep_mtime_ns(path: str | Path, folder: str | Path) -> int | None:
    """The mtime (ns) by which Claude Code's start-up cleanup judges the file
    at ``path`` in the project folder ``folder``; None when that cleanup
    never deletes it (not there, a link, txdb's own files of a session
    whose file is not there). A ``.jsonl`` in the project folder itself (a
    session file, an older release's ``agent-*.jsonl``) goes by its own
    mtime. A file in a session's folder ``<id>/`` goes with ``<id>.jsonl``
    while that file is there (the folder is deleted with it, whatever the
    mtimes inside), a ``tool-results`` file also by its own mtime if older;
    with no session file there, those in ``tool-results/`` and
    ``subagents/`` (and the like: ``OWN_MTIME_DIRS``) each by its own."""
    p, top = Path(path), Path(folder)
    try:
        rel = p.relative_to(top).parts
        st = os.lstat(p)
    except (ValueError, OSError):
        return None
    regular = stat.S_ISREG(st.st_mode)
    if len(rel) == 1:
        return st.st_mtime_ns if regular and rel[0].endswith(SESSION_SUFFIX) else None
    try:
        head = os.lstat(top / (rel[0] + SESSION_SUFFIX))
    except OSError:
        head = None
    own = None
    if rel[1] == TOOL_RESULTS and len(rel) in (3, 4) and regular:  # its files and those one folder down
        own = st.st_mtime_ns
    elif rel[1] in OWN_MTIME_DIRS and len(rel) > 2 and not stat.S_ISDIR(st.st_mode):
        own = st.st_mtime_ns
    if head is not None and stat.S_ISREG(head.st_mode):
        return head.st_mtime_ns if own is None or rel[1] != TOOL_RESULTS else min(own, head.st_mtime_ns)
    return own


def swept(mtime_ns: int, days: int, now: float) -> bool:
    """Whether Claude Code's next start (at ``now``) deletes a file judged by
    ``mtime_ns`` (:func:`sweep_mtime_ns`): that mtime, in whole
    milliseconds, is strictly before ``now`` minus ``days`` days."""
    return mtime_ns // 1_000_000 < _cutoff_ms(now, days)


def _cutoff_ms(now: float, days: int) -> int:
    """``new Date(Date.now() - days * 86400000)`` in ms, as Claude Code dates its cutoffs."""
    return math.floor(now * 1000) - days * DAY_S * 1000


def _days_left(mtime_ns: int, days: int, now: float) -> float:
    """Days from ``now`` until a file judged by ``mtime_ns`` passes the cutoff (<= 0: past it)."""
    return (mtime_ns / 1e9 + days * DAY_S - now) / DAY_S


def settings_files(config_dir: Path, cwd: Path, managed: Path | None = None) -> list[tuple[str, Path]]:
    """(scope, path) of each settings file Claude Code reads, highest precedence first."""
    return [("managed", managed or MANAGED_SETTINGS), ("local", cwd / ".claude" / "settings.local.json"),
            ("project", cwd / ".claude" / "settings.json"), ("user", config_dir / "settings.json")]


def _reject(name: str):
    raise ValueError(name)  # NaN and Infinity: Python's json reads them, JavaScript's JSON.parse does not


def _load(path: Path) -> tuple[dict | None, str | None]:
    """The settings object at ``path`` (None when absent; an empty file is
    none, as Claude Code reads it), or what is wrong with it. Parsed as
    JavaScript's JSON.parse would: 1e400 is read (as infinity), and so is an
    integer literal of over 4,300 digits (Python's int refuses it); a file
    nested too deeply for Python is named, never raised."""
    try:
        data = read_regular(path, limit=SETTINGS_LIMIT)
    except FileNotFoundError:
        return None, None
    except TooLarge:
        return None, f"over {SETTINGS_LIMIT:,} bytes: Claude Code does not read it"
    except OSError as e:
        return None, e.strerror or type(e).__name__
    if not data.strip():
        return {}, None
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError:  # out of orjson's range (1e400, 1025 levels deep), or not JSON
        try:
            obj = json.loads(data, parse_constant=_reject, parse_int=deep._number)
        except RecursionError:
            return None, TOO_DEEP
        except ValueError:
            return None, "not valid JSON"
    return (obj, None) if isinstance(obj, dict) else (None, "not a JSON object")


def _whole_days(v: object, least: int) -> int | None:
    """``v`` as the whole number of days Claude Code's schema takes (a JSON
    number that is an integer: 60.0 is 60), at least ``least``; else None."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    if isinstance(v, float) and not (math.isfinite(v) and v.is_integer()):
        return None
    return int(v) if v >= least else None


def _scalar(v: object) -> object:
    """``v`` if a JSON scalar, else None (a list or object is never shown: it may nest 1000 levels deep)."""
    return v if v is None or isinstance(v, (bool, int, float, str)) else None


def _kind(v: object) -> str:
    return "a list" if isinstance(v, list) else "an object" if isinstance(v, dict) else ""


def retention(config_dir: Path, cwd: Path, managed: Path | None = None, now: float | None = None) -> Retention:
    """The cleanupPeriodDays in effect for a Claude Code started in ``cwd``, and where it comes from."""
    now = time.time() if now is None else now
    found: list[SettingsValue] = []
    chosen: SettingsValue | None = None
    days = DEFAULT_DAYS
    unreadable: list[SettingsValue] = []  # files Claude Code cannot read or parse
    refused: list[SettingsValue] = []  # values it refuses (errors of its schema)
    sets: dict[str, list[str]] = {k: [] for k in KEYS}  # the files, other than managed settings, that set each
    managed_sets = False
    desktop: int | None = None
    for scope, path in settings_files(config_dir, cwd, managed):
        obj, problem = _load(path)
        if problem:
            sv = SettingsValue(str(path), scope, None, problem=problem)
            found.append(sv)
            if problem != TOO_DEEP:  # Claude Code reads that one (it nests as deep as it likes)
                unreadable.append(sv)
            continue
        if obj is None:
            continue
        for key in KEYS:
            if key in obj and scope != "managed":
                sets[key].append(str(path))
        managed_sets = managed_sets or (scope == "managed" and "cleanupPeriodDays" in obj)
        if desktop is None and scope in ("managed", "user"):
            desktop = _whole_days(obj.get("desktopSessionCleanupPeriodDays"), 0)
        if "desktopSessionCleanupPeriodDays" in obj and _whole_days(obj["desktopSessionCleanupPeriodDays"], 0) is None:
            v = obj["desktopSessionCleanupPeriodDays"]
            refused.append(SettingsValue(str(path), scope, _scalar(v), key="desktopSessionCleanupPeriodDays",
                                         problem=(f"{_kind(v) + ', ' if _kind(v) else ''}not a whole number "
                                                  "of days of at least 0: Claude Code refuses it")))
        if "cleanupPeriodDays" not in obj:
            continue
        v = obj["cleanupPeriodDays"]
        sv = SettingsValue(str(path), scope, _scalar(v))
        n = _whole_days(v, 1)
        if n is None:
            sv.problem = (f"{_kind(v) + ', ' if _kind(v) else ''}not a whole number of days of at least 1: "
                          "Claude Code refuses it")
            refused.append(sv)
        elif chosen is None:
            chosen, sv.used, days = sv, True, n
        found.append(sv)
    found += [r for r in refused if r not in found]
    cut = _cutoff(now, days)
    ret = Retention(days=days, source=chosen.path if chosen else "default",
                    scope=chosen.scope if chosen else "default", cutoff=None if cut is None else _iso(cut), found=found,
                    desktop_exempt=not managed_sets, desktop_days=desktop or 0)
    if chosen is not None and chosen.scope == "managed":
        return ret  # Claude Code runs the cleanup whatever the other files hold
    user = config_dir / "settings.json"
    try:
        st = os.stat(user)
    except OSError:
        st = None
    # Claude Code stats the file (through a link) and waits while it is empty and new; a FIFO or a device
    # reports size 0 too, but Claude Code cannot read settings from it at all (not a regular file): that is
    # the reason named for it, below.
    if (chosen is None and st is not None and stat.S_ISREG(st.st_mode) and st.st_size == 0
            and now - DEFAULT_DAYS * DAY_S < st.st_mtime <= now):
        ret.skipped = (f"{user} is empty and was written within the last {DEFAULT_DAYS} days "
                       "(Claude Code waits until it is older or holds settings)")
    elif unreadable:
        ret.skipped = f"{unreadable[0].path} cannot be read or parsed ({unreadable[0].problem})"
    elif refused and sets["cleanupPeriodDays"]:
        setter = sets["cleanupPeriodDays"][0]
        ret.skipped = (f"{refused[0].path} holds a {refused[0].key} Claude Code refuses"
                       + ("" if setter == refused[0].path and refused[0].key == "cleanupPeriodDays"
                          else f", and {setter} sets cleanupPeriodDays"))
    elif refused and str(user) in sets["desktopSessionCleanupPeriodDays"]:
        ret.skipped = (f"{refused[0].path} holds a {refused[0].key} Claude Code refuses, and {user} "
                       "sets desktopSessionCleanupPeriodDays")
    return ret


DESKTOP_ENTRYPOINTS = frozenset({"claude-desktop", "claude-desktop-3p", "local-agent", "local_agent"})
RELEASED_SUFFIX = ".desktop-released.json"  # the desktop app's word on its transcript: {"reason": ...}
RELEASED_LIMIT = 4096  # Claude Code reads no larger one
HEAD = 65536  # the bytes Claude Code reads at each end of a transcript to find its entrypoint


def _js_object(line: str) -> dict | None:
    """``line`` parsed as JSON.parse would, if a JSON object."""
    try:
        obj = json.loads(line, parse_constant=_reject, parse_int=deep._number)
    except (ValueError, RecursionError):
        return None
    return obj if isinstance(obj, dict) else None


def _first(text: str, key: str, last: bool = False) -> str | None:
    """The string ``key`` of the first line (``last``: the last) holding
    ``"key":`` that is a JSON object with one."""
    lines = text.split("\n")
    for line in reversed(lines) if last else lines:
        if f'"{key}":' in line and isinstance(v := (_js_object(line) or {}).get(key), str):
            return v
    return None


def _released(path: str, cutoff_ms: int) -> str:
    """What the desktop app's ``<id>.desktop-released.json`` at ``path`` says:
    'release-now' (reason "delete", or "archive" written before the cutoff),
    'grace' ("archive" since), or 'none' (absent, larger than 4,096 bytes, not
    an object with a string reason). Never through a link: Claude Code opens
    it with ``O_NOFOLLOW`` (``readFileFdGated``), so a link there is none."""
    try:
        with open_regular(path, follow=False) as fh:
            st = os.fstat(fh.fileno())
            data = fh.read(RELEASED_LIMIT + 1) if st.st_size <= RELEASED_LIMIT else b""
    except OSError:
        return "none"
    reason = (_js_object(data.decode("utf-8", "replace")) or {}).get("reason")
    if reason == "delete":
        return "release-now"
    if reason == "archive":
        return "release-now" if st.st_mtime_ns // 1_000_000 < cutoff_ms else "grace"
    return "none"


def desktop_kept(path: str, st: os.stat_result, ret: Retention, now: float) -> bool:
    """Whether Claude Code's cleanup keeps the transcript at ``path`` (a
    ``.jsonl`` in a project folder, of ``lstat`` ``st``) past its cutoff, as
    a desktop app's (2.1.332): not when managed settings set
    cleanupPeriodDays, nor when it is older than a
    desktopSessionCleanupPeriodDays set, nor when its
    ``<id>.desktop-released.json`` releases it (reason "delete", or
    "archive" written before the cutoff); kept when that file says
    "archive" since, when it is empty and has no folder ``<id>/``, or when
    a line of its first or last 64 KiB names a desktop entrypoint
    (``claude-desktop``, ``claude-desktop-3p``, ``local-agent``); an older
    release's ``agent-*.jsonl`` so kept goes all the same when the file of
    the session its lines name releases that session."""
    if not ret.desktop_exempt or _cutoff(now, ret.days) is None:
        return False
    cutoff = _cutoff_ms(now, ret.days)
    if (ret.desktop_days and _cutoff(now, ret.desktop_days) is not None
            and st.st_mtime_ns // 1_000_000 < _cutoff_ms(now, ret.desktop_days)):
        return False
    stem = path[: -len(SESSION_SUFFIX)]
    own = stem + RELEASED_SUFFIX
    said = _released(own, cutoff)
    if said != "none":
        return said == "grace"
    if st.st_size == 0:
        if not os.path.isdir(stem):
            return True
    try:
        with open_regular(path) as fh:
            head_b = fh.read(HEAD)
            tail_b = head_b
            if st.st_size > HEAD:
                fh.seek(st.st_size - HEAD)
                tail_b = fh.read(HEAD)
    except OSError:
        return False
    head = head_b.decode("utf-8", "replace")
    tail = tail_b.decode("utf-8", "replace")
    if st.st_size > HEAD:
        tail = tail.partition("\n")[2]  # from the first whole line
    if not ((e := _first(head, "entrypoint")) is not None and e in DESKTOP_ENTRYPOINTS
            or (e := _first(tail, "entrypoint", last=True)) is not None and e in DESKTOP_ENTRYPOINTS):
        return False
    if Path(path).name.startswith(SUBAGENT_PREFIX):
        sid = _first(head, "sessionId")
        sid = _first(tail, "sessionId", last=True) if sid is None else sid
        if sid is not None and re.fullmatch(r"[0-9A-Za-z_-]{1,64}", sid):
            other = str(Path(path).parent / (sid + RELEASED_SUFFIX))
            if other != own and _released(other, cutoff) == "release-now":
                return False
    return True


def sweep_kept(path: str | Path, folder: str | Path, ret: Retention, now: float,
               cache: dict[str, bool] | None = None) -> bool:
    """Whether Claude Code's cleanup keeps the file at ``path`` in the
    project folder ``folder`` past its cutoff as a desktop app's
    (:func:`desktop_kept`): a transcript beside the sessions by its own
    lines, a file in a session's folder ``<id>/`` when ``<id>.jsonl`` is
    there (a regular file) and is kept (the folder goes with it); one of a
    session whose file is not there, never. ``cache``: by the path judged."""
    p, top = Path(path), Path(folder)
    try:
        rel = p.relative_to(top).parts
    except ValueError:
        return False
    judged = str(p if len(rel) == 1 else top / (rel[0] + SESSION_SUFFIX))
    if cache is not None and judged in cache:
        return cache[judged]
    try:
        st = os.lstat(judged)
        kept = stat.S_ISREG(st.st_mode) and desktop_kept(judged, st, ret, now)
    except OSError:
        kept = False
    if cache is not None:
        cache[judged] = kept
    return kept


def _sha256(path: str) -> str | None:
    h = hashlib.sha256()
    try:
        with open_regular(path) as fh:
            while chunk := fh.read(1 << 20):
                h.update(chunk)
    except OSError:
        return None
    return h.hexdigest()


def _whole(conn: sqlite3.Connection | None, f: Found, hash_if_touched: bool = False) -> bool:
    """The catalog holds every byte of the file as it is on disk (restore is
    byte-identical); with ``hash_if_touched``, a file of the catalogued size
    whose mtime moved is hashed against the catalogued sha256. ``conn``
    None: no catalog, nothing held."""
    if conn is None or not is_text_path(f.path):
        return False  # a name that is not UTF-8: never catalogued
    row = conn.execute("SELECT size, mtime_ns, cursor, sha256, inode FROM files WHERE path = ?", (f.path,)).fetchone()
    if row is None or not row[0] == f.stat.st_size == row[2] or row[3] is None or row[4] is None:
        return False
    return row[1] == f.stat.st_mtime_ns or (hash_if_touched and _sha256(f.path) == row[3])


UNFINISHED_READ = 1 << 20  # bytes read at a time looking for a newline after a file's catalogued end


def _unfinished(conn: sqlite3.Connection | None, f: Found, hash_if_touched: bool = False) -> int | None:
    """The bytes after the last newline of a file the catalog holds as it is
    on disk but for its last line, which has no newline yet (a writer died,
    or is still writing it): refresh reads up to the last newline, so it
    reads that line once it ends, and not before; None for any other file
    (``hash_if_touched`` as :func:`_whole`)."""
    if conn is None or not is_text_path(f.path):
        return None
    row = conn.execute("SELECT size, mtime_ns, cursor, sha256, inode FROM files WHERE path = ?", (f.path,)).fetchone()
    if (row is None or row[0] != f.stat.st_size or row[2] is None or not 0 <= row[2] < row[0] or row[3] is None
            or row[4] is None):
        return None
    if row[1] != f.stat.st_mtime_ns and not (hash_if_touched and _sha256(f.path) == row[3]):
        return None
    try:
        with open_regular(f.path) as fh:
            fh.seek(row[2])
            while chunk := fh.read(UNFINISHED_READ):
                if b"\n" in chunk:
                    return None  # a whole line past the cursor: refresh has more to read
    except OSError:
        return None
    return row[0] - row[2]


def _held_under(conn: sqlite3.Connection | None, folder: str) -> int:
    """How many live transcripts the catalog holds under ``folder``."""
    if conn is None or not is_text_path(folder):
        return 0
    prefix = folder + os.sep
    return conn.execute("SELECT count(*) FROM files WHERE gone = 0 AND substr(path, 1, ?) = ?",
                        (len(prefix), prefix)).fetchone()[0]


def _sidecar_whole(conn: sqlite3.Connection | None, s: FoundSidecar) -> bool:
    """As :func:`_whole` (a moved mtime hashed), for a file of a session's
    folder: its ``sidecars`` row at the size on disk, its content in ``blobs``."""
    if conn is None or not is_text_path(s.path):
        return False
    row = conn.execute("SELECT sc.size, sc.mtime_ns, sc.sha256 FROM sidecars sc JOIN blobs b ON b.sha256 = sc.sha256 "
                       "WHERE sc.path = ?", (s.path,)).fetchone()
    if row is None or row[0] != s.stat.st_size:
        return False
    return row[1] == s.stat.st_mtime_ns or _sha256(s.path) == row[2]


def _tool_results(side: list[FoundSidecar]) -> list[tuple[str, str, FoundSidecar]]:
    """(session file path, session id, file) of each tool-results file that
    Claude Code's cleanup deletes by its own mtime (:func:`sweep_mtime_ns`):
    older than its session file, or with none there. One no older goes with
    its session file."""
    out = []
    for s in side:
        folder = _project_folder(s)
        if folder is None:
            continue
        rel = Path(s.path).relative_to(folder).parts
        if len(rel) < 3 or rel[1] != TOOL_RESULTS:
            continue
        t = sweep_mtime_ns(s.path, folder)
        home = folder / (rel[0] + SESSION_SUFFIX)
        try:
            head = os.lstat(home)
        except OSError:
            head = None
        if t is not None and (head is None or not stat.S_ISREG(head.st_mode) or t < head.st_mtime_ns):
            out.append((str(home), rel[0], s))
    return out


def _folder_files(side: list[FoundSidecar], by_own: set[str]) -> dict[str, list[FoundSidecar]]:
    """The files of each session's folder (tool results, persisted files,
    subagents' .meta.json) by the path of its session file, but those in
    ``by_own`` (tool-results files the cleanup judges by their own mtime):
    the cleanup deletes the folder with its session file."""
    out: dict[str, list[FoundSidecar]] = {}
    for s in side:
        folder = _project_folder(s)
        if folder is None or s.path in by_own:
            continue
        rel = Path(s.path).relative_to(folder).parts
        if len(rel) > 1:
            out.setdefault(str(folder / (rel[0] + SESSION_SUFFIX)), []).append(s)
    return out


def _project_folder(f: Found | FoundSidecar) -> Path | None:
    """The project folder of a transcript found under its root (the root's
    first level); None for a file in the root itself, which Claude Code's
    cleanup never deletes (it walks only the folders of the projects root)."""
    try:
        rel = Path(f.path).relative_to(f.root).parts
    except ValueError:
        return None
    return Path(f.root) / rel[0] if len(rel) > 1 else None


def _groups(conn: sqlite3.Connection | None, found: list[Found]) -> tuple[dict[str, list[Found]],
                                                                   dict[str, tuple[str, list[Found]]]]:
    """The subagent transcripts by the path of the session file they belong
    with: those whose session file is on disk, and the lone ones (with the
    parent session's id, else the transcript's own name, as their group's
    session id; a transcript of no known parent is a group of its own). A transcript in a
    ``<sid>/subagents`` folder belongs with ``<sid>.jsonl`` beside that
    folder; an older release's ``agent-*.jsonl`` beside the sessions, with
    the session its lines name (``sessions.parent_session_id``) in the same
    folder; one the catalog lacks has no known parent."""
    sessions = {f.path for f in found if f.kind == "session"}
    with_session: dict[str, list[Found]] = {}
    lone: dict[str, tuple[str, list[Found]]] = {}
    for f in found:
        if f.kind != "subagent":
            continue
        if f.parent_session_id is not None:
            pid: str | None = f.parent_session_id
            home = str(parent_session(f.path))
        else:
            row = conn.execute("SELECT s.parent_session_id FROM sessions s JOIN files fi ON fi.id = s.file_id "
                               "WHERE fi.path = ?", (f.path,)).fetchone() \
                if conn is not None and is_text_path(f.path) else None
            # only a session id names a file beside it (txdb.catalog.units: text from a file builds no path)
            named = units.session_path_of(f.path, row[0] if row else None)
            pid = Path(named).stem if named else None
            home = named or f.path
        if home in sessions:
            with_session.setdefault(home, []).append(f)
        else:
            lone.setdefault(home, (pid or Path(f.path).stem, []))[1].append(f)
    return with_session, lone


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
        if any(info.hook_command in t for t in deep.strings(obj.get("hooks"))):
            how.append(f"a hook runs {info.hook_command} in {path}")
    return Hook(installed=bool(how) and info.hook_found is not None, how=how, command_on_path=info.hook_found)


def doctor(conn: sqlite3.Connection | None, config_dir: Path, roots: list[Path], cwd: Path, within_days: float = 7,
           managed: Path | None = None, now: float | None = None) -> DoctorReport:
    """The retention in effect, the sessions Claude Code deletes within
    ``within_days`` (and whether the catalog holds each whole), the session
    files the catalog lacks or has out of date, the hook, the price data.
    ``conn`` None: there is no catalog yet (nothing is held; prices from
    the library; no history, which refresh reads).

    Example:

        doctor(conn, Path.home() / ".claude", [Path.home() / ".claude/projects"], Path.cwd())
    """
    now = time.time() if now is None else now
    ret = retention(config_dir, cwd, managed, now)
    unreadable: list[Unreadable] = []
    not_text: list[Found] = []  # never catalogued (a name that is not UTF-8), deleted by the cleanup all the same
    side: list[FoundSidecar] = []
    links: list[Linked] = []
    found = discover(roots, unreadable, sidecars=side, not_text=not_text, linked=links)
    linked = [{**link.as_dict(), "catalogued": _held_under(conn, link.path),
               "catalogued_at_target": _held_under(conn, link.target)} for link in links]
    known = {p for (p,) in conn.execute("SELECT path FROM files")} if conn is not None else set()
    stale, unfinished = [], []
    for one in found:
        if one.path in known and not _whole(conn, one):
            n = _unfinished(conn, one)
            if n is None:
                stale.append(one.path)
            else:
                unfinished.append({"path": one.path, "bytes": n})
    not_catalogued = [f.path for f in found if f.path not in known] + [shown_path(f.path) for f in not_text]
    found += not_text
    with_session, lone = _groups(conn, found)
    due = []
    # Nothing is due when Claude Code skips the cleanup, or its cutoff is older than any file can be.
    deletes = ret.skipped is None and ret.cutoff is not None
    # The files of a session that Claude Code's cleanup deletes at one time (sweep_mtime_ns): the session
    # file with its folder; each older release's agent-*.jsonl beside it, and each subagent transcript of
    # a session whose file is not there, by its own mtime; a tool-results file older than its session file
    # (or without one) by its own.
    groups: dict[tuple[str, int], tuple[str, bool, list[Found | FoundSidecar]]] = {}
    on_disk = {f.path for f in found if f.kind == "session"}
    by_own = _tool_results(side)
    folder_files = _folder_files(side, {s.path for _h, _s, s in by_own})
    members: list[tuple[str, str, bool, list[Found | FoundSidecar]]] = [
        (f.path, Path(f.path).stem, False, [f, *with_session.get(f.path, []), *folder_files.get(f.path, [])])
        for f in found if f.kind == "session"]
    members += [(home, sid, True, [*files, *folder_files.get(home, [])]) for home, (sid, files) in lone.items()]
    members += [(home, sid, home not in on_disk, [s]) for home, sid, s in by_own]
    kept: dict[str, bool] = {}  # a transcript beside the sessions that Claude Code keeps (sweep_kept)
    for home, sid, is_lone, files in members if deletes else []:
        for g in files:
            folder = _project_folder(g)
            t = None if folder is None else sweep_mtime_ns(g.path, folder)
            if folder is None or t is None or _days_left(t, ret.days, now) > within_days:
                continue
            if sweep_kept(g.path, folder, ret, now, kept):
                continue
            groups.setdefault((home, t), (sid, is_lone, []))[2].append(g)
    for (_home, t), (sid, is_lone, group) in groups.items():
        left = _days_left(t, ret.days, now)
        f = group[0]  # the session file when it goes with these, else the first of them
        missing = [shown_path(g.path) for g in group if not (_sidecar_whole(conn, g) if isinstance(g, FoundSidecar)
                                                              else _whole(conn, g, hash_if_touched=True))]
        cut = [{"path": shown_path(g.path), "bytes": n} for g in group if isinstance(g, Found)
               and shown_path(g.path) in missing and (n := _unfinished(conn, g, hash_if_touched=True)) is not None]
        extra: list[str] = []
        if isinstance(f, Found) and f.kind == "session":  # its folder goes with it, names refresh cannot read too
            inside = shown_path(str(Path(f.path).with_suffix(""))) + os.sep
            extra = [u.path for u in unreadable
                     if u.path.startswith(inside) and u.error == NOT_TEXT_PATH and u.path not in missing]
            missing += extra
        due.append(DueSession(session_id=shown_path(sid), project=None if f.project is None else shown_path(f.project),
                              path=shown_path(f.path), mtime=_iso(t / 1e9),
                              deleted_in_days=0.0 if swept(t, ret.days, now) else max(round(left, 2), 0.01),
                              files=len(group) + len(extra), whole=not missing, not_whole=missing, unfinished=cut,
                              lone=is_lone,
                              tool_results=sum(isinstance(g, FoundSidecar) and g.rel.startswith(TOOL_RESULTS + "/")
                                               for g in group)))
    due.sort(key=lambda d: d.deleted_in_days)
    prices = (cost.price_source(conn) if conn is not None
              else {"library": cost.LIBRARY, "version": cost.installed_version(), "data_date": None})
    if prices["data_date"] is None:  # no catalog, or one that priced nothing yet: the library's own date
        prices["data_date"] = cost.data_date()
    history = None
    if conn is not None:
        prompts, sessions, without = history_counts(conn)
        before = conn.execute("SELECT count(*) FROM history_sessions WHERE status = 'gone before txdb'").fetchone()[0]
        history = {"prompts": prompts, "sessions": sessions, "without_session": without, "gone_before_txdb": before}
    return DoctorReport(
        retention=ret, due=due, within_days=within_days, session_files=len(found),
        not_catalogued=not_catalogued, stale=stale, unfinished=unfinished, linked=linked, cannot_catalogue=[shown_path(f.path) for f in not_text], unreadable=[u.as_dict() for u in unreadable],
        hook=hook_status(config_dir, cwd, managed), prices=prices,
        history=history, catalog=conn is not None,
    )
