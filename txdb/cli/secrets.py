"""`txdb secrets scan`: find the secrets in the catalog's new text."""

from __future__ import annotations

import click

from txdb.catalog.secrets import scan_catalog
from txdb.cli.main import command, db_option, open_catalog
from txdb.cli.output import echo, progress_bar, terminal_safe, to_json


@command("secrets", group=True)
def secrets():
    """The findings are in the `secrets` view and `txdb sessions`; `txdb
    export --redact` masks them.

    Example:

    \b
        txdb secrets scan
        txdb query "select session_id, type, found_in, count from secrets"
    """


@secrets.command()
@db_option
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def scan(db_path, as_json):
    """Scan the text no scan has read yet (new sessions, new lines) for secrets.

    Stores each finding's type, place and sha256 in secret_findings, never
    the secret itself. A rewritten session is scanned again whole.

    Example:

    \b
        txdb refresh && txdb secrets scan
    """
    conn, _ = open_catalog(db_path)
    with progress_bar("Scanning", not as_json, show_pos=True) as progress:
        report = scan_catalog(conn, progress=progress)
    if as_json:
        echo(to_json(report.__dict__))
    else:
        echo(terminal_safe(report.summary()))
