"""The read-only commands that show a session's tool calls and thinking
blocks: show-tool, show-thinking (registered on the ``cli`` group when one
of them runs; the library is ``txdb.catalog.show``)."""

from __future__ import annotations

import click

from txdb.catalog import show
from txdb.cli.main import command, db_option, original_option, positions_note, positions_ref, read_catalog
from txdb.cli.output import echo, tabulate, to_json, wide_option


def _resolve(db_path, session, original):
    conn, _ = read_catalog(db_path, session)
    return conn, positions_ref(conn, session, original)


def _head(report: dict, ref) -> None:
    echo(f"Session {report['session_id']}  ({ref.path})")
    echo(positions_note(ref))


def _context(rows: list[dict]) -> None:
    if not rows:
        return
    echo(f"\nContext (positions {rows[0]['pos']}..{rows[-1]['pos']}; > marks the shown ones):")
    echo(tabulate([[">" if r["target"] else "", r["pos"], r["line"], r["role"], r["kinds"], r["excerpt"]]
                   for r in rows], headers=["", "pos", "line", "role", "kinds", "excerpt"]))


def _persisted_note(marker: dict | None) -> str:
    if not marker:
        return ""
    size = f" ({marker['original_chars']:,} chars)" if marker.get("original_chars") is not None else ""
    return f"; persisted to {marker['sidecar_path']}{size}"


@command("show-tool")
@db_option
@click.argument("session")
@click.option("--list", "as_list", is_flag=True, help="List every tool call (the default without --id).")
@click.option("--id", "tool_use_id", metavar="TOOLU_ID", help="Show this tool call's input and result in full.")
@click.option("--context", type=click.IntRange(min=0), default=3, show_default=True,
              help="With --id: chain positions to show before the call and after its result.")
@original_option
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@wide_option
def show_tool(db_path, session, as_list, tool_use_id, context, original, as_json):
    """--list gives each call's chain position, tool_use id, tool, input and
    result size (chars and est. tokens) and whether its result is already
    persisted or stripped. --id shows that call's input and result with
    the chain around it. A session with a pending copy is read through
    that copy: the positions are the ones the next surgery takes
    (--original reads the session file). The header line names the file.

    Example:

    \b
        txdb show-tool 3f2a9c1e --list
        txdb show-tool 3f2a9c1e --id toolu_01ABC --context 3
    """
    if as_list and tool_use_id:
        raise click.UsageError("--list and --id are exclusive: pick one")
    conn, ref = _resolve(db_path, session, original)
    if tool_use_id is None:
        report = show.list_tool_calls(conn, ref)
        if as_json:
            echo(to_json(report))
            return
        _head(report, ref)
        calls = report["tool_calls"]
        echo(f"{_count(len(calls), 'tool call')} on the active chain "
             f"({_count(report['chain_length'], 'position')})")
        if calls:
            echo(tabulate([[c["pos"], c["tool_use_id"], c["tool_name"], c["input_chars"], c["input_tokens"],
                            c["result_pos"], c["result_chars"], c["result_tokens"], _state(c)] for c in calls],
                          headers=["pos", "tool_use_id", "tool", "input chars", "input tok",
                                   "result pos", "result chars", "result tok", "state"]))
        return
    report = show.show_tool_call(conn, ref, tool_use_id, context)
    if as_json:
        echo(to_json(report))
        return
    _head(report, ref)
    c = report["tool_call"]
    where = (f"result at pos {c['result_pos']}" if c["result_pos"] is not None
             else "no result on the active chain")
    echo(f"\nTool call {c['tool_use_id']} ({c['tool_name']}) at pos {c['pos']} (line {c['line']}), {where}")
    echo(f"\nInput: {c['input_chars']:,} chars, ~{c['input_tokens']:,} tokens"
         + ("; stripped" if c["input_stripped"] else ""))
    echo(c["input_text"])
    if c["result_pos"] is not None:
        echo(f"\nResult: {c['result_chars']:,} chars, ~{c['result_tokens']:,} tokens"
             + (f", {c['result_images']} image(s)" if c["result_images"] else "")
             + (", is_error" if c["is_error"] else "")
             + ("; stripped" if c["result_state"] == "stripped" else "")
             + _persisted_note(c["persisted"]))
        echo(c["result_text"])
    _context(report["context"])


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _state(call: dict) -> str:
    parts = [call["result_state"]] if call["result_state"] else []
    if call["input_stripped"]:
        parts.append("input stripped")
    if call["is_error"]:
        parts.append("error")
    return ", ".join(parts)


@command("show-thinking")
@db_option
@click.argument("session")
@click.option("--pos", type=int, default=None, help="Show the thinking at this chain position in full.")
@click.option("--context", type=click.IntRange(min=0), default=3, show_default=True,
              help="With --pos: chain positions to show either side.")
@original_option
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@wide_option
def show_thinking(db_path, session, pos, context, original, as_json):
    """Without --pos, one row per thinking block (redacted ones, and text
    blocks that are one <thinking>...</thinking> span, included) with its
    chain position and size: text + signature chars, est. tokens; persisted
    ones are listed with their sidecar. --pos shows the block(s) at that
    position with the chain around it. A session with a pending copy is
    read through that copy, as show-tool does (--original: the session file).

    Example:

    \b
        txdb show-thinking 3f2a9c1e
        txdb show-thinking 3f2a9c1e --pos 42 --context 3
    """
    conn, ref = _resolve(db_path, session, original)
    if pos is None:
        report = show.list_thinking(conn, ref)
        if as_json:
            echo(to_json(report))
            return
        _head(report, ref)
        rows = report["thinking"]
        echo(f"{_count(len(rows), 'thinking block')} on the active chain "
             f"({_count(report['chain_length'], 'position')})")
        if rows:
            echo(tabulate([[r["pos"], r["line"], r["idx"], r["type"], r["chars"], r["signature_chars"],
                            r["total_chars"], r["tokens"], _persisted_note(r["persisted"]).lstrip("; ")]
                           for r in rows],
                          headers=["pos", "line", "block", "type", "text chars", "signature chars",
                                   "total chars", "est. tokens", "state"]))
            echo(f"Total: {sum(r['total_chars'] for r in rows):,} chars, "
                 f"~{sum(r['tokens'] for r in rows):,} tokens")
        return
    report = show.show_thinking_at(conn, ref, pos, context)
    if as_json:
        echo(to_json(report))
        return
    _head(report, ref)
    for b in report["blocks"]:
        echo(f"\nThinking at pos {b['pos']} (line {b['line']}, block {b['idx']}, {b['type']}): "
             f"{b['chars']:,} text + {b['signature_chars']:,} signature chars, ~{b['tokens']:,} tokens"
             + _persisted_note(b["persisted"]))
        echo(b["text"] if b["text"] else "(no readable text: the block is its signature only)")
    _context(report["context"])
