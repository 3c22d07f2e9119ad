"""Reference computations the tests check the library against (test code,
not library code): the raw estimate of a record and the (estimate, recorded)
pairs of a chain of parsed lines, computed outside the catalog the way the
catalog's views compute them inside it."""

from __future__ import annotations

from typing import Iterable

from txdb import estimate
from txdb.policy import attachment_cost
from txdb.records import block_rows, message_content


def record_tokens(obj: dict, blocks: list[dict] | None = None) -> int:
    """Estimated context tokens a record costs when it is on the chain."""
    rtype = obj.get("type")
    if rtype == "attachment":
        return attachment_cost(obj)[0]
    if blocks is None:
        content = message_content(obj)
        blocks = block_rows(content, None) if content is not None else []
    return sum(b.get("tokens", 0) for b in blocks)


def _counts(rec: dict) -> bool:
    """Whether a chain line's tokens count toward the request estimate: the
    system-prompt snapshots are the overhead the fit learns, not messages."""
    if rec.get("type") == "attachment":
        att = rec.get("attachment")
        return not (isinstance(att, dict) and att.get("type") in ("prompt_snapshot", "deferred_tools_record"))
    return True


def transcript_pairs(chain: Iterable[dict]) -> list[tuple[int, int]]:
    """``(estimate, recorded)`` per assistant turn of a chain of parsed lines
    (root first), for a transcript outside the catalog. Lines without usage,
    synthetic turns and API error turns are skipped."""
    pairs: list[tuple[int, int]] = []
    seen: set[str] = set()
    running = 0
    boundary = ""  # timestamp of the latest compact boundary on the chain
    for rec in chain:
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
        if _counts(rec):
            running += record_tokens(rec)
    return pairs
