"""Images in a session: list them, replace them with text transcripts.

Claude Code stores every image base64-inlined, either as a block of a user
message (a pasted screenshot) or nested in a tool_result's content (an
image a tool read). An image is known by the sha256 of its decoded bytes,
so the same picture in two places is one image with one transcript.

``list_images(t)`` walks the live records; ``replace_images(t, dir, ...)``
swaps each image whose ``<dir>/<sha256>.txt`` exists for a text block

    <image sha256="..." media_type="...">
    transcript
    </image>

and, with ``drop_missing``, removes the images without one. A content list
an image leaves empty gets a short text block instead: the API refuses a
message (or a tool_result) with an empty content list.

The API's own limits on images in one request are ``txdb.model.vision``'s.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import asdict, dataclass
from pathlib import Path

from txdb.model import tokens
from txdb.errors import SurgeryError
from txdb.surgery.ops import content_list
from txdb.model.transcript import Transcript

DROPPED = "[image dropped by txdb: no transcript]"
_SHA_RE = re.compile(r"^[0-9a-f]{64}$")
_MEDIA_RE = re.compile(r"^[A-Za-z0-9.+/-]{1,64}$")
# The largest transcript read: a text standing for one image, never a file's worth.
MAX_TRANSCRIPT_BYTES = 1 << 20


@dataclass
class ImageRef:
    pos: int | None        # chain position of the record (None: off the active chain)
    line: int              # 1-based line of the record in the file
    uuid: str | None
    where: str             # "message" (a block of the message) or "tool_result" (nested in one)
    idx: int               # index in message.content
    sub_idx: int | None    # index in the tool_result's content
    tool_use_id: str | None
    media_type: str | None
    width: int | None
    height: int | None
    tokens: int
    base64_chars: int
    sha256: str | None     # None: the data is not valid base64

    def as_dict(self) -> dict:
        return asdict(self)


def _images_of(content: list):
    """(idx, sub_idx, tool_use_id, parent list, block) of each image in a message's content."""
    for idx, b in enumerate(content):
        if not isinstance(b, dict):
            continue
        if b.get("type") == "image":
            yield idx, None, None, content, b
        elif b.get("type") == "tool_result" and isinstance(b.get("content"), list):
            for j, nb in enumerate(b["content"]):
                if isinstance(nb, dict) and nb.get("type") == "image":
                    yield idx, j, b.get("tool_use_id"), b["content"], nb


def _has_image(rec) -> bool:
    # Cheap pre-filter on the raw bytes: most records hold no image.
    return b'"image"' in rec.raw


def list_images(t: Transcript, positions: tuple[int | None, int | None] | None = None) -> list[ImageRef]:
    out = []
    for rec in t.live():
        if not t.in_range(rec, positions) or not _has_image(rec):
            continue
        content = content_list(rec.parse())
        if not content:
            continue
        for idx, sub, tid, _parent, b in _images_of(content):
            source = b.get("source") if isinstance(b.get("source"), dict) else {}
            info = tokens.image_info(source)
            out.append(ImageRef(rec.pos, t.lines[rec.line].number, rec.uuid,
                                "message" if sub is None else "tool_result", idx, sub, tid,
                                info["media_type"], info["width"], info["height"], info["tokens"],
                                info["base64_chars"], info["sha256"]))
    return out


def transcript_files(folder: str | Path) -> tuple[dict[str, Path], int]:
    """(the ``<sha256>.txt`` regular files of a transcripts folder by hash, how
    many other entries it holds). Only regular files directly in the folder
    count: a symlink (wherever it points), a folder or a device named like a
    transcript is ignored, as is every other name."""
    d = Path(folder)
    if not d.is_dir():
        raise SurgeryError(f"--dir {folder}: no such directory")
    out, ignored = {}, 0
    try:
        entries = list(os.scandir(d))
    except OSError as e:
        raise SurgeryError(f"--dir {folder}: cannot list it: {e.strerror}") from None
    for e in entries:
        name = e.name
        try:
            regular = e.is_file(follow_symlinks=False)
        except OSError:
            regular = False
        if regular and name.endswith(".txt") and _SHA_RE.match(name[:-4]):
            out[name[:-4]] = d / name
        else:
            ignored += 1
    return out, ignored


def read_transcript(path: Path, limit: int = MAX_TRANSCRIPT_BYTES) -> str:
    """A transcript's text, less one trailing newline. Opened without following
    a symlink and checked to be a regular file of at most ``limit`` bytes on
    the open file itself, so a file swapped after the folder was listed is
    refused, never read."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, flags)
    except OSError as e:
        raise SurgeryError(f"cannot read transcript {path}: {e.strerror}; nothing was changed") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise SurgeryError(f"transcript {path} is not a regular file; nothing was changed")
        if st.st_size > limit:
            raise SurgeryError(f"transcript {path} is {st.st_size:,} bytes, over the {limit:,}-byte limit of "
                               f"one transcript: shorten it; nothing was changed")
        with os.fdopen(fd, "rb", closefd=False) as fh:
            data = fh.read(limit + 1)
    except OSError as e:
        raise SurgeryError(f"cannot read transcript {path}: {e.strerror}; nothing was changed") from None
    finally:
        os.close(fd)
    if len(data) > limit:  # grew while read
        raise SurgeryError(f"transcript {path} is over the {limit:,}-byte limit of one transcript: "
                           f"shorten it; nothing was changed")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise SurgeryError(f"transcript {path} is not UTF-8 (byte {e.start}): fix or remove it; "
                           "nothing was changed") from None
    for end in ("\r\n", "\n"):
        if text.endswith(end):
            return text[: -len(end)]
    return text


def image_text(sha: str, media_type: str | None, transcript: str) -> str:
    mt = media_type if isinstance(media_type, str) and _MEDIA_RE.match(media_type) else "unknown"
    return f'<image sha256="{sha}" media_type="{mt}">\n{transcript}\n</image>'


def replace_images(t: Transcript, folder: str | Path, *, drop_missing: bool = False,
                   positions: tuple[int | None, int | None] | None = None,
                   uuids: set[str] | None = None) -> dict:
    """Replace (or with ``drop_missing`` drop) the images of the live records
    (in ``positions``; only the records of ``uuids`` when given).

    Every transcript a replacement needs is read (and must be UTF-8) before
    anything is changed, so a bad file refuses the whole pass."""
    files, ignored = transcript_files(folder)
    out = {"images": 0, "replaced": 0, "dropped": 0, "kept": 0, "invalid": 0, "records": 0,
           "transcripts": len(files), "transcripts_used": 0, "ignored": ignored, "tokens_saved": 0}
    texts: dict[str, str] = {}
    todo = []
    for rec in t.live():
        if not t.in_range(rec, positions) or (uuids is not None and rec.uuid not in uuids):
            continue
        if not _has_image(rec):
            continue
        obj = rec.parse()
        content = content_list(obj)
        if not content or not any(True for _ in _images_of(content)):
            continue
        for *_x, b in _images_of(content):
            source = b.get("source") if isinstance(b.get("source"), dict) else {}
            sha = tokens.image_info(source)["sha256"]
            if sha in files and sha not in texts:
                texts[sha] = read_transcript(files[sha])
        todo.append((rec, obj, content))
    out["transcripts_used"] = len(texts)
    for rec, obj, content in todo:
        changed = False
        shrunk = []  # content lists an image was dropped from
        # Back to front, so removing a block leaves the indices still to visit valid.
        for idx, sub, _tid, parent, b in reversed(list(_images_of(content))):
            out["images"] += 1
            source = b.get("source") if isinstance(b.get("source"), dict) else {}
            info = tokens.image_info(source)
            sha = info["sha256"]
            if sha is None:
                out["invalid"] += 1
            pos = idx if sub is None else sub
            if sha in texts:
                text = image_text(sha, info["media_type"], texts[sha])
                parent[pos] = {"type": "text", "text": text}
                out["replaced"] += 1
                out["tokens_saved"] += info["tokens"] - tokens.text_tokens(text)
                changed = True
            elif drop_missing:
                del parent[pos]
                shrunk.append(parent)
                out["dropped"] += 1
                out["tokens_saved"] += info["tokens"]
                changed = True
            else:
                out["kept"] += 1
        if not changed:
            continue
        # Never an empty content list: the API refuses it.
        for lst in shrunk:
            if not lst:
                lst.append({"type": "text", "text": DROPPED})
        t.touch(rec, obj)
        out["records"] += 1
    return out
