"""``python -m txdb.cli``: the same as the ``txdb`` command."""

from .main import main

main()
