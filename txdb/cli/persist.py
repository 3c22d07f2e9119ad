"""The persist commands: persist-tool(s), persist-thinking(s), persist-text(s),
persist-message, persist-range, migrate-persisted.

Each checks its options and runs its declaration's op (one
``persist.PersistOp``: what to move, summaries) through the same path as the
strips (``surgery._run``: SESSION or --where,
pending copy, --fork, --dry-run, --apply); the sidecars are written by the
engine right before the pending copy that refers to them.
"""

from __future__ import annotations

import click

from txdb.surgery import persist as per
from txdb.cli.main import command
from txdb.cli.surgery import SurgeryOptions, _csv, _run, surgery_options

_SUMMARIES = click.option("--summaries-file", "summaries_file", type=click.Path(dir_okay=False), default=None,
                          help="JSON object of summaries keyed by pos:N, toolu_X or msg:<uuid>.")
_KEEP = click.option("--keep-recent", type=click.IntRange(min=0), default=0,
                     help="Leave in place the newest N (of each kind) on the active chain that would move.")


def _summaries(summaries_file: str | None) -> dict | None:
    return per.load_summaries(summaries_file) if summaries_file else None


@command("persist-tool")
@surgery_options(where=False, verbose=True)
@click.option("--id", "tool_id", required=True, help="The tool_use id (toolu_...) whose result moves.")
@click.option("--summary", default=None, help="A summary to put in the marker.")
def persist_tool_cmd(o: SurgeryOptions, tool_id, summary):
    """The marker is Claude Code's own: "Output too large ... Full output saved to: PATH".

    Example:

    \b
        txdb persist-tool SESSION --id toolu_01AbC --summary "Read config.py: Flask config"
    """
    _run(o, "persist-tool", dict(id=tool_id, summary=summary))


@command("persist-tools")
@surgery_options(verbose=True)
@click.option("--tools", default=None, help="Only these tools, comma-separated (globs allowed: mcp__*).")
@_KEEP
@click.option("--min-chars", type=click.IntRange(min=0), default=0, help="Only results of at least N chars.")
@_SUMMARIES
def persist_tools_cmd(o: SurgeryOptions, tools, keep_recent, min_chars, summaries_file):
    """With --where, the rows of block_targets it selects, in every session
    (a tool_use or tool_result row moves that call's result).

    Example:

    \b
        txdb persist-tools SESSION --keep-recent 3
        txdb persist-tools --where "tool_name = 'Read' and result_tokens > 12000" --apply
    """
    _run(o, "persist-tools", dict(tools=_csv(tools), keep_recent=keep_recent, min_chars=min_chars,
                                  summaries=_summaries(summaries_file)))


@command("persist-thinking")
@surgery_options(where=False, ranged=False, verbose=True)
@click.option("--pos", type=click.IntRange(min=0), required=True, help="Chain position of the message.")
@click.option("--summary", default=None, help="A summary to put in the marker.")
def persist_thinking_cmd(o: SurgeryOptions, pos, summary):
    """The file is <session>/persisted/thinking/<uuid>.txt.

    Example:

    \b
        txdb persist-thinking SESSION --pos 42 --summary "Chose content matching: Bun strips paths"
    """
    _run(o, "persist-thinking", dict(pos=pos, summary=summary))


@command("persist-thinkings")
@surgery_options(where=False, verbose=True)
@_KEEP
@_SUMMARIES
def persist_thinkings_cmd(o: SurgeryOptions, keep_recent, summaries_file):
    """Example:

    \b
        txdb persist-thinkings SESSION --keep-recent 2
    """
    _run(o, "persist-thinkings", dict(keep_recent=keep_recent, summaries=_summaries(summaries_file)))


@command("persist-text")
@surgery_options(where=False, ranged=False, verbose=True)
@click.option("--pos", type=click.IntRange(min=0), required=True, help="Chain position of the message.")
@click.option("--idx", type=click.IntRange(min=0), default=None, help="Only this block of the message.")
@click.option("--summary", default=None, help="A summary to put in the marker.")
def persist_text_cmd(o: SurgeryOptions, pos, idx, summary):
    """Each file is <session>/persisted/text/<uuid>_<idx>.txt.

    Example:

    \b
        txdb persist-text SESSION --pos 47 --summary "Audit M-02 spec draft"
    """
    _run(o, "persist-text", dict(pos=pos, idx=idx, summary=summary))


@command("persist-texts")
@surgery_options(where=False, verbose=True)
@click.option("--min-chars", type=click.IntRange(min=0), default=per.DEFAULT_TEXT_MIN_CHARS, show_default=True,
              help="Only text blocks of at least N chars.")
@_KEEP
@_SUMMARIES
def persist_texts_cmd(o: SurgeryOptions, min_chars, keep_recent, summaries_file):
    """Example:

    \b
        txdb persist-texts SESSION --from 0 --to 95 --min-chars 500 --keep-recent 3
    """
    _run(o, "persist-texts", dict(min_chars=min_chars, keep_recent=keep_recent,
                                  summaries=_summaries(summaries_file)))


@command("persist-message")
@surgery_options(where=False, ranged=False, verbose=True)
@click.option("--pos", type=click.IntRange(min=0), required=True, help="Chain position of the message.")
@click.option("--summary", default=None, help="A summary to put in the marker.")
def persist_message_cmd(o: SurgeryOptions, pos, summary):
    """The file is <session>/persisted/message/<uuid>.json. Refuses the leaf; a
    message with a tool call takes its result's message along (and a result
    its call's).

    Example:

    \b
        txdb persist-message SESSION --pos 47 --summary "Adam dialogue"
    """
    _run(o, "persist-message", dict(pos=pos, summary=summary))


@command("persist-range")
@surgery_options(where=False, verbose=True)
@click.option("--kinds", default="tool,thinking,text", show_default=True,
              help="What to move, comma-separated: tool, thinking, text.")
@click.option("--min-chars", type=click.IntRange(min=0), default=0, help="Only blocks of at least N chars.")
@_KEEP
@_SUMMARIES
def persist_range_cmd(o: SurgeryOptions, kinds, min_chars, keep_recent, summaries_file):
    """Example:

    \b
        txdb persist-range SESSION --from 0 --to 95 --kinds tool,thinking,text \\
            --min-chars 500 --keep-recent 3 --summaries-file summaries.json
    """
    if o.frm is None or o.to is None:
        raise click.UsageError("persist-range needs --from and --to")
    kind_list = _csv(kinds) or []
    bad = [k for k in kind_list if k not in per.KINDS]
    if bad or not kind_list:
        raise click.UsageError(f"--kinds takes tool, thinking, text (got {kinds!r})")
    _run(o, "persist-range", dict(kinds=kind_list, min_chars=min_chars, keep_recent=keep_recent,
                                  summaries=_summaries(summaries_file)))


@command("migrate-persisted")
@surgery_options(where=False, edits=False)
def migrate_persisted_cmd(o: SurgeryOptions):
    """<image sha256=...> transcript blocks become persisted/image/<sha256>.txt
    + a marker, .tool-results/ sidecars move to tool-results/, markers of a
    moved projects tree are re-pointed.

    Example:

    \b
        txdb migrate-persisted SESSION && txdb apply SESSION
    """
    _run(o, "migrate-persisted")
