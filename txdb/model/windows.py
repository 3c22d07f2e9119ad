"""The context window Claude Code runs a model in, per CLI release.

Each release carries its own model table: the same model gets 200k on one
release and 1M on a newer one, and a model a release does not know runs in
200k. Measured with each real CLI offline (its ``--output-format json``
result's ``modelUsage[model].contextWindow``, the figure its gauge and
auto-compact read; tests/test_windows_realcli.py holds the table to each
installed release). A model named with ``[1m]`` runs in 1M on every release.

``LONG_MODELS``: for each known release, the model families (GLOB patterns)
it runs in 1M; a release not listed takes the newest listed one at or before
it (before all of them: none is 1M). The SQL view ``model_windows`` is made
from this table (``catalog.db``), so ``context_gauge`` reads the same rule.
"""

from __future__ import annotations

import fnmatch

WINDOW = 200_000
LONG_WINDOW = 1_000_000

_V300 = ("claude-opus-5-5*", "claude-sonnet-5-5*", "claude-haiku-5-5*", "claude-opus-4-8*", "claude-opus-4-7*",
         "claude-fable-5-1*", "claude-mythos-5-1*")
LONG_MODELS: dict[str, tuple[str, ...]] = {
    "2.1.250": (),
    "2.1.300": _V300,
    "2.1.328": _V300 + ("claude-fable-5-2*", "claude-mythos-5-2*"),
    "2.1.332": _V300 + ("claude-fable-5-2*", "claude-mythos-5-2*"),
}


def release_key(v: str | None) -> tuple[int, ...]:
    """``2.1.328`` as (2, 1, 328); anything not a number counts 0."""
    return tuple(int(x) if x.isdigit() else 0 for x in (v or "").split("."))


def known_release(release: str | None) -> str:
    """The known release whose table ``release`` runs by: the newest at or
    before it; a session that names no release is taken as the newest."""
    known = sorted(LONG_MODELS, key=release_key)
    if not release:
        return known[-1]
    at = [k for k in known if release_key(k) <= release_key(release)]
    return at[-1] if at else known[0]


def model_window(model: str | None, release: str | None) -> int:
    """The window ``release`` runs ``model`` in."""
    m = (model or "").lower()
    if "[1m]" in m:
        return LONG_WINDOW
    base = m.split("[", 1)[0]
    if any(fnmatch.fnmatchcase(base, p) for p in LONG_MODELS[known_release(release)]):
        return LONG_WINDOW
    return WINDOW


def windows_by_release(model: str | None) -> dict[str, int]:
    """The window of ``model`` on each known release."""
    return {r: model_window(model, r) for r in sorted(LONG_MODELS, key=release_key)}
