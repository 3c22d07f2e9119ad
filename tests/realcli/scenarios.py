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


def pdf_bytes(pages: int, pad_to: int = 0, compressed: bool = False) -> bytes:
    """A valid PDF of ``pages`` pages, one line of text each, written by hand
    (cross-reference table and all). ``pad_to``: a comment pads the file to
    about that many bytes, so PDFs of different page counts can be the same
    size. ``compressed``: the page objects sit in a Flate-compressed object
    stream (PDF 1.5), where no ``/Type /Page`` is in the clear (the classic
    cross-reference table keeps their slots as ``null`` objects: enough for
    a reader that counts pages, where a real file has a cross-reference
    stream)."""
    font = 3 + 2 * pages
    objs = [b"<< /Type /Catalog /Pages 2 0 R >>",
            f"<< /Type /Pages /Kids [{' '.join(f'{3 + 2 * i} 0 R' for i in range(pages))}] "
            f"/Count {pages} >>".encode()]
    page_dicts = []
    for i in range(pages):
        page_dicts.append(f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents {4 + 2 * i} 0 R "
                          f"/Resources << /Font << /F1 {font} 0 R >> >> >>".encode())
        s = f"BT /F1 24 Tf 72 720 Td (Hello from page {i + 1}) Tj ET".encode()
        objs += [page_dicts[-1], b"<< /Length %d >>\nstream\n%s\nendstream" % (len(s), s)]
    objs.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    if compressed:  # the pages move into object stream `font + 1`; their slots are left free
        body, offs = b"", []
        for d in page_dicts:
            offs.append(len(body))
            body += d + b"\n"
        head = b" ".join(b"%d %d" % (3 + 2 * i, o) for i, o in enumerate(offs)) + b"\n"
        packed = zlib.compress(head + body)
        objs.append(b"<< /Type /ObjStm /N %d /First %d /Filter /FlateDecode /Length %d >>\nstream\n%s\nendstream"
                    % (pages, len(head), len(packed), packed))
        for i in range(pages):
            objs[2 + 2 * i] = b"null"
    out = bytearray(b"%PDF-1.5\n")
    offsets = []
    for n, o in enumerate(objs, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (n, o)
    def tail(xref: int) -> bytes:
        return (b"xref\n0 %d\n0000000000 65535 f \n" % (len(objs) + 1)
                + b"".join(b"%010d 00000 n \n" % o for o in offsets)
                + b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%010d\n%%%%EOF\n" % (len(objs) + 1, xref))

    pad = pad_to - len(out) - len(tail(0)) - 2
    if pad > 0:
        out += b"%" + b"x" * pad + b"\n"
    out += tail(len(out))
    return bytes(out)



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


def pdf_session(sb: Sandbox) -> Path:
    """A Read of a 3-page PDF (the CLI stores a ``document`` block in the
    tool result), an answer; then a resumed turn."""
    pdf = sb.cwd / "paper.pdf"
    pdf.write_bytes(pdf_bytes(3))
    sb.script(read(str(pdf)), text("The paper has three pages, one line each."),
              text("Turn two: still three pages."))
    sid = _first(sb, "Please read paper.pdf.")
    sb.run("How many pages again?", resume=sid).check()
    return sb.session_file(sid)


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


def work_session(sb: Sandbox, seed: int = 0, prompts: int = 3, reads: int = 6) -> Path:
    """A working session of ``prompts`` prompts, each an agentic turn that
    reads ``reads`` files of 2-24 KB (prose, code, JSON lines; sizes drawn
    from ``seed``), runs a command and thinks now and then, then answers:
    most of its context is tool results, as in real work."""
    import random

    rng = random.Random(seed)
    kinds = [
        lambda n: "\n".join(f"def f{i}(x):\n    return x * {i} + {rng.randint(0, 99)}" for i in range(n // 40)),
        lambda n: " ".join(rng.choice(["the", "session", "context", "grows", "with", "each", "read", "of",
                                       "a", "file", "and", "tool", "output"]) for _ in range(n // 5)),
        lambda n: "\n".join('{"id": %d, "name": "item-%d", "ok": %s}' % (i, rng.randint(0, 9999), "true")
                            for i in range(n // 45)),
    ]
    sid = None
    for p in range(prompts):
        replies = []
        for r in range(reads):
            f = sb.cwd / f"file-{p}-{r}.txt"
            f.write_text(kinds[(p + r + seed) % 3](rng.randint(2_000, 24_000)))
            step = read(str(f))
            if rng.random() < 0.3:
                step = thinking(f"Reading {f.name} next; " + "reasoning " * rng.randint(20, 200)) + step
            replies.append(step)
        replies.append(bash(f"wc -c file-{p}-*.txt", "Count the bytes"))
        replies.append(text(f"Prompt {p} done: read {reads} files. " + "summary " * rng.randint(10, 80)))
        sb.script(*replies)
        if sid is None:
            sid = _first(sb, f"Please read the files for part {p}.")
        else:
            sb.run(f"Now part {p}, please.", resume=sid).check()
    assert sid
    return sb.session_file(sid)


# The committed fixtures (tests/data/cli); each file stays well under 300 KB.
SCENARIOS = {
    "tools": tools_session,
    "subagent": subagent_session,
    "compact": lambda sb: compact_session(sb, turn_after=False),
}
# Written once into tests/data/documents (not tests/data/cli, whose sessions
# every catalog fixture copies): ``python -m tests.realcli.scenarios
# tests/data/documents pdf``.
EXTRA_SCENARIOS = {"pdf": pdf_session, "work": work_session}


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
    chosen = {n: (SCENARIOS | EXTRA_SCENARIOS)[n] for n in argv[1:]} or SCENARIOS
    binary, why = cached_install()
    if binary is None:
        print(why, file=sys.stderr)
        return 1
    base = Path("/tmp/txdb-cli-fixtures")
    shutil.rmtree(base, ignore_errors=True)
    for name, fn in chosen.items():
        with Sandbox(binary, base / name, project_name="demo") as sb:
            f = fn(sb)
            print(name, export(f, dest), f.stat().st_size, "bytes", f"{munge(sb.cwd)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
