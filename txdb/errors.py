"""Typed errors the library raises; the CLI turns each into one line."""


class TxdbError(Exception):
    """Base class: a problem the user can fix, reported as one line."""


class SessionNotFound(TxdbError):
    pass


class AmbiguousSession(TxdbError):
    pass


class QueryError(TxdbError):
    pass


class QueryRefused(QueryError):
    """A user's query tried something other than reading (the query connection's authorizer)."""


class SurgeryError(TxdbError):
    """A surgery refused or failed; no file was changed."""


class NotASession(TxdbError):
    """A file that is not a session (a backup, a pending copy, ...) named
    where only a session will do."""


class CatalogError(TxdbError):
    """The catalog database cannot be opened (not a database, another
    program's database, a newer txdb's)."""


class NoCatalog(CatalogError):
    """A command that only reads named a catalog that does not exist (nothing was created)."""


class NoSuchTarget(TxdbError):
    """A --pos, --id or other target the session does not have."""


class NothingToWatch(TxdbError):
    """`--watch` was given no sessions folder that exists."""


class ExportError(TxdbError):
    """An export refused (its folder is in use, an optional extra is missing); nothing was written."""


class RestoreError(TxdbError):
    """A restore refused (a file the catalog cannot give back whole, a target in the way); nothing was written."""


class NothingMissing(RestoreError):
    """A restore with nothing to write: every file of the session (or of its copy) is there already."""


class PruneError(TxdbError):
    """A prune refused (a session named that has nothing gone); nothing was deleted."""
