"""`txdb export`: the catalog's tables as files other engines read."""

from __future__ import annotations


import click

from txdb import config
from txdb.catalog.export import export_parquet
from txdb.cli.main import command, db_option
from txdb.cli.output import echo, progress_bar, terminal_safe, to_json


@command("export")
@db_option
@click.argument("directory", type=click.Path(file_okay=False))
@click.option("--format", "fmt", type=click.Choice(["parquet"]), default="parquet", show_default=True,
              help="File format (Parquet needs the extra: pip install 'txdb[parquet]', "
              "from a clone pip install -e '.[parquet]').")
@click.option("--replace", is_flag=True,
              help="Replace an earlier txdb export in DIRECTORY whole (once the new one is whole), "
              "instead of updating it.")
@click.option("--redact", is_flag=True,
              help="Mask every secret the catalog found as [REDACTED:<type>] (the catalog is not changed).")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def export(db_path, directory, fmt, replace, redact, as_json):
    """Writes DIRECTORY/<table>/project=<p>/month=<YYYY-MM>/part-0.parquet for
    records, blocks, attachments, usage, sessions, files, chain and
    surgeries (files private to you), ready for DuckDB, Spark, Trino or
    BigQuery, also over several machines' exports at once. --redact masks
    the secrets in every text column (see `secrets` in README), for an
    export others will read. Exporting again into the same DIRECTORY
    updates it: only partitions holding a session that changed since are
    written, as new part files, and _txdb_export.json (the manifest) then
    names them; the parts they replace are deleted. A folder exported with
    --redact is only updated with --redact, and without it only without.

    Example:

    \b
        txdb export exports/$(hostname) --format parquet
        txdb refresh && txdb export exports/$(hostname)   # next day: only what changed
        duckdb -c "select model, sum(output_tokens) from read_parquet('exports/*/usage/**/*.parquet', hive_partitioning=true) group by model"
    """
    with progress_bar("Exporting", not as_json, show_pos=True) as progress:
        report = export_parquet(db_path or config.default_db_path(), directory, replace=replace, progress=progress,
                                redact=redact)
    if as_json:
        echo(to_json(report.__dict__))
    else:
        echo(terminal_safe(report.summary()))
