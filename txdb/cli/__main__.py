"""``python -m txdb.cli``: the same as the ``txdb`` command."""

from txdb.cli.main import main

main()
