"""Make the real CLI write small, realistic sessions.

Each scenario takes a started :class:`Sandbox`, scripts the fake API, runs
the CLI one or more times (multi-turn through ``--resume``) and returns the
session file the CLI wrote. Run as a module to regenerate the committed
fixtures in ``tests/data/cli``::

    python -m tests.realcli.scenarios tests/data/cli     # from the repo root
"""

from __future__ import annotations

import shutil
import struct
import sys
import zlib
from pathlib import Path

from .driver import Sandbox, munge
from .fake_api import agent, bash, edit, read, text, thinking, write


def png_bytes(width: int = 4, height: int = 4, rgb: tuple[int, int, int] = (200, 30, 30)) -> bytes:
    """A tiny valid RGB PNG, made with zlib and struct only."""
    raw = b"".join(b"\x00" + bytes(rgb) * width for _ in range(height))

    def chunk(tag: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + tag + data
                + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF))

    return (b"\x89PNG\r\n\x1a\n"
            + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw))
            + chunk(b"IEND", b""))


def seed_workspace(cwd: Path) -> dict[str, Path]:
    notes = cwd / "notes.txt"
    notes.write_text("alpha line\nbeta line\ngamma line\n")
    png = cwd / "dot.png"
    png.write_bytes(png_bytes())
    return {"notes": notes, "png": png}


def _first(sb: Sandbox, prompt: str) -> str:
    r = sb.run(prompt).check()
    assert r.session_id, r.stdout
    return r.session_id


def tools_session(sb: Sandbox) -> Path:
    """Two turns: thinking, Bash, Read (text + PNG), Write, Edit; then a resumed turn."""
    files = seed_workspace(sb.cwd)
    out = sb.cwd / "out.txt"
    sb.script(
        thinking("The user wants a look around. Start with a shell command.") + bash("echo hello-from-bash", "Say hello"),
        read(str(files["notes"])),
        thinking("Now the image.") + read(str(files["png"])),
        write(str(out), "first version\n"),
        edit(str(out), "first version", "second version"),
        text("Turn one finished: ran Bash, read notes.txt and dot.png, wrote and edited out.txt."),
        thinking("Second turn: answer from what I already know.") + text("Turn two: out.txt says 'second version'."),
    )
    sid = _first(sb, "Please inspect this project and make out.txt.")
    sb.run("What does out.txt say now?", resume=sid).check()
    return sb.session_file(sid)


def subagent_session(sb: Sandbox) -> Path:
    """One Agent call whose subagent runs Bash and Read; the main loop then answers."""
    files = seed_workspace(sb.cwd)
    prompt = "SUBAGENT-TASK: list the project files and read notes.txt, then report."
    sb.script(
        agent(prompt, description="Survey the project", replies=[
            bash("ls -1", "List files"),
            read(str(files["notes"])),
            text("Subagent report: notes.txt has three lines (alpha, beta, gamma)."),
        ]),
        text("The survey agent is running; I will report when it finishes."),
        text("The subagent found notes.txt with three lines."),
    )
    sid = _first(sb, "Survey the project with a subagent.")
    return sb.session_file(sid)


def plain_session(sb: Sandbox, turns: int = 3) -> Path:
    """``turns`` text-only turns, each a separate CLI run joined by --resume."""
    sid = None
    for i in range(turns):
        sb.script(text(f"Answer number {i}: " + "lorem ipsum " * 20))
        if sid is None:
            sid = _first(sb, f"Question number {i}")
        else:
            sb.run(f"Question number {i}", resume=sid).check()
    assert sid
    return sb.session_file(sid)


def compact_session(sb: Sandbox, turn_after: bool = True) -> Path:
    """One turn with a Bash call, ``/compact``, then (``turn_after``) one more turn."""
    sb.script(
        bash("echo before-compact", "Print a marker"),
        text("Ran the marker command: it printed before-compact."),
    )
    sid = _first(sb, "Run a marker command.")
    sb.run("/compact", resume=sid).check()
    if turn_after:
        sb.script(text("First answer after compaction."))
        sb.run("Continue after compaction.", resume=sid).check()
    return sb.session_file(sid)


# The committed fixtures (tests/data/cli); each file stays well under 300 KB.
SCENARIOS = {
    "tools": tools_session,
    "subagent": subagent_session,
    "compact": lambda sb: compact_session(sb, turn_after=False),
}


def export(session_file: Path, dest_root: Path) -> Path:
    """Copy a session (+ side folder) to ``dest_root/<project folder>/``."""
    target = dest_root / session_file.parent.name
    target.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(session_file, target / session_file.name)
    side = session_file.with_suffix("")
    if side.is_dir():
        shutil.copytree(side, target / side.name, dirs_exist_ok=True)
    return target / session_file.name


def main(argv: list[str]) -> int:
    from .install import cached_install

    dest = Path(argv[0] if argv else "tests/data/cli")
    binary, why = cached_install()
    if binary is None:
        print(why, file=sys.stderr)
        return 1
    base = Path("/tmp/txdb-cli-fixtures")
    shutil.rmtree(base, ignore_errors=True)
    for name, fn in SCENARIOS.items():
        with Sandbox(binary, base / name, project_name="demo") as sb:
            f = fn(sb)
            print(name, export(f, dest), f.stat().st_size, "bytes", f"{munge(sb.cwd)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
