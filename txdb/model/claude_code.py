"""txdb's Claude Code plugin: where its folder is, and how to enable it."""

from __future__ import annotations

import json
import shlex
import shutil
from dataclasses import dataclass
from importlib import resources
from pathlib import Path


@dataclass
class PluginInfo:
    path: str  # the plugin folder (.claude-plugin/plugin.json, skills/, hooks/)
    enable: str  # the command that starts Claude Code with the plugin (this launch only)
    install: list[str]  # the commands that install it for good (the folder is its own marketplace)
    hook_command: str  # what the hooks run
    hook_found: str | None  # where that command is on PATH, None when it is not


def plugin_info() -> PluginInfo:
    folder = Path(str(resources.files("txdb").joinpath("claude_plugin")))
    market = json.loads((folder / ".claude-plugin" / "marketplace.json").read_text(encoding="utf-8"))
    quoted = shlex.quote(str(folder))
    return PluginInfo(
        path=str(folder),
        enable=f"claude --plugin-dir {quoted}",
        install=[f"claude plugin marketplace add {quoted}",
                 f"claude plugin install {market['plugins'][0]['name']}@{market['name']}"],
        hook_command="txdb-hook",
        hook_found=shutil.which("txdb-hook"),
    )
