"""Reference computations the tests check the library against (test code,
not library code): the (estimate, recorded) pairs of a chain of parsed lines, computed outside the catalog the way the
catalog's views compute them inside it."""

from __future__ import annotations

from typing import Iterable

from txdb.catalog import estimate
from txdb.model.records import message_facts, message_link, record_tokens  # the library's one per-record rule


def transcript_pairs(chain: Iterable[dict]) -> list[tuple[int, int]]:
    """``(estimate, recorded)`` per assistant turn of a chain of parsed lines
    (root first), for a transcript outside the catalog. Lines without usage,
    synthetic turns and API error turns are skipped."""
    pairs: list[tuple[int, int]] = []
    seen: set[str] = set()
    running = 0
    boundary = ""  # timestamp of the latest compact boundary on the chain
    links: dict = {}
    calls: dict = {}
    for rec in chain:
        opens, link = message_link(message_facts(rec), links.get(rec.get("parentUuid") or ""), calls)
        if isinstance(rec.get("uuid"), str):
            links[rec["uuid"]] = link
        if rec.get("type") == "system" and rec.get("subtype") == "compact_boundary":
            boundary = max(boundary, rec.get("timestamp") or "")
        if rec.get("type") == "assistant":
            msg = rec.get("message") if isinstance(rec.get("message"), dict) else {}
            mid = msg.get("id")
            if (mid and mid not in seen and msg.get("model") != "<synthetic>"
                    and not rec.get("isApiErrorMessage")
                    and not estimate.before_compaction(rec.get("timestamp"), boundary)):
                seen.add(mid)
                rc = estimate.recorded_context(msg.get("usage"))
                if rc:
                    pairs.append((running, rc))
        running += record_tokens(rec, opens=opens)  # system-prompt snapshots count 0: the overhead the fit learns
    return pairs
