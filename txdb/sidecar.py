"""The sidecar contract: where persisted content lives, how it is written,
and the markers that point at it.

Layout, in the session's own folder ``<project-dir>/<sessionId>/`` (for a
subagent transcript ``<sessionId>/subagents/agent-X.jsonl``, the same
``<sessionId>/`` folder)::

    tool-results/<tool_use_id>.txt           shared with Claude Code's own
    persisted/thinking/<msg_uuid>.txt
    persisted/text/<msg_uuid>_<idx>.txt
    persisted/image/<sha256>.txt             image transcripts (migrate-persisted)
    persisted/message/<msg_uuid>.json       persist-message: the message's content;
                                             compact-range: each whole record

Rules (each one here, nowhere else):

- ``safe_name``: a name built from file content (a tool_use id, a uuid, a
  sessionId) is reduced to ``[A-Za-z0-9._-]``, no leading dot, at most
  ``MAX_NAME`` characters; any change adds a short hash of the original so
  two different ids never share a name. ``session_dir`` and ``plan`` also
  check the real path stays inside the session's folder (a symlinked
  ``persisted`` folder is refused).
- ``plan``: decide the path without writing (dry runs plan too): an existing
  file with the same bytes is reused; one with different bytes is never
  touched, the new content gets ``<name>.<sha256[:12]><ext>``. A file this
  pass has already planned counts as existing (``Writes.plan``), so three
  results sharing one tool id get three files.
- ``write``: temp file, fsync, ``link`` to the final name (which fails
  rather than replace anything), folder fsync; in batches, each batch's
  files fsynced together (``durability.fsync_all``) before any is
  linked. Runs before the pending copy
  that refers to the file is written (``engine.run_surgery`` calls the op's
  ``write_files``), so a pending copy never points at a file not on disk;
  an abandoned pending copy leaves only files nothing live refers to.
- Markers: ``<persisted-{kind}>`` with ``Saved to: PATH (N chars)``,
  ``Summary:``, ``Preview:``; a compacted range's ``<persisted-range from=
  to= count=>`` names its folder, ``Saved to: FOLDER (N files)``, and its
  record lists the files (``RANGE_FIELD``); tool results use Claude Code's
  native ``<persisted-output>`` shape (``Output too large (N). Full output saved
  to: PATH``). PATH is absolute, as Claude Code writes its own: the model's
  Read resolves a relative path against the CLI's working directory, not the
  project folder, so only an absolute path can be read back. A moved
  projects tree is handled by ``resolve`` (the ``<sessionId>/...`` tail under
  the session's current folder) and ``migrate-persisted`` re-points markers.
- ``missing_referenced``: the markers of a file whose sidecar is not on disk
  (apply refuses a pending copy that adds one); ``unreadable_referenced``:
  those the model cannot read at the path written (verify warns).
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path

from .durability import clean_stale_temps, fsync_all, fsync_dir, temp_file
from .errors import SurgeryError
from .paths import SESSION_SUFFIX, TOOL_RESULTS, session_folder, session_stem
from .regular import open_regular

MAX_NAME = 120
PREVIEW_CHARS = 1024
TOOL_PREVIEW_CHARS = 2000
NO_SUMMARY = "[no summary provided]"
MARKER_PREFIX = "<persisted-"
NATIVE_TOOL_TAG = "persisted-output"
FILE_MODE = 0o600

_SAFE = re.compile(r"[^A-Za-z0-9._-]")
_SAVED = re.compile(r"(?:^|\n)(?:Saved to|Output too large \([^)\n]*\)\. Full output saved to): (.+?)"
                    r"(?: \(\d[\d,]* (?:chars|files?)\))?(?:\n|$)")
RANGE_TAG = "persisted-range"
RANGE_FIELD = "persistedRange"  # a range survivor's record: {"files": [names in the marker's folder]}
_RANGE_HEAD = re.compile(r'<persisted-range from="(\d+)" to="(\d+)" count="(\d+)">')


def safe_name(value: str) -> str:
    """A file name for ``value`` that cannot leave its folder (see module doc)."""
    if not isinstance(value, str):
        value = str(value)
    name = _SAFE.sub("_", value).lstrip(".")
    if name != value or len(name) > MAX_NAME or not name:
        digest = hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:12]
        name = f"{name[:MAX_NAME - 13]}.{digest}" if name else digest
    return name


def session_dir(session_file: str | Path, session_id: str | None = None) -> Path:
    """``<project-dir>/<sessionId>/`` of a session (or subagent) file. The id is
    the file's name (``claude -r`` resumes a file by it), never a sessionId
    read from inside the file, which a copied or renamed file may not match;
    ``session_id`` only when there is no such name."""
    p = Path(session_file)
    sid = session_stem(p) if SESSION_SUFFIX in p.name else session_id or p.name
    return session_folder(p, safe_name(sid))


def relative_path(kind: str, key: str, idx: int | None = None) -> str:
    """Path of a sidecar under the session folder, from content-given keys."""
    if kind == "tool":
        return f"{TOOL_RESULTS}/{safe_name(key)}.txt"
    if kind == "thinking":
        return f"persisted/thinking/{safe_name(key)}.txt"
    if kind == "text":
        return f"persisted/text/{safe_name(key)}_{int(idx or 0)}.txt"
    if kind == "image":
        return f"persisted/image/{safe_name(key)}.txt"
    if kind == "message":
        return f"persisted/message/{safe_name(key)}.json"
    raise ValueError(f"unknown sidecar kind {kind!r}")


def _inside(path: Path, root: Path) -> bool:
    try:
        Path(os.path.realpath(path)).relative_to(os.path.realpath(root))
        return True
    except ValueError:
        return False


@dataclass
class Sidecar:
    path: Path          # absolute, inside the session folder
    data: bytes
    reused: bool        # a file with these bytes is already there

    @property
    def chars(self) -> int:
        return len(self.data.decode("utf-8", "replace"))


def plan(sdir: Path, rel: str, data: bytes, planned: dict[Path, bytes] | None = None,
         checked: dict[Path, set[str] | None] | None = None) -> Sidecar:
    """Where ``data`` goes (no write): the name, or an existing file with the same bytes,
    or a new content-addressed name beside a different existing file. ``planned``:
    the files this pass has already planned (path -> bytes), which count as
    existing files; ``checked``: the folders this pass has already checked
    for links (each is checked once; ``write`` checks again when it makes them),
    with the names each held then: a name not among them is free without
    opening it (a file that appears later is caught by ``write``'s link,
    which never replaces one)."""
    path = sdir / rel
    folder = path.parent
    if checked is None or folder not in checked:
        _no_links(sdir, folder)
        if checked is not None:
            checked[folder] = _names(folder)
    names = checked.get(folder) if checked is not None else None
    for n in range(2):  # the name, then (only when it is taken) the content-addressed one beside it
        candidate = path if n == 0 else path.with_name(
            f"{path.stem}.{hashlib.sha256(data).hexdigest()[:12]}{path.suffix}")
        held = planned.get(candidate) if planned else None
        if held is not None:
            if held == data:
                return Sidecar(candidate, data, False)
            continue
        if names is not None and candidate.name not in names:
            return Sidecar(candidate, data, False)
        try:
            with open_regular(candidate) as fh:
                same = fh.read(len(data) + 1) == data
        except FileNotFoundError:
            return Sidecar(candidate, data, False)
        except OSError as e:
            raise SurgeryError(f"cannot read the existing sidecar {candidate}: {e.strerror}") from None
        if same:
            return Sidecar(candidate, data, True)
    raise SurgeryError(f"{path.name}: two different files already hold other content for this block")


def _names(folder: Path) -> set[str] | None:
    """The names in ``folder`` (none when it does not exist yet); None when it
    cannot be listed (each name is then looked up on its own)."""
    try:
        return set(os.listdir(folder))
    except FileNotFoundError:
        return set()
    except OSError:
        return None


def _no_links(sdir: Path, folder: Path) -> None:
    """Refuse when the session folder or a folder below it on the way to
    ``folder`` is a symlink (it could lead out of the session's folder)."""
    p = folder
    while True:
        if p.is_symlink():
            raise SurgeryError(f"refusing to write a sidecar outside {sdir}: {p} is a symlink")
        if p == sdir or p == p.parent:
            return
        p = p.parent


def _mkdirs(sdir: Path, folder: Path) -> None:
    """Create ``folder`` (inside ``sdir``) and fsync each new folder's parent."""
    missing = []
    f = folder
    while not f.exists():
        missing.append(f)
        f = f.parent
    _no_links(sdir, folder)
    for d in reversed(missing):
        try:
            os.mkdir(d, 0o700)
        except FileExistsError:
            if not d.is_dir() or d.is_symlink():
                raise
            continue  # another txdb made it just now
        fsync_dir(d.parent)
    _no_links(sdir, folder)


WRITE_BATCH = 256  # files open at once while a batch is fsynced together


def write(sdir: Path, sidecars: list[Sidecar], owner: tuple[int, int] | None = None,
          what: str = "a sidecar") -> list[Path]:
    """Write the planned sidecars (each whole or not at all); returns the files it created.

    Each folder is made (and checked for links) once, and the temp files an
    earlier killed pass left in it are removed. Then in batches: every file
    of a batch goes to its temp file, the batch is fsynced together
    (``fsync_all``), then each temp file is linked to its name; each folder
    is fsynced once at the end. A name only ever points at bytes already on
    disk, and every name is durable before this returns. On any error the
    files this call created are removed again and ``SurgeryError`` is
    raised: nothing refers to them yet."""
    created: list[Path] = []
    todo = [sc for sc in sidecars if not sc.reused]
    try:
        for folder in sorted({sc.path.parent for sc in todo}):
            _mkdirs(sdir, folder)
            clean_stale_temps(folder)  # what a killed pass left here (the session lock is held)
        for at in range(0, len(todo), WRITE_BATCH):
            _write_batch(todo[at:at + WRITE_BATCH], owner, created)
        # Each folder once, after every link in it: the names are durable
        # before the pending copy that refers to them is written.
        for folder in sorted({p.parent for p in created}):
            fsync_dir(folder)
    except OSError as e:
        remove(created)
        raise SurgeryError(f"cannot write {what} in {sdir}: {e.strerror or e}; nothing was changed") from None
    except BaseException:
        remove(created)
        raise
    return created


def _write_batch(batch: list[Sidecar], owner: tuple[int, int] | None, created: list[Path]) -> None:
    temps: list[tuple[Sidecar, int, str]] = []
    try:
        for sc in batch:
            fd, tmp = temp_file(sc.path)
            temps.append((sc, fd, tmp))
            if owner is not None:
                os.fchown(fd, *owner)
            os.fchmod(fd, FILE_MODE)
            view = memoryview(sc.data)
            while view:
                view = view[os.write(fd, view):]
        fsync_all([fd for _sc, fd, _tmp in temps])
        for sc, _fd, tmp in temps:
            try:
                os.link(tmp, sc.path)  # never replaces an existing file
            except FileExistsError:
                with open_regular(sc.path) as fh:
                    if fh.read() != sc.data:
                        raise SurgeryError(f"{sc.path} appeared with other content while writing; "
                                           f"run the command again") from None
                continue
            created.append(sc.path)
    finally:
        for _sc, fd, tmp in temps:
            os.close(fd)
            try:
                os.unlink(tmp)
            except OSError:
                pass


def remove(paths: list[Path]) -> None:
    """Take back files ``write`` created (only ever before anything refers to them)."""
    for p in paths:
        try:
            os.unlink(p)
        except OSError:
            pass


class Writes:
    """What an operation that moves content to sidecars keeps between planning
    and writing (the file hooks of ``surgery.ops.Op``, for an op class that
    also derives from it): ``engine.run_surgery`` calls ``write_files`` after the gate
    and before the pending copy that names them, and ``remove_files`` when
    writing that copy failed."""

    sdir: Path | None = None

    def __init__(self, shared: "Writes | None" = None):
        self.sidecars: list[Sidecar] = []
        self.created: list[Path] = []
        self._planned: dict[Path, bytes] = {}
        self._checked: dict[Path, set[str] | None] = {}
        # An op run inside another (rescue's steps): the names the pass has
        # planned are the outer op's, so two steps never plan one name twice.
        self.shared = shared

    def plan_files(self, sdir: Path) -> None:
        """Start a pass: nothing planned yet, files go under ``sdir``."""
        self.sdir = sdir
        self.sidecars = []
        self._planned = self.shared._planned if self.shared is not None else {}
        self._checked = {}

    def plan(self, rel: str, data: bytes) -> Sidecar:
        """``plan`` for this pass: a name it already gave other bytes is taken too."""
        return plan(self.sdir, rel, data, self._planned, self._checked)

    def add(self, side: Sidecar) -> None:
        """Keep a planned file for ``write_files`` (once per path: the same bytes
        planned again, as for a repeated tool result, are one file)."""
        if side.path not in self._planned:
            self._planned[side.path] = side.data
            self.sidecars.append(side)

    def write_files(self, owner: tuple[int, int] | None = None) -> int:
        self.created = write(self.sdir, self.sidecars, owner) if self.sidecars else []
        return len(self.created)

    def remove_files(self) -> None:
        remove(self.created)


# -- markers -------------------------------------------------------------------

def preview(text: str, limit: int = PREVIEW_CHARS) -> str:
    if len(text) <= limit:
        return text
    cut = text[:limit]
    nl = cut.rfind("\n")
    return (cut[:nl] if nl > limit // 2 else cut) + "\n..."


def human_size(n: int) -> str:
    """Claude Code's size wording ("55.3KB")."""
    if n < 1024:
        return f"{n} bytes"
    for unit in ("KB", "MB", "GB"):
        n /= 1024
        if n < 1024 or unit == "GB":
            s = f"{n:.1f}".rstrip("0").rstrip(".")
            return f"{s}{unit}"
    return f"{n}"


def marker(kind: str, path: Path, chars: int, summary: str | None, body_preview: str) -> str:
    """The ``<persisted-{kind}>`` marker (kind: thinking, text, message, image)."""
    return (f"<persisted-{kind}>\nSaved to: {path} ({chars:,} chars)\nSummary: {summary or NO_SUMMARY}\n\n"
            f"Preview:\n{body_preview}\n</persisted-{kind}>")


def range_marker(frm: int, to: int, folder: Path, summary: str | None, preview_lines: list[str],
                 count: int) -> str:
    """The ``<persisted-range>`` marker of positions ``frm``..``to`` (``count``
    records, one file each in ``folder``); ``preview_lines``: the first
    messages, one line each."""
    more = count - len(preview_lines)
    lines = preview_lines + ([f"[... {more} more]"] if more > 0 else [])
    return (f'<{RANGE_TAG} from="{frm}" to="{to}" count="{count}">\nSaved to: {folder} ({count} '
            f'{"file" if count == 1 else "files"})\nSummary: {summary or NO_SUMMARY}\n\nPreview:\n'
            + "\n".join(lines) + f"\n</{RANGE_TAG}>")


_SUMMARY_LINE = re.compile(r"\nSummary: [^\n]*\n")


def with_summary(marker_text: str, summary: str) -> str:
    """A marker with its (first) ``Summary:`` line replaced."""
    return _SUMMARY_LINE.sub(lambda _m: f"\nSummary: {summary}\n", marker_text, count=1)


def range_head(text) -> tuple[int, int, int] | None:
    """(from, to, count) of a ``<persisted-range>`` marker text, else None."""
    if not isinstance(text, str):
        return None
    m = _RANGE_HEAD.match(text.lstrip())
    return (int(m.group(1)), int(m.group(2)), int(m.group(3))) if m else None


def tool_marker(path: Path, size: int, text: str, summary: str | None) -> str:
    """Claude Code's own persisted tool-result shape (plus a Summary line when one is given)."""
    head = f"<{NATIVE_TOOL_TAG}>\nOutput too large ({human_size(size)}). Full output saved to: {path}\n"
    if summary:
        head += f"Summary: {summary}\n"
    return head + f"\nPreview (first 2KB):\n{preview(text, TOOL_PREVIEW_CHARS)}\n</{NATIVE_TOOL_TAG}>"


def is_marker(text) -> bool:
    """Already persisted (ours or Claude Code's own): skipped by every persist command."""
    return isinstance(text, str) and text.lstrip().startswith(MARKER_PREFIX)


def marker_paths(text: str) -> list[str]:
    """The sidecar paths a marker text names."""
    if MARKER_PREFIX not in text:
        return []
    return [m.group(1).strip() for m in _SAVED.finditer(text)]


def resolve(path_text: str, session_file: str | Path, session_id: str | None) -> Path | None:
    """Where the sidecar a marker names is now (a range marker's folder too):
    its path, or (a moved projects tree) the part from the session folder's
    name on, under the session's current folder. None when neither exists."""
    p = Path(path_text).expanduser()
    if p.is_absolute() and _present(p):
        return p
    sdir = session_dir(session_file, session_id)
    parts = p.parts
    if sdir.name in parts:
        tail = parts[len(parts) - 1 - parts[::-1].index(sdir.name) + 1:]
        cand = sdir.joinpath(*tail) if tail else None
        if cand is not None and _present(cand) and _inside(cand, sdir):
            return cand
    if not p.is_absolute():
        cand = Path(session_file).parent / p
        if _present(cand):
            return cand
    return None


def _present(p: Path) -> bool:
    """A sidecar file, or the folder a range marker names."""
    return p.is_file() or (p.name == "message" and p.is_dir())


def _strings(value):
    """Every string in a parsed JSON value, at any depth (a line may nest
    thousands deep: no recursion)."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            yield v
        elif isinstance(v, dict):
            stack.extend(reversed(list(v.values())))
        elif isinstance(v, list):
            stack.extend(reversed(v))


def referenced(data: bytes) -> set[str]:
    """Every sidecar path named by a marker in ``data`` (a session file's bytes):
    in message content, or anywhere else in a record (an older survivor kept
    its marker as a system record's content). Only lines holding a marker are parsed."""
    from .ingest.lines import parse_line
    out: set[str] = set()
    needle = MARKER_PREFIX.encode()
    start = 0
    while True:
        at = data.find(needle, start)
        if at < 0:
            return out
        ls = data.rfind(b"\n", 0, at) + 1
        le = data.find(b"\n", at)
        le = len(data) if le < 0 else le
        for _s, _l, obj in parse_line(data[ls:le]).objects:
            for s in _strings(obj):
                paths = marker_paths(s)
                out.update(paths)
                if range_head(s) is not None and paths:
                    out.update(range_files(obj, paths[0]))
        start = le + 1


def range_files(obj, folder: str) -> list[str]:
    """The saved files a range survivor lists (``persistedRange.files``) as paths
    in the marker's folder; a name that is not a plain file name is ignored."""
    rng = obj.get(RANGE_FIELD) if isinstance(obj, dict) else None
    names = rng.get("files") if isinstance(rng, dict) else None
    if not isinstance(names, list):
        return []
    return [str(Path(folder) / n) for n in names if isinstance(n, str) and n and safe_name(n) == n]


def missing_referenced(data: bytes, session_file: str | Path, session_id: str | None) -> set[str]:
    return {p for p in referenced(data) if resolve(p, session_file, session_id) is None}


def unreadable_referenced(data: bytes, session_file: str | Path,
                          session_id: str | None) -> tuple[list[str], list[str]]:
    """The marker paths of ``data`` that the model cannot read back as
    written: (found under the session's current folder, so `migrate-persisted`
    re-points them; found nowhere)."""
    moved, missing = [], []
    for p in sorted(referenced(data)):
        as_written = Path(p).expanduser()
        if as_written.is_absolute() and _present(as_written):
            continue
        (missing if resolve(p, session_file, session_id) is None else moved).append(p)
    return moved, missing
