"""``migrate-persisted``: older persisted layouts to the current one.

``<image sha256=...>`` transcript blocks become
``persisted/image/<sha256>.txt`` + a marker, sidecars in
``<sessionId>/.tool-results/`` move to ``tool-results/``, and markers whose
path no longer exists but whose file is in the session's current folder (a
moved projects tree) are re-pointed. A ``PersistOp`` (its sidecar planning
and the engine's ``write_files``) with its own walk.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from txdb.model import sidecar as sc
from txdb.model.paths import LEGACY_TOOL_RESULTS, TOOL_RESULTS
from txdb.model.regular import open_regular
from txdb.model.transcript import Transcript
from txdb.surgery.ops import content_list
from txdb.surgery.persist import PersistOp, Selection

_IMAGE_RE = re.compile(r'^<image sha256="([0-9a-fA-F]{16,128})"(?: media_type="([^"]*)")?>\n(.*)\n</image>\s*$', re.S)


class MigrateOp(PersistOp):
    """``migrate-persisted``: older layouts to the current one (see module doc)."""

    def __init__(self):
        super().__init__(Selection())

    def __call__(self, t: Transcript, original: Transcript) -> dict:
        self.plan_files(sc.session_dir(t.path))
        out = {"base": t.base, "images": 0, "tool_results_moved": 0,
               "markers_repointed": 0, "files": []}
        old_dir = self.sdir / LEGACY_TOOL_RESULTS
        moved: dict[str, Path] = {}
        if old_dir.is_dir() and not old_dir.is_symlink():
            for e in sorted(os.scandir(old_dir), key=lambda e: e.name):
                if not e.is_file(follow_symlinks=False):
                    continue
                with open_regular(e.path, follow=False) as fh:
                    data = fh.read()
                side = self.plan(f"{TOOL_RESULTS}/{sc.safe_name(e.name)}", data)
                self.add(side)
                moved[e.path] = side.path
                out["tool_results_moved"] += 1
        for rec in list(t.live()):
            obj = rec.parse()
            content = content_list(obj)
            if not content:
                continue
            changed = False
            for idx, b in enumerate(content):
                if not isinstance(b, dict):
                    continue
                if b.get("type") == "text" and isinstance(b.get("text"), str):
                    m = _IMAGE_RE.match(b["text"])
                    if m:
                        body = m.group(3)
                        side = self.plan(sc.relative_path("image", m.group(1).lower()), body.encode())
                        self.add(side)
                        content[idx] = {"type": "text", "text": sc.marker(
                            "image", side.path, len(body), None, sc.preview(body))}
                        out["images"] += 1
                        changed = True
                        continue
                for key in ("text", "content"):
                    v = b.get(key)
                    if isinstance(v, str) and sc.MARKER_PREFIX in v:
                        nv = self._repoint(v, t, moved, out)
                        if nv != v:
                            b[key] = nv
                            changed = True
                    elif key == "content" and isinstance(v, list):
                        for inner in v:
                            if isinstance(inner, dict) and isinstance(inner.get("text"), str):
                                nv = self._repoint(inner["text"], t, moved, out)
                                if nv != inner["text"]:
                                    inner["text"] = nv
                                    changed = True
            if changed:
                t.touch(rec, obj)
        out["files"] = [str(s.path) for s in self.sidecars]
        return out

    def _repoint(self, text: str, t: Transcript, moved: dict[str, Path], out: dict) -> str:
        for p in sc.marker_paths(text):
            new = None
            if f"/{LEGACY_TOOL_RESULTS}/" in p:
                src = self.sdir / LEGACY_TOOL_RESULTS / Path(p).name
                new = moved.get(str(src))
            elif not Path(p).expanduser().is_file():
                new = sc.resolve(p, t.path, t.session_id)
            if new is not None and str(new) != p:
                text = text.replace(p, str(new))
                out["markers_repointed"] += 1
        return text
