"""The txdb command line (``txdb = "txdb.cli:cli"``): thin commands over the
library, and the only place that prints or exits.

``main`` holds the group and the catalog commands; ``surgery`` and ``serve``
are imported only when one of their commands runs (or --help lists them);
``output`` is how everything is printed.
"""

from txdb.cli.main import cli, main

__all__ = ["cli", "main"]
