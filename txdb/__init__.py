"""txdb: a SQLite catalog, query tool and safe surgeon for Claude Code sessions."""

__version__ = "0.1.0"
