"""What every mutating command shares: its options (``SurgeryOptions``, the
``surgery_options`` decorator) and how it runs (``_run``: SESSION, or the
--where plan; --apply). The commands are in ``strip``, ``persist``,
``images``, ``compact``, ``fork`` and ``apply``; printing is ``report``.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from dataclasses import dataclass, field
from pathlib import Path

import click

from txdb.catalog.sessions import resolve_session
from txdb.surgery import pending as pend
from txdb.surgery.commands import COMMANDS
from txdb.surgery.engine import PassOptions, run_surgery
from txdb.cli.main import db_option, open_catalog, read_catalog
from txdb.cli.output import echo, to_json
from txdb.cli.report import print_apply as _print_apply
from txdb.cli.report import print_report as _print_report
from txdb.cli.report import print_where as _print_where

@dataclass(frozen=True)
class SurgeryOptions:
    """What the user asked of a mutating command, beside its own options."""

    session: str | None
    db_path: str | None = None
    where: str | None = None
    apply: bool = False          # --apply (with --where): apply each pending copy right away
    frm: int | None = None       # --from / --to: chain positions to touch
    to: int | None = None
    dry_run: bool = False
    fork: bool = False           # --fork, or --fork-title alone
    fork_title: str | None = None
    usage_reset: bool = True     # not --no-usage-reset
    keep_dropped_thinking: bool = False
    backup: bool = True          # not --no-backup (takes effect with --apply; nothing to skip otherwise)
    as_json: bool = False
    verbose: bool = False        # -v: the report's per-block detail
    arguments: dict = field(default_factory=dict)  # the command's options as logged in `surgeries`

    @property
    def positions(self) -> tuple[int | None, int | None] | None:
        if self.frm is None and self.to is None:
            return None
        return (self.frm, self.to)

    def pass_options(self) -> PassOptions:
        """The library's options of one pass, from what the user asked."""
        return PassOptions(dry_run=self.dry_run, fork=self.fork, fork_title=self.fork_title,
                           usage_reset=self.usage_reset, keep_dropped_thinking=self.keep_dropped_thinking,
                           arguments=self.arguments, positions=self.positions)


class WhereOption(click.Option):
    """--where, whose help names the command's target view and its columns
    (read from the view itself, so the help cannot drift from it)."""

    def get_help_record(self, ctx):
        record = super().get_help_record(ctx)
        from txdb.catalog.db import view_columns
        from txdb.surgery.select import VIEWS

        view = VIEWS.get(ctx.command.name) if record else None
        if view is None:
            return record
        return record[0], f"{record[1]} The view {view} has the columns: {', '.join(view_columns(view))}."


# The shared options, in groups a command takes or leaves (see surgery_options).
_WHERE = [
    click.option("--where", "where", default=None, metavar="SQL", cls=WhereOption,
                 help="Instead of SESSION: an SQL condition over the target view, across every "
                      "session in the catalog (see docs/surgery.md)."),
    click.option("--apply", "do_apply", is_flag=True,
                 help="Apply each pending copy right away (every check of `txdb apply`)."),
]
_RANGE = [
    click.option("--from", "frm", type=click.IntRange(min=0), default=None,
                 help="First chain position to touch (as in the catalog's active_chain view)."),
    click.option("--to", "to", type=click.IntRange(min=0), default=None, help="Last chain position to touch."),
    click.option("--pos", "pos", type=click.IntRange(min=0), default=None,
                 help="One chain position: the same as --from N --to N."),
]
# Every mutating command takes it (the surgery spec): it matters only where a pass applies.
_NO_BACKUP = click.option(
    "--no-backup", is_flag=True,
    help="Keep no .bak when this pass applies (--apply). Otherwise there is nothing to skip: a pending "
         "copy or a fork is a new file, the original is the backup.")
_WRITE = [
    click.option("--dry-run", is_flag=True, help="Run everything on a throwaway copy; write nothing."),
    click.option("--fork", "fork", is_flag=True,
                 help="Write the result as a new session next to the original (no apply needed)."),
    click.option("--fork-title", default=None, help="Title of the fork (default: '<title> (Stripped)')."),
    _NO_BACKUP,
]
_EDIT = [
    click.option("--no-usage-reset", is_flag=True, help="Leave recorded usage (the context gauge) as it is."),
    click.option("--keep-dropped-thinking", is_flag=True,
                 help="Keep the later thinking blocks the API will drop after this edit."),
]
_JSON = click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")

# Parameters that are not the command's options as logged in `surgeries.arguments`.
_NOT_ARGUMENTS = {"db_path", "as_json", "verbose", "session", "where", "do_apply"}
_SHARED = {"session", "db_path", "where", "do_apply", "frm", "to", "pos", "dry_run", "fork", "fork_title",
           "no_usage_reset", "keep_dropped_thinking", "no_backup", "as_json", "verbose"}
_VERBOSE = click.option("-v", "--verbose", "verbose", is_flag=True,
                        help="List each moved block and its sidecar file (--json lists them too).")


def surgery_options(*, where: bool = True, edits: bool = True, ranged: bool = True, verbose: bool = False):
    """Give a command the shared options, passed to it as one ``SurgeryOptions``
    (first argument) beside its own options.

    ``where``: SESSION may be replaced by --where (and --apply); ``edits``:
    the command edits content, so --from/--to/--pos, --no-usage-reset,
    --keep-dropped-thinking apply to it (every command takes --no-backup);
    ``ranged=False``: a command that names its one target itself (its own
    required --pos or --id) takes no --from/--to/--pos range; ``verbose``:
    the command takes -v (its report has per-block detail).
    """
    takes_range = edits and ranged
    own = set() if takes_range else {"frm", "to", "pos"}

    def decorate(f):
        @functools.wraps(f)
        def command(**params):
            shared = {k: params.pop(k) for k in list(params) if k in _SHARED and k not in own}
            if shared.get("pos") is not None:
                if shared.get("frm") is not None or shared.get("to") is not None:
                    raise click.UsageError("--pos N is one position: give it or --from/--to, not both")
                shared["frm"] = shared["to"] = shared["pos"]
            logged = {k: v for k, v in {**shared, **params}.items()
                      if k not in _NOT_ARGUMENTS and v not in (None, False, ())}
            opts = SurgeryOptions(
                session=shared.get("session"), db_path=shared.get("db_path"), where=shared.get("where"),
                apply=shared.get("do_apply", False), frm=shared.get("frm"), to=shared.get("to"),
                dry_run=shared["dry_run"], fork=shared["fork"] or shared["fork_title"] is not None,
                fork_title=shared["fork_title"], usage_reset=not shared.get("no_usage_reset", False),
                keep_dropped_thinking=shared.get("keep_dropped_thinking", False),
                backup=not shared.get("no_backup", False), as_json=shared["as_json"], verbose=shared.get("verbose", False),
                arguments=logged,
            )
            _check(opts)
            return f(opts, **params)

        decorators = [click.argument("session", required=not where), db_option] + (_WHERE if where else []) + (_RANGE if takes_range else []) + _WRITE \
            + (_EDIT if edits else []) + [_JSON] + ([_VERBOSE] if verbose else [])
        for d in reversed(decorators):
            command = d(command)
        return command

    return decorate


def _check(o: SurgeryOptions) -> None:
    """Combinations of the shared options that mean nothing."""
    if o.session and o.where:
        raise click.UsageError("give a SESSION or --where, not both")
    if not o.session and not o.where:
        raise click.UsageError("Missing argument 'SESSION' (or --where \"<SQL condition>\")")
    if o.where and o.positions is not None:
        raise click.UsageError("--from/--to take a SESSION; with --where, select positions in the "
                               "condition (the view's `pos` column)")
    if o.frm is not None and o.to is not None and o.frm > o.to:
        raise click.ClickException(f"--from {o.frm} is after --to {o.to}: give the range lowest position first")
    if o.apply and o.fork:
        raise click.UsageError("--apply and --fork exclude each other (a fork needs no apply)")


def _resolve(db_path, session: str, reading: bool = False, index: bool = True):
    """(catalog, the session's original file); ``reading``: for a command
    that only reads (``read_catalog``: no new catalog for an id); ``index``:
    the file is indexed first (apply: the catalog keeps the lines the swap
    replaces; a pass that writes only a pending copy or a fork does not)."""
    conn, _ = read_catalog(db_path, session) if reading else open_catalog(db_path)
    ref = resolve_session(conn, session, mutating=True, index=index)
    if reading:
        return conn, pend.original_path(ref.path)
    # The path as the user named it, when it is one (the catalog keeps a link's path for its target too).
    named = Path(session).expanduser()
    return conn, pend.own_session_path(named if os.path.lexists(pend.session_path(named)) else ref.path)


def _csv(value: str | None) -> list[str] | None:
    if not value:
        return None
    return [s.strip() for s in value.split(",") if s.strip()]


def _run(o: SurgeryOptions, operation: str, options: dict | None = None) -> None:
    """SESSION: one surgery (and apply with --apply); --where: the bulk plan.
    ``options`` are the command's own: its declaration builds the op from them."""
    if o.where:
        _run_where(o, operation, options or {})
        return
    op = COMMANDS[operation].make_op(dict(options or {}, positions=o.positions))
    conn, orig = _resolve(o.db_path, o.session, index=o.apply)
    report = run_surgery(orig, operation, op, o.pass_options())
    if report.written and report.fork_session_id:
        from txdb.surgery.log import log_fork  # a pass that only writes a pending copy logs nothing
        log_fork(conn, report, o.arguments)
    # A pass with nothing new to change on a pending copy earlier passes left (a run
    # killed before its apply, say): --apply applies that copy, as --where does.
    earlier = not report.written and report.base == "pending copy" and not o.dry_run
    if o.apply and (report.written or earlier) and not report.fork_session_id:
        from txdb.surgery.log import apply_logged
        rep, ids = apply_logged(conn, orig, backup=o.backup)
        if o.as_json:
            echo(to_json({"surgery": report.as_dict(), "apply": rep.as_dict(), "surgery_ids": ids}))
            return
        _print_report(report, applied=True, verbose=o.verbose)
        if earlier:
            echo("--apply: applying the pending copy earlier passes left.")
        _print_apply(rep, False)
        return
    if o.as_json:
        echo(to_json(report.as_dict()))
        return
    _print_report(report, verbose=o.verbose)
    if not o.backup and report.written and not report.fork_session_id:
        echo("--no-backup: no backup was due (the original is untouched); "
             "`txdb apply --no-backup` keeps none when this copy is applied.")


def _run_where(o: SurgeryOptions, command: str, options: dict) -> None:
    """The bulk path: select, plan (one pending copy per session), optionally apply."""
    from txdb.surgery import select as sel  # only --where selects
    from txdb.surgery.log import log_fork
    conn, path = open_catalog(o.db_path)
    selection = sel.select_targets(conn, path, command, o.where)
    outcomes = sel.plan(conn, selection, command, options,
                        dataclasses.replace(o.pass_options(), arguments=dict(o.arguments, where=selection.condition)),
                        on_fork=lambda r: log_fork(conn, r, o.arguments))
    if o.apply and not o.dry_run:
        # A session this pass left unchanged may hold an earlier pass's copy (a plan
        # run first, then the same command with --apply): apply that too.
        todo = [x.path for x in outcomes if x.status == "pending" or (x.status == "unchanged" and x.pending)]
        applied = sel.apply_all(conn, todo, backup=o.backup)
        by = {a.path: a for a in applied}
        for x in outcomes:
            a = by.get(x.path)
            if a is not None:
                x.status = "applied" if a.applied else "apply-refused"
                x.error = a.error
                x.backup, x.surgery_ids = a.backup, a.surgery_ids
    refused = [x for x in outcomes if x.status in ("refused", "apply-refused")]
    if o.as_json:
        echo(to_json({
            "command": command, "view": selection.view, "where": selection.condition, "rows": selection.rows,
            "sessions": [x.as_dict() for x in outcomes], "refreshed": selection.refreshed,
            "gone": selection.gone, "subagents_skipped": selection.subagents, "dry_run": o.dry_run, "applied": sum(x.status == "applied" for x in outcomes),
            "refused": len(refused),
        }))
    else:
        _print_where(conn, command, selection, outcomes, dry_run=o.dry_run, do_apply=o.apply)
    if refused:
        raise click.exceptions.Exit(1)
