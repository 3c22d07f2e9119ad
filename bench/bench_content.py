"""Does the estimate follow the content, whoever changed the file?

Two parts:

- ``--loo`` (no CLI needed): leave-last-out over ../shared/corpus (real and
  generated): for each main session with a recorded turn, the fit
  (``txdb.catalog.estimate.calibrate``) without its last kept turn predicts that
  turn; prints each error and the share within 10%.
- the default: sessions the real CLI writes now (``tests/realcli/scenarios.py``
  ``work_session``, seeds the estimate was never tuned on; or ``--sessions
  DIR``), each put through, on copies: nothing; another tool's edit (every
  tool result cut in place, usage left as recorded); ``strip-all``,
  ``persist-tools --keep-recent 3``; ``rescue --apply`` to half its
  estimate, then ``undo``, then ``undo`` again (the redo). After each, the
  catalog's figure (``txdb analyze``, the catalog that saw the history)
  against what CLI 2.1.328 sends on ``--resume`` (``fake_api.billed_context``:
  the units the sessions recorded) and against a fresh catalog of the same
  bytes. Target: within 5%, never more than 2% under, and equal to fresh.

    .venv/bin/python bench/bench_content.py [--loo] [--seeds 11,12,13] [--sessions DIR]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

TXDB = [str(Path(sys.executable).parent / "txdb")]


def loo(corpus: Path) -> int:
    from txdb.catalog import db, estimate
    from txdb.catalog.ingest.store import refresh

    with tempfile.TemporaryDirectory() as tmp:
        conn = db.connect(Path(tmp) / "c.db")
        refresh(conn, [corpus / "generated", corpus / "real"])
        rows = conn.execute("SELECT f.id, f.path FROM files f JOIN sessions s ON s.file_id = f.id "
                            "WHERE s.parent_session_id IS NULL ORDER BY f.path").fetchall()
        errs = []
        for fid, path in rows:
            pairs = estimate.catalog_pairs(conn, fid)
            if not pairs:
                continue
            sp = estimate.catalog_system_prompt_tokens(conn, fid)
            r = estimate.leave_last_out(pairs, system_prompt_tokens=sp)
            if r["predicted"] is None:
                continue
            err = (r["predicted"] - r["recorded"]) / r["recorded"]
            _f, kept, rejected = estimate.calibrate(pairs, sp)
            errs.append(err)
            kind = "generated" if "/generated/" in path else "real"
            print(f"{kind:9} {Path(path).stem[:8]:8} turns {len(pairs):4} kept {len(kept):4} "
                  f"left out {len(rejected):3}  predicted {r['predicted']:8} recorded {r['recorded']:8.0f} {err:+7.1%}")
        ok = sum(abs(e) <= 0.10 for e in errs)
        print(f"\nleave-last-out within 10%: {ok} of {len(errs)} ({ok / len(errs):.0%}); "
              f"mean |err| {sum(map(abs, errs)) / len(errs):.1%}")
    return 0


def txdb(args: list[str], cwd: Path) -> dict:
    p = subprocess.run(TXDB + args + ["--json"], cwd=cwd, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        raise RuntimeError((p.stderr or p.stdout).strip()[-300:])
    return json.loads(p.stdout)


def estimate_of(path: Path, db: Path, cwd: Path) -> int:
    return txdb(["analyze", str(path), "--db", str(db)], cwd)["estimate"]["calibrated"]


def cut_tool_results(path: Path) -> int:
    """Another tool's edit: every tool result's content replaced in place by a
    short note, usage as recorded. Returns how many it cut."""
    out, n = [], 0
    for raw in path.read_bytes().splitlines():
        d = json.loads(raw)
        c = (d.get("message") or {}).get("content") if isinstance(d, dict) else None
        if d.get("type") == "user" and isinstance(c, list):
            for b in c:
                if isinstance(b, dict) and b.get("type") == "tool_result":
                    b["content"] = "[output removed]"
                    n += 1
            if "toolUseResult" in d:
                d["toolUseResult"] = "[output removed]"
        out.append(json.dumps(d, ensure_ascii=False, separators=(",", ":")).encode())
    path.write_bytes(b"\n".join(out) + b"\n")
    return n


def copy_session(src: Path, dest_dir: Path) -> Path:
    dest_dir.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dest_dir / src.name)
    side = src.with_suffix("")
    if side.is_dir():
        shutil.copytree(side, dest_dir / side.name)
    return dest_dir / src.name


def sent_of(path: Path, binary) -> int | None:
    from realcli import resume
    from realcli.fake_api import billed_context

    r = resume(path, ping="bench-ping", binary=binary, timeout=240)
    return billed_context(r.main_request) if r.loaded and not r.compacted else None


def make_sessions(seeds: list[int], root: Path, binary) -> list[Path]:
    from realcli import Sandbox
    from realcli.scenarios import export, work_session

    out = []
    for seed in seeds:
        with Sandbox(binary, root / f"make-{seed}", project_name=f"work{seed}") as sb:
            f = work_session(sb, seed, prompts=2 + seed % 4, reads=4 + seed % 7)
            out.append(export(f, root / "sessions"))
    return out


def run_session(src: Path, binary, root: Path, rows: list) -> None:
    def case(name: str, prepare):
        work = root / f"{name}-{src.stem[:8]}"
        path = copy_session(src, work / "projects" / src.parent.name)
        db = work / "history.db"
        estimate_of(path, db, work)  # the catalog sees the session first
        prepare(path, db, work)
        est = estimate_of(path, db, work)
        fresh = estimate_of(path, work / "fresh.db", work)
        sent = sent_of(path, binary)
        ratio = est / sent if sent else float("nan")
        rows.append((src.stem[:8], name, est, fresh, sent, ratio))
        print(f"{src.stem[:8]:8} {name:22} est {est:8} fresh {fresh:8} sent {sent or '':>8} {ratio:6.3f}"
              + ("" if est == fresh else "  (differs from fresh)"), flush=True)

    def nothing(path, db, work):
        pass

    def foreign(path, db, work):
        cut_tool_results(path)

    def surgery(*args):
        def run(path, db, work):
            txdb([args[0], str(path), "--db", str(db), *args[1:]], work)
            txdb(["apply", str(path), "--db", str(db)], work)
        return run

    def rescue(undos: int):
        def run(path, db, work):
            target = estimate_of(path, db, work) // 2
            txdb(["rescue", str(path), "--db", str(db), "--target", str(target), "--apply"], work)
            for _ in range(undos):
                txdb(["undo", str(path), "--db", str(db)], work)
        return run

    case("untouched", nothing)
    case("foreign-edit", foreign)
    case("strip-all", surgery("strip-all"))
    case("persist-tools-3", surgery("persist-tools", "--keep-recent", "3"))
    case("rescue-half", rescue(0))
    case("rescue-undo", rescue(1))
    case("rescue-undo-redo", rescue(2))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", type=Path, default=REPO.parent / "shared" / "corpus")
    ap.add_argument("--loo", action="store_true", help="leave-last-out over the corpus only")
    ap.add_argument("--seeds", default="11,12,13", help="work_session seeds of the sessions to make")
    ap.add_argument("--sessions", type=Path, default=None, help="a folder of sessions instead (*/<id>.jsonl)")
    args = ap.parse_args()
    if args.loo:
        return loo(args.corpus)
    from realcli import CLAUDE_CODE_VERSION
    from realcli.install import cached_install

    binary, reason = cached_install(CLAUDE_CODE_VERSION)
    if binary is None:
        print(f"real CLI unavailable: {reason}")
        return 1
    rows: list = []
    with tempfile.TemporaryDirectory(prefix="bench-content-") as tmp:
        root = Path(tmp)
        sessions = (sorted(args.sessions.glob("*/*.jsonl")) if args.sessions
                    else make_sessions([int(s) for s in args.seeds.split(",") if s], root, binary))
        for src in sessions:
            try:
                run_session(src, binary, root, rows)
            except Exception as e:  # noqa: BLE001 - a bench reports, never stops
                print(f"{src.stem[:8]} error: {str(e)[:200]}")
    good = [r for r in rows if r[4]]
    ok = sum(0.98 <= r[5] <= 1.05 for r in good)
    same = sum(r[2] == r[3] for r in rows)
    if good:
        worst = max(good, key=lambda r: abs(r[5] - 1))
        print(f"\n{len(good)} results: within [-2%, +5%] {ok}; worst {worst[5]:.3f} ({worst[0]} {worst[1]}); "
              f"lowest {min(r[5] for r in good):.3f}; equal to a fresh catalog: {same} of {len(rows)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
