"""Acceptance of every surgery command against the real Claude Code CLI.

Each command runs the way a user runs it -- ``txdb <command> <session.jsonl>
... --db <tmp catalog>`` then ``txdb apply <session.jsonl>`` (subprocesses of
the installed ``txdb``) -- on a copy of a session, and each CLI release of
``realcli.CLI_RELEASES`` (``$TXDB_CLI_VERSIONS``; in CI the pinned one on the
full matrix, the others on :data:`SUBSET_SESSIONS` x :data:`SUBSET_COMMANDS`)
resumes the result (``tests/realcli``: ``claude -p --resume <id> <ping>`` against the
loopback fake API). The request it sends is compared with the request it
sent for the untouched session (the baseline, one resume per session):

1. the session loads and is not compacted (no summarisation request);
2. every message the command was not meant to touch is still sent, in
   order and unchanged: both requests are normalised by masking only what
   the command may change (see :class:`Mask`), then compared block by
   block (roles, tool ids, tool inputs, result bodies, full texts);
3. what was stripped is gone: for the 3 longest stripped payloads of each
   kind (tool result bodies -- their head with ``--keep-last-lines``, whose
   tail must stay --, long tool-input strings, thinking texts and
   signatures, reminders of dropped attachments), ``after.text()`` (every
   request sent) holds it as often as ``baseline.text()`` minus its
   occurrences inside what was stripped: 0, except e.g. for identical
   task reminders, whose kept newest one stays;
4. a fork (``txdb fork``, ``strip-all --fork``) is a new file next to the
   original that resumes under its new id (with the original beside it),
   and the original still resumes with the very same request;
5. the recorded usage never rises: every token count of every assistant
   line is <= what it was (the last turn's drives auto-compaction).

Normalisation, and why:

- the scratch HOME/cwd (a different temp path per resume) and
  ``cache_control`` markers are not content; the ping turn is cut off;
- strip-tools masks, in scope of ``--tools`` only, tool_use inputs (kept:
  id, name, the input's keys) and/or non-error tool_result bodies (kept:
  id); error results and every other block must be byte-equal; the tool
  list of the request must be equal too (a ToolSearch result is what loads
  deferred tools: stripping one unloaded them -- found here, fixed in
  ``txdb.surgery.ops``);
- strip-thinking removes thinking blocks and whole-``<thinking>`` texts
  (the leaf may keep a placeholder); on models with preserved thinking
  (the CLI-made sessions use claude-opus-5-5) any edit makes txdb remove
  the later thinking blocks too: then the thinking left must be a prefix of
  the thinking before;
- strip-attachments: every ``<system-reminder>`` span and ``role: system``
  text is cut out and compared separately: per position they may only
  disappear (a subsequence of what was there), and with ``rendered``
  stored each one that went is the rendering of a dropped line. The CLI
  re-renders attachments of older files, appends reminders to tool_result
  bodies (trimming them) and merges consecutive system attachments into one
  text, so result bodies are compared trimmed and system texts by
  paragraph.

A command that changes nothing in a session fails, unless the pair is
declared in :data:`NO_OPS` (then it is skipped).

Sessions: the CLI-made fixtures of ``tests/data/cli``, a generated session
and three real ones shipped in ``tests/data`` (any clone), and from
``../shared/corpus`` one more generated session and three real sessions of
2-4 MB (those skip when the corpus is absent). Cases run in a thread pool (each one is a
few subprocesses: txdb, txdb apply, claude), started by the first test that
needs them; ``TXDB_ACCEPTANCE_WORKERS`` sets the pool size.
"""

from __future__ import annotations

import concurrent.futures as cf
import json
import os
import re
import shutil
import subprocess
import sys
import threading
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
sys.path.insert(0, str(TESTS))

from realcli import (CLAUDE_CODE_VERSION, DATA_DIR, claude_binary, cli_releases,  # noqa: E402
                     content_blocks, munge, resume)
from realcli.install import cached_install  # noqa: E402
from sessions import session_path  # noqa: E402
from test_realcli_chain import PING, sent_on_resume  # noqa: E402

from txdb.model.records import is_wrapped_thinking  # noqa: E402
from txdb.model.records import MARK, THINKING_PLACEHOLDER  # noqa: E402
from txdb.surgery.ops import INPUT_STRING_LIMIT  # noqa: E402

pytestmark = pytest.mark.realcli

REMINDER = "<system-reminder>"
FORK_TITLE = "acceptance fork"
MIN_PAYLOAD = 80  # stripped payloads shorter than this are not worth a search


# --------------------------------------------------------------------------
# sessions


def _cli_fixture(name: str) -> Path:
    return next((DATA_DIR / f"-tmp-txdb-cli-fixtures-{name}").glob("*.jsonl"))


SESSIONS: dict[str, Path] = {
    "cli/tools": _cli_fixture("tools-demo"),
    "cli/subagent": _cli_fixture("subagent-demo"),
    "cli/compact": _cli_fixture("compact-demo"),
    # generated by CLI 2.1.328 (claude-opus-5-5: preserved thinking); 5a73f7d9 is
    # shipped in tests/data/generated, 91f27d20 (12 subagents, 1.8 MB) is not
    "gen/5a73f7d9": session_path("generated/-home-user-src-demo-14/5a73f7d9-de47-4921-a60f-d1c8c68135c5.jsonl"),
    "gen/91f27d20": session_path("generated/-home-user-src-demo-1/91f27d20-32b7-42f9-8096-f776eb39baf6.jsonl"),
    # real, shipped in tests/data (MIT): CLI 2.1.114 (attachments incl. task_reminder,
    # thinking with signatures, parallel tool calls, a subagent); CLI 2.0.5 (a pasted
    # image, 92 tool calls); CLI 1.0.24 (thinking, summary lines)
    "real/ef958aa1": session_path("real/daaain-claude-code-log/-experiments-worktrees/"
                                  "ef958aa1-0e93-49f0-bb71-150f63befcd1.jsonl"),
    "real/9e953218": session_path("real/daaain-claude-code-log/-Users-dain-workspace-danieldemmel-me-next/"
                                  "9e953218-585f-4692-89df-9e0747a31c68.jsonl"),
    "real/fe869ecb": session_path("real/daaain-claude-code-log/-Users-dain-workspace-claude-code-log-sample/"
                                  "fe869ecb-c176-478f-9734-7e4b8ef12cff.jsonl"),
    # real, ../shared/corpus only (no licence to ship them): 3.9 MB (CLI 2.1.22x, 650
    # attachments without `rendered`, 193 thinking blocks), 2.8 MB (CLI 2.0.2, images,
    # no thinking), 2.2 MB (CLI 2.1.97, thinking, task_reminders, images)
    "real/d3f32579": session_path("real/hannibal8856-claude_backup/-home-moxa-sdc1-home-moxa-mds4xgl3-buildroot-dl/"
                                  "d3f32579-7f66-464a-b856-526a67163a15.jsonl"),
    "real/354b2588": session_path("real/bradymholt-dotfiles/-Users-bholt-dev-evergreen/"
                                  "354b2588-2a5c-43d7-b678-e95a4a87bd2a.jsonl"),
    "real/1fb5e404": session_path("real/4thehalibit-omarchy-backup/-home-vwestberg-Claude/"
                                  "1fb5e404-604d-4a2b-baf1-3beb42a67371.jsonl"),
}


# --------------------------------------------------------------------------
# commands, and what each may change in the resumed request


@dataclass(frozen=True)
class Mask:
    """What a command may change in the request; everything else must be equal.

    ``inputs``/``results``: tool_use inputs (compared by id, name and keys:
    an input keeps its keys) / non-error tool_result bodies (compared by id
    and ``is_error``) of the tools ``tools`` names (None: every tool).
    ``thinking``: thinking/redacted_thinking blocks and whole-``<thinking>``
    text blocks may go; the leaf may get the one-line placeholder.
    ``attachments``: reminders rendered from dropped attachment lines may go.
    """
    inputs: bool = False
    results: bool = False
    tools: frozenset | None = None
    keep_last: int | None = None
    thinking: bool = False
    attachments: bool = False


STRIP_ALL = Mask(inputs=True, results=True, thinking=True)


@dataclass(frozen=True)
class Command:
    steps: tuple  # txdb argument lists, each run as `txdb <step[0]> <path> <step[1:]>`
    mask: Mask = Mask()
    fork: bool = False


COMMANDS: dict[str, Command] = {
    "strip-all": Command((("strip-all",),), STRIP_ALL),
    "strip-tools": Command((("strip-tools",),), Mask(inputs=True, results=True)),
    "strip-tools--only-results": Command((("strip-tools", "--only-results"),), Mask(results=True)),
    "strip-tools--only-inputs": Command((("strip-tools", "--only-inputs"),), Mask(inputs=True)),
    "strip-tools--tools-Bash": Command((("strip-tools", "--tools", "Bash"),),
                                       Mask(inputs=True, results=True, tools=frozenset({"Bash"}))),
    "strip-tools--keep-last-lines-2": Command((("strip-tools", "--keep-last-lines", "2"),),
                                              Mask(inputs=True, results=True, keep_last=2)),
    "strip-thinking": Command((("strip-thinking",),), Mask(thinking=True)),
    "strip-attachments": Command((("strip-attachments",),), Mask(attachments=True)),
    "strip-attachments--include-free": Command((("strip-attachments", "--include-free"),),
                                               Mask(attachments=True)),
    "reset-usage": Command((("reset-usage",),)),
    "strip-all--no-usage-reset+reset-usage": Command((("strip-all", "--no-usage-reset"), ("reset-usage",)),
                                                     STRIP_ALL),
    "fork": Command((("fork", "--fork-title", FORK_TITLE),), fork=True),
    "strip-all--fork": Command((("strip-all", "--fork"),), STRIP_ALL, fork=True),
}


#: The (session, command) pairs where the command has nothing to do; every
#: other pair is declared to change its session: if it changes nothing, its
#: tests FAIL (a strip that stopped working is not a skip), and a command that
#: changes nothing is skipped only where it is named here.
NO_OPS: dict[str, tuple[str, ...]] = {
    # cli/compact: no tool call and no thinking above its compact boundary
    "strip-all": ("cli/compact",),
    "strip-tools": ("cli/compact",),
    "strip-tools--only-results": ("cli/compact",),
    "strip-all--no-usage-reset+reset-usage": ("cli/compact",),
    # the CLI-made fixtures' tool inputs are all short; they run no Bash
    "strip-tools--only-inputs": ("cli/tools", "cli/subagent", "cli/compact"),
    "strip-tools--tools-Bash": ("cli/tools", "cli/subagent", "cli/compact"),
    # no result of more than 2 lines
    "strip-tools--keep-last-lines-2": ("cli/tools", "cli/compact"),
    # no thinking: a subagent demo without it, CLI 2.0.x sessions
    "strip-thinking": ("cli/subagent", "cli/compact", "real/9e953218", "real/354b2588"),
    # no attachment line that may go
    "strip-attachments": ("cli/tools", "cli/subagent", "gen/5a73f7d9", "gen/91f27d20", "real/9e953218",
                          "real/fe869ecb", "real/354b2588"),
    "strip-attachments--include-free": ("cli/tools", "cli/subagent", "gen/5a73f7d9", "gen/91f27d20",
                                        "real/9e953218", "real/fe869ecb", "real/354b2588"),
    # nothing to lower: no untouched session records more than the calibrated estimate
    "reset-usage": tuple(SESSIONS),
}


def must_change(session: str, command: str) -> bool:
    """Declared to change the session: not one of :data:`NO_OPS`."""
    return session not in NO_OPS.get(command, ())


# --------------------------------------------------------------------------
# running a case: txdb as a user runs it, then the CLI resumes the result


def _txdb_argv() -> list[str]:
    exe = Path(sys.executable).with_name("txdb")
    if exe.is_file():
        return [str(exe)]
    return [sys.executable, "-c", "from txdb.cli import cli; cli()"]


@dataclass
class Case:
    session: str
    command: str
    src: Path
    path: Path | None = None  # the session file the commands ran on
    reports: list = field(default_factory=list)  # --json reports of the steps
    apply: dict | None = None
    error: str | None = None
    nothing: bool = False  # the command changed nothing (no pending copy, no fork)
    after: object = None  # ResumeResult of the applied session (or of the fork)
    fork_file: Path | None = None
    original_after_fork: object = None  # ResumeResult of the original, with the fork beside it

    @property
    def dropped_thinking(self) -> int:
        return sum(r.get("dropped_thinking_removed") or 0 for r in self.reports)

    def after_bytes(self) -> bytes:
        return (self.fork_file or self.path).read_bytes()


def _txdb(args: list[str], cwd: Path) -> tuple[int, str, str]:
    p = subprocess.run(_txdb_argv() + args, cwd=cwd, capture_output=True, text=True, timeout=300,
                       stdin=subprocess.DEVNULL)
    return p.returncode, p.stdout, p.stderr


def run_case(binary: Path, name: str, command: str, root: Path) -> Case:
    src = SESSIONS[name]
    cmd = COMMANDS[command]
    case = Case(name, command, src)
    proj = root / "projects" / src.parent.name
    proj.mkdir(parents=True)
    f = proj / src.name
    shutil.copyfile(src, f)
    side = src.parent / src.stem
    if side.is_dir():
        shutil.copytree(side, proj / src.stem)
    case.path = f
    db = str(root / "catalog.db")
    for step in cmd.steps:
        rc, out, err = _txdb([step[0], str(f), *step[1:], "--db", db, "--json"], root)
        if rc != 0:
            case.error = f"txdb {' '.join(step)} exited {rc}: {err.strip()[-2000:]}"
            return case
        case.reports.append(json.loads(out))
    if not any(r.get("written") for r in case.reports):
        case.nothing = True
        return case
    if cmd.fork:
        case.fork_file = Path(case.reports[-1]["target"])
        case.after = resume(case.fork_file, PING, binary=binary, workdir=root / "resume", siblings=(f,))
        case.original_after_fork = resume(f, PING, binary=binary, workdir=root / "resume",
                                          siblings=(case.fork_file,))
        return case
    rc, out, err = _txdb(["apply", str(f), "--db", db, "--json"], root)
    if rc != 0:
        case.error = f"txdb apply exited {rc}: {err.strip()[-2000:]}"
        return case
    case.apply = json.loads(out)
    case.after = resume(f, PING, binary=binary, workdir=root / "resume")
    return case


class Runner:
    """Baselines and cases as futures in a thread pool (subprocess-bound work),
    per CLI release."""

    def __init__(self, root: Path, workers: int):
        self.root = root
        self.pool = cf.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="acceptance")
        self.futures: dict[tuple, cf.Future] = {}
        self.lock = threading.Lock()
        self.n = 0

    def _submit(self, key, fn):
        with self.lock:
            if key not in self.futures:
                self.n += 1
                d = self.root / f"{self.n:03d}-{'-'.join(k.replace('/', '_') for k in key)}"
                d.mkdir(parents=True)
                self.futures[key] = self.pool.submit(fn, d)
            return self.futures[key]

    def submit_baseline(self, cli: str, name: str):
        binary = claude_binary(cli)
        return self._submit((cli, "base", name), lambda d: resume(SESSIONS[name], PING, binary=binary, workdir=d))

    def submit_case(self, cli: str, name: str, command: str):
        binary = claude_binary(cli)
        return self._submit((cli, name, command), lambda d: run_case(binary, name, command, d))

    def baseline(self, cli: str, name: str):
        base = self.submit_baseline(cli, name).result()
        if cli != CLAUDE_CODE_VERSION and base.loaded and base.compacted:
            # e.g. 2.1.250 and the 3.9 MB session: that release compacts it untouched
            pytest.skip(f"CLI {cli} compacts {name} untouched: nothing to compare with")
        assert base.loaded and not base.compacted, f"baseline ({cli}): {base.summary()}"
        return base

    def case(self, cli: str, name: str, command: str) -> Case:
        case = self.submit_case(cli, name, command).result()
        if case.error:
            pytest.fail(case.error)
        if case.nothing:
            if must_change(name, command):
                pytest.fail(f"{command} changes nothing in {name}, which it is declared to change "
                            f"(not in NO_OPS)")
            pytest.skip(f"{command} changes nothing in {name} (declared in NO_OPS)")
        return case


def _available(name: str) -> bool:
    return SESSIONS[name].is_file()


@pytest.fixture(scope="module")
def runner(request, tmp_path_factory):
    workers = int(os.environ.get("TXDB_ACCEPTANCE_WORKERS") or min(4, (os.cpu_count() or 2) + 1))
    r = Runner(tmp_path_factory.mktemp("acceptance"), workers)
    # Start every selected case now, biggest sessions first, so the pool stays busy.
    me = sys.modules[__name__]
    wanted = []
    for item in request.session.items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        if getattr(item, "module", None) is me and "session" in params and _available(params["session"]) \
                and cached_install(params["cli"])[0] is not None:
            wanted.append((params["cli"], params["session"], params.get("command")))
    wanted.sort(key=lambda k: -SESSIONS[k[1]].stat().st_size)
    for cli, name, command in wanted:
        r.submit_baseline(cli, name)
        if command:
            r.submit_case(cli, name, command)
    yield r
    r.pool.shutdown(wait=True, cancel_futures=True)


# --------------------------------------------------------------------------
# the matrix: CLI release x session x command

RELEASES = cli_releases()

#: What a release other than the pinned one resumes when it runs on a subset
#: (CI): the sessions shipped in tests/data and the commands that write the
#: most kinds of change (every strip at once, in place and as a fork; the
#: attachments).
SUBSET_SESSIONS = ("cli/tools", "cli/subagent", "cli/compact", "gen/5a73f7d9", "real/ef958aa1",
                   "real/9e953218", "real/fe869ecb")
SUBSET_COMMANDS = ("strip-all", "strip-all--fork", "strip-attachments--include-free")


#: Releases that render reminders from their own state on resume, not from
#: the stored ``rendered``: 2.1.250 rebuilds the task list of a task_reminder
#: from the tool calls and paces its auto-mode reminder by them, so a strip of
#: tool calls changes which reminders it sends (found by this matrix). For
#: them every command is judged as strip-attachments is: reminders may only
#: disappear, each from where it was; the rest must be equal.
REMINDERS_RERENDERED = ("2.1.250",)
#: Releases that send a Read result as they render it from the line's
#: ``toolUseResult`` (line-numbered file content, without the reminder the
#: stored result ends with) while the stored content is whole: the last lines
#: they sent before are not the stored content's last lines, which is what
#: ``--keep-last-lines`` keeps (found by this matrix on two real sessions;
#: after the strip they send the stored, stripped content).
READ_RERENDERED = ("2.1.250",)
#: Pairs where the CLI, re-rendering attachments that store no ``rendered``,
#: sends fewer reminders than one per dropped line allows: open, named here
#: so that it shows as an expected failure, never a pass.
RERENDER_GAPS = {
    ("real/d3f32579", "strip-attachments"): "2.1.328 sends 426 fewer <total_tokens> reminders while 423 "
    "attachment lines were dropped (the file stores no rendered text): three more go than lines went",
}


def _matrix(commands=None):
    """(cli, session[, command]) params; a release on a subset gets only
    :data:`SUBSET_SESSIONS` x :data:`SUBSET_COMMANDS`."""
    out = []
    for cli, full in RELEASES:
        for n in SESSIONS:
            if not full and n not in SUBSET_SESSIONS:
                continue
            marks = [] if _available(n) else [
                pytest.mark.skip(reason=f"{SESSIONS[n]} absent (../shared/corpus not here)")]
            if cli != CLAUDE_CODE_VERSION:  # the other releases: their own run (`pytest -m realcli_matrix`)
                marks = [*marks, pytest.mark.realcli_matrix]
            if commands is False:
                out.append(pytest.param(cli, n, id=f"{cli}-{n}", marks=marks))
                continue
            for c in COMMANDS:
                if (commands is None or c in commands) and (full or c in SUBSET_COMMANDS):
                    out.append(pytest.param(cli, n, c, id=f"{cli}-{n}-{c}", marks=marks))
    return out


session_param = pytest.mark.parametrize("cli,session", _matrix(False))


def command_param(names=None):
    return pytest.mark.parametrize("cli,session,command", _matrix(names))


# --------------------------------------------------------------------------
# the resumed request, normalised


def _sandbox_root(r) -> Path:
    # <root>/home/.claude/projects/<munged cwd>/<id>.jsonl
    return r.session_file.parents[4]


def _drop_cache_control(o):
    if isinstance(o, dict):
        return {k: _drop_cache_control(v) for k, v in o.items() if k != "cache_control"}
    if isinstance(o, list):
        return [_drop_cache_control(x) for x in o]
    return o


def request_messages(r) -> list[dict]:
    """The messages up to the ping (its text removed), without cache_control
    markers, with the scratch HOME/cwd (which differs per resume) replaced."""
    s = json.dumps(sent_on_resume(r), ensure_ascii=False)
    root = _sandbox_root(r)
    for needle in (str(root), munge(root)):
        s = s.replace(needle, "<sandbox>")
    msgs = _drop_cache_control(json.loads(s))
    return [{"role": m["role"], "content": content_blocks(m)} for m in msgs]


def request_tools(r) -> list[str]:
    return sorted(t.get("name") or "" for t in (r.main_request or {}).get("tools") or [])


def request_chars(r) -> int:
    return len(json.dumps(request_messages(r), ensure_ascii=False))


def _canon(b) -> str:
    return json.dumps(b, sort_keys=True, ensure_ascii=False)


def _is_thinking(b: dict, role: str) -> bool:
    return b.get("type") in ("thinking", "redacted_thinking") or (
        role == "assistant" and b.get("type") == "text" and is_wrapped_thinking(b.get("text") or ""))


def _tool_names(*msg_lists) -> dict[str, str]:
    return {b.get("id"): b.get("name") for msgs in msg_lists for m in msgs for b in m["content"]
            if b.get("type") == "tool_use"}


def _in_scope(mask: Mask, name: str | None) -> bool:
    return mask.tools is None or name in mask.tools


def block_sig(b: dict, role: str, mask: Mask, names: dict, thinking: bool):
    """One block as compared; None: the command may remove it. Masked parts
    become a marker (an input keeps its keys; a result keeps id + is_error)."""
    t = b.get("type")
    if thinking and (_is_thinking(b, role) or (role == "assistant" and t == "text"
                                               and b.get("text") == THINKING_PLACEHOLDER)):
        return None
    if t == "tool_use" and mask.inputs and _in_scope(mask, b.get("name")):
        inp = b.get("input")
        keys = sorted(inp) if isinstance(inp, dict) else repr(type(inp))
        return _canon({"type": t, "id": b.get("id"), "name": b.get("name"), "input keys": keys})
    if (t == "tool_result" and mask.results and not b.get("is_error")
            and _in_scope(mask, names.get(b.get("tool_use_id")))):
        return _canon({"type": t, "tool_use_id": b.get("tool_use_id"), "content": "<masked>"})
    return _canon(b)


def normalise(msgs: list[dict], mask: Mask, names: dict, thinking: bool) -> list[tuple]:
    out = []
    for m in msgs:
        sigs = [block_sig(b, m["role"], mask, names, thinking) for b in m["content"]]
        out.append((m["role"], tuple(s for s in sigs if s is not None)))
    return out


def _first_difference(a: list, b: list) -> str:
    i = next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    x = a[i] if i < len(a) else None
    y = b[i] if i < len(b) else None
    head = f"{len(a)} messages before, {len(b)} after; first difference at message {i}"
    if x is None or y is None or x[0] != y[0]:
        return f"{head}:\n  before: {str(x)[:1500]}\n  after:  {str(y)[:1500]}"
    j = next((k for k, (p, q) in enumerate(zip(x[1], y[1])) if p != q), min(len(x[1]), len(y[1])))
    p = x[1][j] if j < len(x[1]) else ""
    q = y[1][j] if j < len(y[1]) else ""
    c = next((k for k, (u, v) in enumerate(zip(p, q)) if u != v), min(len(p), len(q)))
    lo = max(0, c - 300)
    return (f"{head} ({x[0]}), block {j} of {len(x[1])} before / {len(y[1])} after, char {c}:\n"
            f"  before: ...{p[lo:c + 700]}\n  after:  ...{q[lo:c + 700]}")


REMINDER_SPAN = re.compile(r"\s*<system-reminder>.*?</system-reminder>", re.S)


def _cut_reminders(text: str, found: list) -> str:
    spans = [m.group(0).strip() for m in REMINDER_SPAN.finditer(text)]
    if not spans:
        return text
    found.extend(spans)
    out = REMINDER_SPAN.sub("", text).rstrip()
    return out.lstrip("\n") if text.lstrip().startswith("<system-reminder>") else out


def split_reminders(msgs: list[dict]) -> tuple[list[dict], list[list[str]]]:
    """(skeleton, reminders): the user/assistant messages with every
    ``<system-reminder>`` span cut out (from text blocks and tool_result
    bodies, where the CLI also appends re-rendered reminders) and the
    ``role: system`` messages left out; and per slot (slot i: before the
    i-th user/assistant message, or inside it) the reminders and system
    texts found there, in order."""
    skeleton: list[dict] = []
    slots: list[list[str]] = [[]]
    for m in msgs:
        if m["role"] == "system":
            # consecutive system attachments merge into one text ("\n\n" between them)
            slots[-1].extend("system: " + part for b in m["content"]
                             for part in (b.get("text") or _canon(b)).split("\n\n"))
            continue
        found: list[str] = []
        blocks = []
        for b in m["content"]:
            b = dict(b)
            if b.get("type") == "text" and m["role"] == "user":
                f: list[str] = []
                b["text"] = _cut_reminders(b.get("text") or "", f)
                found += f
                if f and not b["text"]:
                    continue
            elif b.get("type") == "tool_result":
                c = b.get("content")
                # the CLI trims a result it appends re-rendered reminders to (or adds
                # them as a text part, trimming the one before): compare trimmed
                if isinstance(c, str):
                    b["content"] = _cut_reminders(c, found).strip()
                elif isinstance(c, list):
                    parts = [dict(x, text=_cut_reminders(x["text"], found).strip())
                             if isinstance(x, dict) and isinstance(x.get("text"), str) else x for x in c]
                    b["content"] = [x for x in parts if not (isinstance(x, dict) and x.get("text") == "")]
            blocks.append(b)
        slots[-1].extend(found)
        skeleton.append({"role": m["role"], "content": blocks})
        slots.append([])
    return skeleton, slots


def is_subsequence(small: list, big: list) -> bool:
    it = iter(big)
    return all(any(x == y for y in it) for x in small)


# --------------------------------------------------------------------------
# session files


def _lines(data: bytes) -> list[dict]:
    out = []
    for raw in data.splitlines():
        try:
            d = json.loads(raw)
        except ValueError:
            continue
        if isinstance(d, dict):
            out.append(d)
    return out


def dropped_attachments(before: bytes, after: bytes) -> list[dict]:
    kept = Counter(d.get("uuid") for d in _lines(after) if d.get("type") == "attachment")
    out = []
    for d in _lines(before):
        if d.get("type") == "attachment":
            if kept[d.get("uuid")] > 0:
                kept[d.get("uuid")] -= 1
            else:
                out.append(d)
    return out


def rendered_texts(att: dict) -> list[str] | None:
    r = att.get("rendered")
    if "rendered" not in att:
        return None
    if not isinstance(r, list):
        return []
    return [x.get("content") if isinstance(x, dict) else str(x) for x in r]


def assistant_usage(data: bytes) -> list[tuple[tuple, dict]]:
    seen: Counter = Counter()
    out = []
    for d in _lines(data):
        if d.get("type") != "assistant":
            continue
        u = (d.get("message") or {}).get("usage") if isinstance(d.get("message"), dict) else None
        key = (d.get("uuid"), seen[d.get("uuid")])
        seen[d.get("uuid")] += 1
        if isinstance(u, dict):
            out.append((key, u))
    return out


def token_counts(u, prefix="") -> dict[str, int]:
    """Every integer count in a usage object, by path (iterations[] included)."""
    out = {}
    if isinstance(u, dict):
        for k, v in u.items():
            out.update(token_counts(v, f"{prefix}{k}."))
    elif isinstance(u, list):
        for i, v in enumerate(u):
            out.update(token_counts(v, f"{prefix}{i}."))
    elif isinstance(u, int) and not isinstance(u, bool):
        out[prefix.rstrip(".")] = u
    return out


def context_of(u: dict) -> int:
    f = ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
    its = u.get("iterations")
    src = its[-1] if isinstance(its, list) and its and isinstance(its[-1], dict) else u
    return sum(v for k in f if isinstance(v := src.get(k), int))


# --------------------------------------------------------------------------
# what a command stripped: payloads to look for


def stripped_payloads(base_msgs: list[dict], mask: Mask, names: dict,
                      dropped_texts: list[str]) -> list[tuple[str, str, str | None]]:
    """(kind, payload, what must remain) for the stripped places of the
    baseline request: tool result bodies (their head with keep-last-lines,
    the tail must remain), long tool-input strings, thinking texts and
    signatures, dropped reminders."""
    out: list[tuple[str, str, str | None]] = []
    for m in base_msgs:
        for b in m["content"]:
            t = b.get("type")
            if t == "tool_result" and mask.results and not b.get("is_error") \
                    and _in_scope(mask, names.get(b.get("tool_use_id"))):
                c = b.get("content")
                text = c if isinstance(c, str) else "\n".join(
                    x.get("text") or "" for x in (c or []) if isinstance(x, dict) and x.get("type") == "text")
                if mask.keep_last:
                    lines = text.splitlines()
                    if len(lines) <= mask.keep_last:
                        continue
                    out.append(("tool_result", "\n".join(lines[:-mask.keep_last]),
                                "\n".join(lines[-mask.keep_last:])))
                else:
                    out.append(("tool_result", text, None))
            elif t == "tool_use" and mask.inputs and _in_scope(mask, b.get("name")):
                for v in _strings(b.get("input")):
                    if len(v) > INPUT_STRING_LIMIT and not v.startswith(MARK):
                        out.append(("tool_use input", v, None))
            elif mask.thinking and _is_thinking(b, m["role"]):
                for k in ("thinking", "signature", "data", "text"):
                    if isinstance(b.get(k), str):
                        out.append((f"{t} {k}", b[k], None))
    out += [("dropped attachment", x, None) for x in dropped_texts]
    return [p for p in out if len(p[1].strip()) >= MIN_PAYLOAD]


def _strings(o):
    if isinstance(o, str):
        yield o
    elif isinstance(o, dict):
        for v in o.values():
            yield from _strings(v)
    elif isinstance(o, list):
        for v in o:
            yield from _strings(v)


def pick(payloads, before_text: str, per_kind: int = 3):
    """The longest payloads of each kind, with how often each must still
    occur after: its count in the baseline request minus its occurrences in
    the stripped places (0 unless it is also sent elsewhere, e.g. the kept
    newest of identical reminders)."""
    places = [p for _k, p, _t in payloads]
    chosen = []
    by_kind: dict[str, list] = {}
    for p in payloads:
        by_kind.setdefault(p[0], []).append(p)
    for kind, ps in by_kind.items():
        seen: set[str] = set()
        for p in sorted(ps, key=lambda p: -len(p[1])):
            x = p[1]
            if x in seen:
                continue
            seen.add(x)
            total = before_text.count(x)
            inside = sum(q.count(x) for q in places)
            if total >= inside > 0:
                chosen.append((*p, total - inside))
            if len(seen) == per_kind:
                break
    return chosen


# --------------------------------------------------------------------------
# the tests


@session_param
def test_baseline_resumes(runner, cli, session):
    base = runner.baseline(cli, session)
    assert base.user_assistant_messages(), base.summary()


@command_param()
def test_resumes_without_compacting(runner, cli, session, command):
    case = runner.case(cli, session, command)
    r = case.after
    assert r.loaded, r.summary()
    base = runner.submit_baseline(cli, session).result()
    if base.compacted and cli != CLAUDE_CODE_VERSION:
        # that release compacts the untouched session (2.1.250: the 3.9 MB one): a
        # result it loads whole is a gain, one it compacts too is no loss
        if r.compacted:
            pytest.skip(f"CLI {cli} compacts {session} untouched, and after {command} too")
        return
    assert not r.compacted, r.summary()
    base = runner.baseline(cli, session)
    assert request_chars(r) <= request_chars(base), (r.summary(), base.summary())


def _compare(runner, cli, session, command):
    """The baseline and the after request, normalised for the command."""
    case = runner.case(cli, session, command)
    base = runner.baseline(cli, session)
    mask = COMMANDS[command].mask
    bm, am = request_messages(base), request_messages(case.after)
    names = _tool_names(bm, am)
    # Preserved thinking (claude-opus-5-5 ...): after an edit the API drops
    # every later thinking block, so txdb removes them (reported).
    thinking = mask.thinking or case.dropped_thinking > 0
    slots = None
    if mask.attachments or cli in REMINDERS_RERENDERED:
        # reminders rendered from attachment lines may go: compare the rest
        (bm, before_slots), (am, after_slots) = split_reminders(bm), split_reminders(am)
        slots = (before_slots, after_slots)
    before, after = normalise(bm, mask, names, thinking), normalise(am, mask, names, thinking)
    return case, base, bm, am, before, after, slots, names, thinking


def removed_reminders(slots) -> list[str]:
    before_slots, after_slots = slots
    out: list[str] = []
    for b, a in zip(before_slots, after_slots):
        out += list((Counter(b) - Counter(a)).elements())
    return [x.removeprefix("system: ") for x in out]


@command_param()
def test_untouched_messages_still_sent(runner, cli, session, command):
    case, base, bm, am, before, after, _slots, _names, thinking = _compare(runner, cli, session, command)
    assert before == after, _first_difference(before, after)
    if _slots and not COMMANDS[command].mask.attachments:  # a release that re-renders reminders
        for i, (b, a) in enumerate(zip(*_slots)):
            assert is_subsequence(a, b), f"new reminders at message {i}: {(Counter(a) - Counter(b))}"
    # the tools offered stay the same too (ToolSearch results load deferred tools)
    assert request_tools(case.after) == request_tools(base)
    if thinking and not COMMANDS[command].mask.thinking:
        # only the later thinking blocks went: what is left is a prefix of what was there
        tb = [_canon(b) for m in bm for b in m["content"] if b.get("type") in ("thinking", "redacted_thinking")]
        ta = [_canon(b) for m in am for b in m["content"] if b.get("type") in ("thinking", "redacted_thinking")]
        assert ta == tb[: len(ta)], "thinking blocks other than the later ones the API drops changed"


@command_param()
def test_stripped_content_is_gone(runner, cli, session, command):
    case, base, bm, am, before, after, slots, names, _thinking = _compare(runner, cli, session, command)
    removed = removed_reminders(slots) if slots else []
    mask = COMMANDS[command].mask
    if mask == Mask():
        # fork, reset-usage: nothing stripped, the request is the same
        assert request_chars(base) == request_chars(case.after), (base.summary(), case.after.summary())
        return
    before_text, after_text = base.text(), case.after.text()
    payloads = pick(stripped_payloads(bm, mask, names, removed), before_text)
    if not payloads:
        assert request_chars(case.after) <= request_chars(base)
        pytest.skip(f"{command} strips nothing of {MIN_PAYLOAD}+ chars in the request of {session}")
    for kind, x, tail, remain in payloads:
        assert before_text.count(x) > remain
        assert after_text.count(x) == remain, (
            f"{kind} sent {after_text.count(x)} times after {command} (expected {remain}): {x[:200]!r}")
        if tail is not None and cli not in READ_RERENDERED:
            assert tail in after_text, f"{command}: the last lines of a {kind} are gone: {tail[:200]!r}"
    assert request_chars(case.after) < request_chars(base), (base.summary(), case.after.summary())
    if mask.attachments:
        kinds = Counter(a.get("attachment", {}).get("type") for a in
                        dropped_attachments(case.src.read_bytes(), case.after_bytes()))
        assert removed, f"{command} dropped {dict(kinds)} but no reminder left the request"


@command_param([n for n, c in COMMANDS.items() if c.mask.attachments])
def test_reminders_only_removed(runner, cli, session, command):
    """strip-attachments: reminders (and system texts) only disappear, each
    from where it was; with ``rendered`` stored, exactly those of the
    dropped lines."""
    case, base, bm, am, before, after, slots, names, _thinking = _compare(runner, cli, session, command)
    before_slots, after_slots = slots
    assert len(before_slots) == len(after_slots)
    for i, (b, a) in enumerate(zip(before_slots, after_slots)):
        assert is_subsequence(a, b), (
            f"reminders at message {i} after {command} are not a subsequence of those before:\n"
            f"  new: {[x[:300] for x in (Counter(a) - Counter(b)).elements()]}")
    dropped = dropped_attachments(case.src.read_bytes(), case.after_bytes())
    texts = [rendered_texts(d) for d in dropped]
    removed = removed_reminders(slots)
    if all(t is not None for t in texts):
        # each reminder that went is the stored rendering of a dropped line (a dropped
        # line may have been off the resumed chain, e.g. above a compact boundary)
        want = Counter(x.strip() for t in texts for x in t if x and x.strip())
        assert not Counter(removed) - want, (Counter(removed) - want)
    else:  # older CLI: it re-renders each attachment (some to nothing)
        if (session, command) in RERENDER_GAPS and len(removed) > len(dropped):
            pytest.xfail(RERENDER_GAPS[(session, command)])
        assert len(removed) <= len(dropped)


@command_param()
def test_usage_never_raised(runner, cli, session, command):
    case = runner.case(cli, session, command)
    before = dict(assistant_usage(case.src.read_bytes()))
    after = assistant_usage(case.after_bytes())
    assert after, "no assistant usage left"
    for key, u in after:
        old = before.get(key)
        if old is None:
            continue
        ob, nb = token_counts(old), token_counts(u)
        raised = {k: (ob.get(k), v) for k, v in nb.items() if k in ob and v > ob[k]}
        assert not raised, f"{command} raised recorded usage of assistant line {key[0]}: {raised}"
        assert set(nb) <= set(ob) | {"cache_creation.ephemeral_5m_input_tokens",
                                      "cache_creation.ephemeral_1h_input_tokens"}, (ob, nb)
    last_key, last = after[-1]
    if last_key in before:
        assert context_of(last) <= context_of(before[last_key])
    if command == "strip-all--no-usage-reset+reset-usage":
        # the strip left usage alone; the standalone reset then ran on the stripped copy
        strip, reset = case.reports
        assert strip["usage"] is None and "capped" in reset["result"], reset
        res = reset["result"]
        assert res["last_after"] <= res["last_before"]
        if res["capped"] and last_key in before:
            assert context_of(last) == res["last_after"] < context_of(before[last_key])


@command_param(["fork", "strip-all--fork"])
def test_fork_resumes_under_new_id_and_original_unchanged(runner, cli, session, command):
    case = runner.case(cli, session, command)
    base = runner.baseline(cli, session)
    rep = case.reports[-1]
    fork = case.fork_file
    assert fork.is_file() and fork.parent == case.path.parent, fork
    assert fork.name == f"{rep['fork_session_id']}.jsonl" and fork.stem != case.path.stem
    # the original: not written, no pending copy, and the CLI resumes it as before
    assert case.path.read_bytes() == case.src.read_bytes()
    assert not case.path.with_name(case.path.name + ".pending").exists()
    r = case.after
    assert r.session_id == fork.stem and r.loaded and not r.compacted, r.summary()
    assert r.sibling_files[0].read_bytes() == case.src.read_bytes(), "resuming the fork wrote to the original"
    o = case.original_after_fork
    assert o.loaded and not o.compacted, o.summary()
    assert request_messages(o) == request_messages(base), _first_difference(
        normalise(request_messages(base), Mask(), {}, False), normalise(request_messages(o), Mask(), {}, False))
    # stamped like /branch
    lines = _lines(fork.read_bytes())
    assert {d.get("sessionId") for d in lines if d.get("uuid")} == {fork.stem}
    if command == "fork":
        assert any(d.get("type") == "custom-title" and d.get("customTitle") == FORK_TITLE for d in lines)
