"""Install the pinned Claude Code CLI from npm into a per-user cache, once.

``install_claude()`` returns the path of the native ``claude`` executable or
raises :class:`ClaudeUnavailable` with a one-line reason. ``claude_binary()``
(in ``tests/realcli/__init__.py``) turns that into ``pytest.skip``.

Layout: ``$TXDB_TEST_CACHE/claude-code-<version>/`` (default
``~/.cache/txdb-tests``). The package is installed into a temporary sibling
folder and renamed into place (atomic), under an ``fcntl`` file lock, so two
pytest processes never see or make a half-installed cache. ``$TXDB_CLAUDE_BIN``
points at an existing binary instead (its version must match the pin; other
releases, see ``CLI_RELEASES``, are always installed into the cache).

The npm package ``@anthropic-ai/claude-code`` ships a placeholder
``bin/claude.exe`` plus one optional dependency per platform
(``@anthropic-ai/claude-code-linux-x64`` etc.) holding the real native binary
``claude``; its postinstall copies the binary over the placeholder. npm 11 may
not run that postinstall, so we look for the platform package's binary first.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from . import CLAUDE_CODE_VERSION

PACKAGE = "@anthropic-ai/claude-code"
NATIVE_MAGICS = (b"\x7fELF", b"\xcf\xfa\xed\xfe", b"\xca\xfe\xba\xbe", b"MZ")


#: Where install progress goes: tests/conftest.py points it at the terminal
#: (past pytest's capture), so a first run says what it downloads.
notify = None


def _say(msg: str) -> None:
    if notify is not None:
        notify(msg)


class ClaudeUnavailable(RuntimeError):
    """The CLI cannot be installed or run here (reason in the message)."""


def cache_root() -> Path:
    env = os.environ.get("TXDB_TEST_CACHE")
    if env:
        return Path(env).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "txdb-tests"


def install_dir(version: str = CLAUDE_CODE_VERSION) -> Path:
    return cache_root() / f"claude-code-{version}"


def _is_native(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            head = f.read(4)
        return path.is_file() and os.access(path, os.X_OK) and head.startswith(NATIVE_MAGICS)
    except OSError:
        return False


def _version_of(binary: Path) -> str:
    try:
        p = subprocess.run([str(binary), "--version"], capture_output=True, text=True,
                           timeout=60, env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                                            "HOME": tempfile.gettempdir()})
    except (OSError, subprocess.SubprocessError) as e:
        raise ClaudeUnavailable(f"{binary} does not run: {e}") from e
    if p.returncode != 0:
        raise ClaudeUnavailable(f"{binary} --version failed: {(p.stderr or p.stdout).strip()[:200]}")
    return p.stdout.strip().split()[0] if p.stdout.strip() else ""


def find_binary(prefix: Path) -> Path | None:
    """The native binary inside an ``npm install --prefix`` folder."""
    scope = prefix / "node_modules" / "@anthropic-ai"
    candidates = sorted(scope.glob("claude-code-*/claude")) + sorted(scope.glob("claude-code-*/claude.exe"))
    candidates.append(scope / "claude-code" / "bin" / "claude.exe")
    candidates.append(scope / "claude-code" / "bin" / "claude")
    for c in candidates:
        if _is_native(c):
            try:
                _version_of(c)
            except ClaudeUnavailable:
                continue  # e.g. the musl build on a glibc system
            return c
    return None


def npm_error(output: str, returncode: int) -> str:
    """One line out of npm's error output: ``<code> <first message>``."""
    msgs = [re.sub(r"^npm (error|ERR!)\s*", "", ln).strip() for ln in output.splitlines()
            if ln.startswith(("npm error", "npm ERR!"))]
    code = next((m[5:] for m in msgs if m.startswith("code ")), "")
    detail = next((m for m in msgs if m and not m.startswith(("code ", "syscall ", "errno ", "at "))), "")
    why = f"{code} {detail}".strip()
    if not why:
        rest = [ln.strip() for ln in output.splitlines() if ln.strip()]
        why = rest[-1] if rest else f"exit status {returncode}"
    return why[:240]


@contextlib.contextmanager
def _file_lock(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as f:
        try:
            import fcntl
        except ImportError:  # pragma: no cover - Windows: rely on atomic rename only
            yield
            return
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _check(binary: Path, version: str) -> Path:
    got = _version_of(binary)
    if got != version:
        raise ClaudeUnavailable(f"{binary} is Claude Code {got!r}, tests are pinned to {version}")
    return binary


def install_claude(version: str = CLAUDE_CODE_VERSION, timeout: float = 900) -> Path:
    """Install (once) and return the native ``claude`` binary of ``version``."""
    override = os.environ.get("TXDB_CLAUDE_BIN")
    if override and version == CLAUDE_CODE_VERSION:
        return _check(Path(override), version)

    final = install_dir(version)
    found = find_binary(final)
    if found:
        return _check(found, version)

    npm = shutil.which("npm")
    if not npm:
        raise ClaudeUnavailable("npm is not installed: cannot install the Claude Code CLI")

    with _file_lock(final.parent / f".claude-code-{version}.lock"):
        found = find_binary(final)  # another process may have finished meanwhile
        if found:
            return _check(found, version)
        tmp = Path(tempfile.mkdtemp(prefix=f".claude-code-{version}-", dir=final.parent))
        try:
            _say(f"realcli: installing Claude Code {version} with npm into {final} (about 350 MB, once)")
            cmd = [npm, "install", "--prefix", str(tmp), "--no-audit", "--no-fund",
                   "--no-save", "--loglevel=error", f"{PACKAGE}@{version}"]
            try:
                p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                                   stdin=subprocess.DEVNULL)
            except subprocess.TimeoutExpired as e:
                raise ClaudeUnavailable(f"npm install {PACKAGE}@{version} timed out") from e
            if p.returncode != 0:
                raise ClaudeUnavailable(f"npm install {PACKAGE}@{version} failed: "
                                        f"{npm_error(p.stderr or p.stdout, p.returncode)}")
            if find_binary(tmp) is None:
                raise ClaudeUnavailable(
                    f"{PACKAGE}@{version} installed but no native binary for {sys.platform} was found")
            if final.exists():  # a stale, incomplete folder
                shutil.rmtree(final, ignore_errors=True)
            os.chmod(tmp, 0o755)  # mkdtemp made it 0700
            os.rename(tmp, final)
            _say(f"realcli: Claude Code {version} installed")
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    found = find_binary(final)
    if not found:
        raise ClaudeUnavailable(f"no native claude binary under {final}")
    return _check(found, version)


@functools.cache
def cached_install(version: str = CLAUDE_CODE_VERSION) -> tuple[Path | None, str]:
    """Install once per process; remember a failure's reason too."""
    try:
        return install_claude(version), ""
    except ClaudeUnavailable as e:
        return None, str(e)
