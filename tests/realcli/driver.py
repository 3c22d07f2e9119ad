"""Run the real ``claude`` CLI offline against a :class:`FakeAPI`.

A :class:`Sandbox` is a scratch ``HOME`` plus a scratch project folder (the
CLI's cwd) plus a running fake API. ``Sandbox.run(prompt, resume=id)`` runs
``claude -p [--resume id] prompt`` there with a sanitised environment and
returns a :class:`RunResult`; ``Sandbox.session_file(id)`` finds the file the
CLI wrote (``$HOME/.claude/projects/<munged cwd>/<id>.jsonl``).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from .fake_api import FakeAPI, Reply

# Inherited variables that are safe (and useful) to pass to the CLI. Everything
# else -- CLAUDE_CONFIG_DIR, CLAUDE_CODE_*, CLAUDECODE, ANTHROPIC_*, proxies,
# tokens of the parent tooling -- is dropped.
ENV_KEEP = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR", "USER", "LOGNAME", "TERM")


def munge(cwd: str | os.PathLike[str]) -> str:
    """Claude Code's project folder name: every non-alphanumeric char -> '-'."""
    return re.sub(r"[^A-Za-z0-9]", "-", str(cwd))


def clean_env(home: Path, base_url: str, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: os.environ[k] for k in ENV_KEEP if k in os.environ}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env.update({
        "HOME": str(home),
        "ANTHROPIC_BASE_URL": base_url,
        "ANTHROPIC_API_KEY": "sk-test",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
        "IS_SANDBOX": "1",
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
    })
    if os.path.exists("/bin/bash"):
        env["SHELL"] = "/bin/bash"
    env.update(extra or {})
    return env


@dataclass
class RunResult:
    args: list[str]
    returncode: int
    stdout: str
    stderr: str
    duration: float
    output: dict[str, Any] | None = None  # parsed --output-format json result

    @property
    def session_id(self) -> str | None:
        return (self.output or {}).get("session_id")

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not (self.output or {}).get("is_error", False)

    def check(self) -> "RunResult":
        if not self.ok:
            raise AssertionError(f"claude failed (rc={self.returncode}): {self.stderr.strip()[:500]} "
                                 f"{self.stdout.strip()[:500]}")
        return self


@dataclass
class Sandbox:
    """A scratch HOME + project cwd + fake API, for running the CLI."""

    binary: Path
    root: Path
    api: FakeAPI = field(default_factory=FakeAPI)
    project_name: str = "proj"
    timeout: float = 180
    env_extra: dict[str, str] = field(default_factory=dict)
    runs: list[RunResult] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.root = Path(os.path.realpath(self.root))
        self.home = self.root / "home"
        self.cwd = self.root / self.project_name
        self.home.mkdir(parents=True, exist_ok=True)
        self.cwd.mkdir(parents=True, exist_ok=True)

    # -- lifecycle
    def __enter__(self) -> "Sandbox":
        if self.api._server is None:
            self.api.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.api.stop()

    # -- paths
    @property
    def projects_dir(self) -> Path:
        return self.home / ".claude" / "projects"

    @property
    def project_dir(self) -> Path:
        return self.projects_dir / munge(self.cwd)

    def session_file(self, session_id: str) -> Path:
        hits = sorted(self.projects_dir.glob(f"*/{session_id}.jsonl"))
        if not hits:
            raise FileNotFoundError(f"no session file for {session_id} under {self.projects_dir}")
        return hits[0]

    # -- running
    def script(self, *replies: Reply) -> "Sandbox":
        self.api.push(*replies)
        return self

    def run(self, prompt: str, resume: str | None = None, *, output_format: str = "json",
            extra_args: Sequence[str] = (), timeout: float | None = None) -> RunResult:
        args = [str(self.binary), "-p", "--dangerously-skip-permissions"]
        if output_format:
            args += ["--output-format", output_format]
        if resume:
            args += ["--resume", resume]
        args += list(extra_args)
        args += ["--", prompt]
        env = clean_env(self.home, self.api.base_url, self.env_extra)
        t0 = time.monotonic()
        try:
            p = subprocess.run(args, cwd=self.cwd, env=env, capture_output=True, text=True,
                               timeout=timeout or self.timeout, stdin=subprocess.DEVNULL)
            rc, out, err = p.returncode, p.stdout, p.stderr
        except subprocess.TimeoutExpired as e:
            rc = -9
            out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
            err = f"timed out after {e.timeout}s"
        res = RunResult(args, rc, out, err, time.monotonic() - t0)
        if output_format == "json":
            try:
                res.output = json.loads(out.strip().splitlines()[-1]) if out.strip() else None
            except ValueError:
                res.output = None
        self.runs.append(res)
        return res
