"""Drive the real Claude Code CLI offline, and ask it what a resume sends.

The CLI version is pinned here, in one place: :data:`CLAUDE_CODE_VERSION`.
It is installed from npm once into ``$TXDB_TEST_CACHE/claude-code-<version>``
(default ``~/.cache/txdb-tests``); set ``$TXDB_CLAUDE_BIN`` to use an existing
binary of that version. Without npm or the registry, tests skip.

Importing: test modules in ``tests/`` get ``tests/`` on ``sys.path`` from
pytest (rootdir-relative, no ``tests/__init__.py``); to be independent of that,
do as ``tests/test_realcli_harness.py`` does::

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from realcli import claude_binary, resume

(``python -m tests.realcli.scenarios`` from the repo root works too.)

Public API::

    claude_binary() -> pathlib.Path
        The pinned native ``claude`` executable; installs it on first use,
        calls ``pytest.skip(reason)`` when it cannot.

    resume(path, ping="ping", *, binary=None, workdir=None, session_id=None,
           script=None, extra_args=(), timeout=300, siblings=()) -> ResumeResult
        Copy the session file (+ its ``<uuid>/`` side folder) into a scratch
        HOME (under ``workdir``, e.g. ``tmp_path``; else a temp dir removed
        afterwards), run ``claude -p --resume <id> <ping>`` against a loopback
        fake Messages API, and report. The source file is only read.
        ``siblings``: other session files placed in the same project folder
        (a fork's original, say).

    ResumeResult
        .loaded                  exit 0 and a request ending with the ping was sent
        .compacted               a /compact summarisation request came first
        .messages                the ping request's ``messages`` (role + content)
        .user_assistant_messages()  the same without ``role: system`` entries
        .message_sizes, .messages_chars, .system_chars   sizes in JSON chars
        .blocks(type=None)       content blocks of those messages
        .text()                  every string of every request sent, joined:
                                 ``assert "secret" not in r.text()``
        .requests, .kinds        raw request bodies and their classification
        .run                     RunResult (returncode, stdout, stderr, duration)
        .summary()               one line for assertion messages

    Sandbox(binary, root, api=FakeAPI(script))   (tests.realcli.driver)
        scratch HOME + cwd; ``.run(prompt, resume=id)``, ``.session_file(id)``.
    FakeAPI, Reply, text(), thinking(), bash(), read(), write(), edit(),
    agent()                                      (tests.realcli.fake_api)
        the scripted loopback server and reply builders.
    scenarios.*                                  (tests.realcli.scenarios)
        make the CLI write small realistic sessions (tools, thinking,
        PNG reads, subagents, /compact).

Tests that use the CLI are marked ``@pytest.mark.realcli``.
"""

from __future__ import annotations

from pathlib import Path

CLAUDE_CODE_VERSION = "2.1.328"

REPO_ROOT = Path(__file__).resolve().parents[2]
DATA_DIR = REPO_ROOT / "tests" / "data" / "cli"
CORPUS_DIR = REPO_ROOT.parent / "shared" / "corpus"


def claude_binary() -> Path:
    """The pinned claude executable, or ``pytest.skip`` with the reason."""
    from .install import cached_install

    path, reason = cached_install(CLAUDE_CODE_VERSION)
    if path is None:
        import pytest

        pytest.skip(f"real Claude Code CLI unavailable: {reason}")
    return path


from .driver import RunResult, Sandbox, munge  # noqa: E402
from .fake_api import FakeAPI, Reply  # noqa: E402
from .oracle import ResumeResult, content_blocks, resume  # noqa: E402

__all__ = [
    "CLAUDE_CODE_VERSION", "CORPUS_DIR", "DATA_DIR", "REPO_ROOT",
    "claude_binary", "resume", "ResumeResult", "Sandbox", "RunResult",
    "FakeAPI", "Reply", "munge", "content_blocks",
]
