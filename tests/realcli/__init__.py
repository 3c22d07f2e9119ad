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

    claude_binary(version=CLAUDE_CODE_VERSION) -> pathlib.Path
        The native ``claude`` executable (the pinned one by default); installs
        it on first use, calls ``pytest.skip(reason)`` when it cannot.

    CLI_RELEASES, cli_releases() -> ((version, full), ...)
        The releases the acceptance matrix resumes with, as chosen by
        ``$TXDB_CLI_VERSIONS`` and ``$CI``.

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
        PNG and PDF reads, subagents, /compact).

Tests that use the CLI are marked ``@pytest.mark.realcli``.
"""

from __future__ import annotations

import os
from pathlib import Path

CLAUDE_CODE_VERSION = "2.1.328"

#: The releases the acceptance matrix resumes with: the pinned one, the newest
#: the registry had when last checked, and one about 80 releases older.
CLI_RELEASES = (CLAUDE_CODE_VERSION, "2.1.332", "2.1.250")

#: Releases a module's tests use besides the pinned one, in every run (so the
#: first run says it downloads them).
ALSO_USED = {"test_rescue_realcli.py": ("2.1.250",)}

REPO_ROOT = Path(__file__).resolve().parents[2]
DATA_DIR = REPO_ROOT / "tests" / "data" / "cli"
CORPUS_DIR = REPO_ROOT.parent / "shared" / "corpus"


def claude_binary(version: str = CLAUDE_CODE_VERSION) -> Path:
    """The claude executable of ``version`` (default: the pinned one), or
    ``pytest.skip`` with the reason."""
    from .install import cached_install

    path, reason = cached_install(version)
    if path is None:
        import pytest

        pytest.skip(f"real Claude Code CLI {version} unavailable: {reason}")
    return path


def cli_releases(environ=None) -> tuple[tuple[str, bool], ...]:
    """``(version, full)`` for each release the acceptance matrix resumes with.

    ``$TXDB_CLI_VERSIONS``: ``all`` (every one of :data:`CLI_RELEASES`, each on
    the full matrix), ``pinned``, or a comma-separated list of versions (each
    on the full matrix). Unset: ``all`` on a developer's machine; with
    ``CI=true`` the pinned release on the full matrix and the others on a
    subset (``full`` False), to keep CI within its time.
    """
    env = os.environ if environ is None else environ
    want = (env.get("TXDB_CLI_VERSIONS") or "").strip()
    if not want:
        if (env.get("CI") or "").lower() in ("1", "true", "yes"):
            return tuple((v, v == CLAUDE_CODE_VERSION) for v in CLI_RELEASES)
        want = "all"
    if want == "all":
        return tuple((v, True) for v in CLI_RELEASES)
    if want == "pinned":
        return ((CLAUDE_CODE_VERSION, True),)
    versions = [v.strip() for v in want.split(",") if v.strip()]
    return tuple((v, True) for v in dict.fromkeys(versions))


from .driver import RunResult, Sandbox, munge  # noqa: E402
from .fake_api import FakeAPI, Reply  # noqa: E402
from .oracle import ResumeResult, content_blocks, resume  # noqa: E402

__all__ = [
    "ALSO_USED", "CLAUDE_CODE_VERSION", "CLI_RELEASES", "cli_releases", "CORPUS_DIR", "DATA_DIR", "REPO_ROOT",
    "claude_binary", "resume", "ResumeResult", "Sandbox", "RunResult",
    "FakeAPI", "Reply", "munge", "content_blocks",
]
