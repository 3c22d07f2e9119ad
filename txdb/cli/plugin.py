"""`txdb plugin`: where the Claude Code plugin is and how to enable it."""

from __future__ import annotations

import click

from txdb.model.claude_code import plugin_info
from txdb.cli.main import command
from txdb.cli.output import echo, to_json


@command("plugin")
@click.option("--json", "as_json", is_flag=True, help="Print the answer as JSON.")
def plugin(as_json):
    """"Enable it" loads the plugin for one launch; "Install it" adds the
    folder as a plugin marketplace and installs the plugin from it, for
    every launch.

    The plugin adds a skill (the txdb workflow, for the model) and Stop and
    SessionEnd hooks that refresh the catalog for the session that stopped.

    Example:

    \b
        txdb plugin
        claude --plugin-dir "$(txdb plugin --json | jq -r .path)"
        eval "$(txdb plugin --json | jq -r '.install | join(" && ")')"
    """
    info = plugin_info()
    if as_json:
        echo(to_json(info.__dict__))
        return
    echo(f"Plugin folder: {info.path}")
    echo(f"Enable it:     {info.enable}")
    echo(f"Install it:    {' && '.join(info.install)}")
    if info.hook_found is None:
        echo(f"Note: `{info.hook_command}` is not on PATH, so the plugin's hooks will not run: put the folder "
             "of the txdb command on PATH (`pipx ensurepath`, `uv tool update-shell`), or install txdb with "
             "pipx or `uv tool install`.", err=True)
