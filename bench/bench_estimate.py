"""txdb's context estimate against what the API recorded and what the CLI sends.

Per session of ../shared/corpus (generated + real), prints:

- ``rec``: the context the API recorded for the last turn (the gauge:
  input + cache_read + cache_creation);
- ``raw``: chars/4 (txdb.model.tokens) of the chain before that turn plus the
  latest system-prompt snapshot, and its error against ``rec``;
- ``cal``: the calibrated estimate of that same request, fitted on every
  recorded turn *but* the last (leave-last-out, txdb.catalog.estimate), its error;
- ``resume``: chars/4 of the request the real CLI sends on ``--resume``
  (system + tools + messages of the oracle's recorded request; needs the
  pinned CLI, skipped with ``--no-cli``), and ``cal_full``: the calibrated
  estimate of the whole chain (what ``txdb analyze`` reports).

Then the mean absolute percentage error of raw and calibrated, per corpus.
The goal: within 10% of the recorded tokens. Last, the medians of the
per-session fits (factor, overhead as a share of the system-prompt
snapshot, overhead without one): the source of ``txdb.catalog.estimate.prior``,
used where a session has no recorded turn to fit on.

    .venv/bin/python bench/bench_estimate.py [--no-cli] [--corpus ../shared/corpus]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from txdb.catalog import db, estimate  # noqa: E402
from txdb.catalog.ingest.store import refresh  # noqa: E402


def request_chars(body: dict | None) -> int | None:
    if not body:
        return None
    dump = lambda x: len(json.dumps(x, ensure_ascii=False, separators=(",", ":"))) if x is not None else 0  # noqa: E731
    return dump(body.get("system")) + dump(body.get("tools")) + dump(body.get("messages"))


def resume_request_tokens(path: Path, binary) -> int | None:
    from realcli import resume

    try:
        r = resume(path, ping="bench-ping", binary=binary, timeout=240)
    except Exception:  # noqa: BLE001 - a bench reports, never stops
        return None
    chars = request_chars(r.main_request) if r.loaded else None
    return None if chars is None else chars // 4


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", type=Path, default=REPO.parent / "shared" / "corpus")
    ap.add_argument("--no-cli", action="store_true", help="skip resuming each session with the real CLI")
    args = ap.parse_args()
    if not args.corpus.is_dir():
        print(f"no corpus at {args.corpus}")
        return 1
    binary = None
    if not args.no_cli:
        from realcli.install import cached_install
        from realcli import CLAUDE_CODE_VERSION

        binary, reason = cached_install(CLAUDE_CODE_VERSION)
        if binary is None:
            print(f"(real CLI unavailable: {reason}; resume column left empty)")

    with tempfile.TemporaryDirectory() as tmp:
        conn = db.connect(Path(tmp) / "c.db")
        t0 = time.perf_counter()
        refresh(conn, [args.corpus / "generated", args.corpus / "real"])
        print(f"catalog refreshed in {time.perf_counter() - t0:.1f}s")
        rows = conn.execute(
            "SELECT f.id, f.path FROM files f JOIN sessions s ON s.file_id = f.id "
            "WHERE s.parent_session_id IS NULL ORDER BY f.path"
        ).fetchall()
        hdr = (f"{'corpus':9} {'session':34} {'turns':>5} {'rec':>8} {'raw':>8} {'raw err':>8} "
               f"{'cal':>8} {'cal err':>8} {'method':>6} {'factor':>6} {'overhd':>7} {'resume':>8} {'cal_full':>8}")
        print(hdr)
        print("-" * len(hdr))
        stats: dict[str, dict[str, list[float]]] = {}
        for fid, path in rows:
            p = Path(path)
            kind = "generated" if "/generated/" in path else "real"
            pairs = estimate.catalog_pairs(conn, fid)
            if not pairs:
                continue
            sp = estimate.catalog_system_prompt_tokens(conn, fid)
            loo = estimate.leave_last_out(pairs, *estimate.prior(sp))
            rec = loo["recorded"]
            raw = loo["estimate"] + sp
            cal = loo["predicted"]
            f = loo["fit"]
            full = estimate.session_estimate(conn, fid)["calibrated"]
            res = resume_request_tokens(p, binary) if binary else None
            raw_err = abs(raw - rec) / rec
            cal_err = abs(cal - rec) / rec
            s = stats.setdefault(kind, {"raw": [], "cal": [], "cal_fitted": [], "resume": [], "fits": []})
            full_fit = estimate.fit(pairs)
            if full_fit.method == "lsq":
                s["fits"].append((full_fit.factor, full_fit.overhead, sp))
            s["raw"].append(raw_err)
            s["cal"].append(cal_err)
            if f.turns_used >= 2:
                s["cal_fitted"].append(cal_err)
            if res:
                s["resume"].append(abs(full - res) / res)
            name = (p.parent.name[-12:] + "/" + p.stem[:21]) if p.stem != "full" else "/".join(p.parts[-4:-1])
            print(f"{kind:9} {name[:34]:34} {len(pairs):5} {rec:8.0f} {raw:8.0f} {raw_err:8.1%} {cal:8} "
                  f"{cal_err:8.1%} {f.method:>6} {f.factor:6.2f} {f.overhead:7.0f} "
                  f"{res if res is not None else '':>8} {full:8}")
        print()
        for kind, s in stats.items():
            mape = lambda xs: f"{sum(xs) / len(xs):6.1%} (n={len(xs)}, max {max(xs):.1%})" if xs else "   n/a"  # noqa: E731
            print(f"{kind:9} MAPE vs recorded last turn: raw chars/4 {mape(s['raw'])}")
            print(f"{'':9}                             calibrated {mape(s['cal'])}")
            print(f"{'':9}          calibrated, >=2 turns to fit {mape(s['cal_fitted'])}")
            fits = s["fits"]
            if fits:
                med = lambda xs: sorted(xs)[len(xs) // 2] if xs else float("nan")  # noqa: E731
                share = [o / p for _, o, p in fits if p > 0]
                print(f"{'':9}  prior: median factor {med([f for f, _, _ in fits]):.2f} over {len(fits)} fits; "
                      f"overhead / snapshot {med(share):.2f} (n={len(share)}); overhead without snapshot "
                      f"{med([o for _, o, p in fits if p == 0]):,.0f} (n={sum(p == 0 for _, _, p in fits)})")
            if s["resume"]:
                print(f"{'':9}  calibrated full chain vs resume request chars/4 {mape(s['resume'])}")
        conn.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
