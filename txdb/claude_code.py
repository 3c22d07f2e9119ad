"""txdb's Claude Code plugin: where its folder is, and how to enable it."""

from __future__ import annotations

import shlex
import shutil
from dataclasses import dataclass
from importlib import resources
from pathlib import Path


@dataclass
class PluginInfo:
    path: str  # the plugin folder (.claude-plugin/plugin.json, skills/, hooks/)
    enable: str  # the command that starts Claude Code with the plugin
    hook_command: str  # what the hooks run
    hook_found: str | None  # where that command is on PATH, None when it is not


def plugin_info() -> PluginInfo:
    folder = Path(str(resources.files("txdb").joinpath("claude_plugin")))
    return PluginInfo(
        path=str(folder),
        enable=f"claude --plugin-dir {shlex.quote(str(folder))}",
        hook_command="txdb-hook",
        hook_found=shutil.which("txdb-hook"),
    )
