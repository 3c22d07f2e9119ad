"""The one list of the commands defined outside ``main.py``: name -> the
module that defines it, and the short help ``txdb --help`` shows.

Plain data, imported by ``main`` at start-up: ``txdb --help`` lists every
command from here without importing a command module, and running a
command imports only its module. A module defines its commands with
``main.command(name)``, which takes the short help from this table (a
command missing here fails when its module is imported; the test suite
imports every module from a fresh process and compares).
"""

from __future__ import annotations

from typing import NamedTuple


class Entry(NamedTuple):
    module: str
    help: str


def _in(module: str, **helps: str) -> dict[str, Entry]:
    return {name.replace("_", "-"): Entry(f"txdb.cli.{module}", h) for name, h in helps.items()}


COMMANDS: dict[str, Entry] = {
    **_in("strip",
          strip_tools="Clear tool inputs and results (error results keep their text).",
          strip_thinking="Remove thinking blocks (text and signature; <thinking>/<think> text blocks too).",
          strip_all="Strip all tool content and thinking (the usual first move).",
          strip_attachments="Drop superseded attachments (keep-all types and the newest of each kind stay).",
          reset_usage="Lower stale usage counts so the context gauge matches a stripped session."),
    **_in("apply",
          snapshot="Copy a session to <session>.jsonl.pending (mutating commands do this themselves).",
          apply="Swap the pending copy in for the original: the one write to a session file.",
          undo="Put back the backup of a session's last applied surgery."),
    **_in("fork", fork="Copy a session to a new session id, stamped like Claude Code's /branch."),
    **_in("compact",
          compact="Write a new session: a summary of the chain before position N, then N.. intact.",
          compact_range="Collapse chain positions --from..--to into one user message with a marker."),
    **_in("persist",
          persist_tool="Move one tool result to <session>/tool-results/<id>.txt behind Claude Code's marker.",
          persist_tools="Move tool results to sidecar files (error results and ToolSearch results stay).",
          persist_thinking="Move the thinking of the message at chain position N to a sidecar file.",
          persist_thinkings="Move every thinking block (in --from/--to) to sidecar files.",
          persist_text="Move the text blocks of the message at chain position N to sidecar files.",
          persist_texts="Move large text blocks (in --from/--to) to sidecar files.",
          persist_message="Collapse a whole message to one marker; its content goes to a sidecar file.",
          persist_range="Move tool results, thinking and text between --from and --to to sidecar files.",
          migrate_persisted="Bring older persisted layouts (and moved projects trees) to the current one."),
    **_in("rescue", rescue="Bring a session under a context target in one pass, least loss first."),
    **_in("images",
          list_images="Every image of a session: position, media type, pixels, tokens, sha256.",
          replace_images="Replace images with text transcripts (<sha256>.txt in --dir)."),
    **_in("show",
          show_tool="Tool calls on a session's active chain: sizes, or one call in full.",
          show_thinking="Thinking blocks on a session's active chain: sizes, or one in full."),
    **_in("search", search="Find text in messages, thinking, tool output and tool input (full-text, ranked)."),
    **_in("serve", serve="Browse the catalog in Datasette (read-only, bound to 127.0.0.1)."),
    **_in("export", export="Export the catalog's tables as Parquet, partitioned by project and month."),
    **_in("cost", cost="What you spent: each API message once, priced in USD by genai-prices."),
    **_in("waste", waste="What sessions paid for that they did not need, and the command that reclaims it."),
    **_in("statusline", statusline="One line for Claude Code's status bar: model, context, cost, block time left."),
    **_in("restore", restore="Give back a session whose files vanished, byte for byte, from the catalog.",
          prune="Delete the archive of gone sessions, asked by name or --all-gone --yes (--dry-run counts)."),
    **_in("secrets", secrets="Secrets in the catalog: scan new text for keys, tokens and passwords."),
    **_in("history", history="Sessions named by history.jsonl (those gone before txdb too) and their prompts."),
    **_in("doctor", doctor="What Claude Code's cleanup deletes next, and whether the catalog could give it back."),
    **_in("plugin", plugin="Where txdb's Claude Code plugin is, and the command that enables it."),
}
