"""Nothing lost: the chain check every surgery result must pass.

``claude --resume`` rebuilds a session from its active chain (``txdb.model.chain``):
a record that falls off it is gone for the model, however intact its line
is. So a result (a pending copy, a fork) is accepted only when every record
on the original's active chain is still on the result's active chain, in
the same order, except the records the recorded passes removed on purpose
(they keep no uuid to find; their children were re-parented). Records keep
their uuid when edited; a fork's records are matched through
``forkedFrom.messageUuid``. Records the result adds (none today) may sit
anywhere.

``engine.run_surgery`` checks each result before writing it and
``pending.apply`` checks the pending copy before the swap: one check, used
by both.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from txdb.errors import SurgeryError
from txdb.model.transcript import Record, Transcript


@dataclass
class ChainLoss:
    kept: int  # records of the original's chain the result had to keep
    lost: int  # of those, how many are not on the result's chain
    first_position: int  # chain position (in the original) of the first one lost
    first_line: int  # its line number in the original
    out_of_order: bool  # none missing, but the order differs
    result_chain: int  # length of the result's active chain

    def message(self, what: str) -> str:
        if self.out_of_order:
            return (f"{what} keeps every record of the original's active chain but not in order "
                    f"(first out of place: chain position {self.first_position:,}, line {self.first_line:,})")
        return (f"{what} would lose {self.lost:,} of the {self.kept:,} records of the original's active chain "
                f"that no recorded pass removed, from chain position {self.first_position:,} "
                f"(line {self.first_line:,}) on; its active chain has {self.result_chain:,} records")


def _key(rec: Record, via_fork: bool) -> str | None:
    if via_fork:
        ff = rec.parse().get("forkedFrom")
        if isinstance(ff, dict) and isinstance(ff.get("messageUuid"), str):
            return ff["messageUuid"]
    return rec.uuid


@dataclass
class OriginalChain:
    """What the gate keeps of the original: its active chain as (uuid, line
    number) root -> leaf, and its path. Small, so that ``apply`` can let go
    of the original's bytes before it reads the pending copy."""
    path: Path | None
    records: list[tuple[str | None, int]]


def original_chain(original: Transcript) -> OriginalChain:
    return OriginalChain(original.path, [(r.uuid, original.lines[r.line].number) for r in original.chain])


def chain_loss(original: OriginalChain, result: Transcript, removed: set[str] | frozenset[str] = frozenset(),
               via_fork: bool = False) -> ChainLoss | None:
    """None when ``result`` keeps ``original``'s active chain (less ``removed``) whole and in order."""
    want = [(pos, uuid, line) for pos, (uuid, line) in enumerate(original.records) if uuid not in removed]
    have = [_key(r, via_fork) for r in result.chain]
    at: dict[str | None, int] = {}
    for i, k in enumerate(have):
        if k is not None:
            at.setdefault(k, i)
    missing = [w for w in want if w[1] not in at]
    if missing:
        pos, _uuid, line = missing[0]
        return ChainLoss(len(want), len(missing), pos, line, False, len(have))
    last = -1
    for pos, uuid, line in want:
        i = at[uuid]
        if i <= last:
            return ChainLoss(len(want), 0, pos, line, True, len(have))
        last = i
    return None


def fork_keys(t: Transcript) -> set[str]:
    """The original uuids a fork's records carry (``forkedFrom.messageUuid``)."""
    return {k for r in t.live() if (k := _key(r, True)) is not None}


def uuids(t: Transcript) -> set[str]:
    return {r.uuid for r in t.live() if r.uuid}


def recorded_removals(meta: dict | None) -> set[str]:
    """Every uuid the passes recorded in a pending copy's sidecar removed."""
    out: set[str] = set()
    for p in (meta or {}).get("passes") or []:
        if isinstance(p, dict):
            out.update(u for u in p.get("removed") or [] if isinstance(u, str))
    return out


def check_chain(original: OriginalChain, result: Transcript, removed: set[str], *, what: str,
                via_fork: bool = False) -> None:
    """Raise ``SurgeryError`` when ``result`` loses part of ``original``'s active chain."""
    loss = chain_loss(original, result, removed, via_fork)
    if loss is not None:
        hint = f"; nothing was changed (`txdb snapshot --refresh {original.path}` starts again)" \
            if original.path is not None else ""
        raise SurgeryError(loss.message(what) + hint)
