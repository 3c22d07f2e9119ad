"""Surgery benchmarks for txdb: strip-all on a ~100 MB session, and bulk
``--where`` plans and applies across the benchmark corpus.

    .venv/bin/python bench/bench_surgery.py [--corpus DIR ...] [--quick] [--size-mb N] [--keep]

1. A ~100 MB session (25 MB with --quick, N MB with --size-mb) is built by ``build_big_session``
   of bench/bench_refresh.py (generated-corpus sessions repeated with fresh
   uuids, each pass chained below the previous leaf). On it:
   - ``run_surgery(..., strip-all)`` in-process: load, strip tools and
     thinking, preserved-thinking check, usage reset, write the pending copy
     (and the same with ``dry_run``: no write), median of 3;
   - ``run_surgery(..., persist-tools)`` in-process and ``txdb persist-tools PATH``
     (sidecars + pending copy), printed beside strip-all;
   - ``txdb strip-all PATH`` and ``txdb apply PATH`` as whole processes
     (catalog already indexed; apply includes its 400 ms settle, the verify
     of both files, the atomic swap and the catalog refresh of the new file);
   - the targets' baseline: reading the file and ``orjson.loads`` of every
     line (no objects kept). Printed side by side: strip-all's time over
     that (target at most 10x; for ``txdb strip-all PATH`` too, each run
     paired with a baseline run, wall-clock and CPU) and the peak RSS of
     ``txdb strip-all PATH`` over the file's size (target at most 2x);
   - a rewrite baseline: no peer tool ships a bulk/query-driven surgery path to
     compare with, so the ratio is against a *naive rewrite* of the same
     file: read every line, ``json.loads``, ``json.dumps`` (compact, UTF-8),
     write, with no chain, no checks and no edit at all (stdlib json; an
     orjson variant is printed too). It is the floor any tool that
     re-serialises every line pays; txdb re-serialises only changed lines but
     also builds the chain, checks pairs and estimates tokens.
   - ``replace-images`` (a transcript for every distinct image, in-process
     and as a whole process), ``compact --before`` (at the first user
     prompt past the middle of the chain; the new session file is deleted
     after each run) and ``compact-range`` (from the first user prompt past
     a quarter of the chain to the last position before that cut that
     splits no tool call; in-process and as a whole process, its saved
     records removed after each run);
2. The benchmark corpus (../shared/corpus real + generated) copied to a
   scratch folder in Claude Code's layout, indexed, then for each bulk
   command: the plan (``txdb <cmd> --where ...`` as a whole process: query,
   stale check, one pending copy per session) and ``txdb apply
   --all-pending`` (one shared settle, every check per file, surgeries log,
   catalog refresh). One run each (apply changes the files).

Results go to bench/out/surgery.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench_refresh import (  # noqa: E402
    DEFAULT_CORPUS, LAST_CPU, TXDB, build_big_session, compile_txdb, mb, median, normalise_corpus, rm_db, run_proc,
    say, session_files,
)

from txdb.surgery import images, ops  # noqa: E402
from txdb.surgery.compact import compact_before  # noqa: E402
from txdb.surgery.compact_range import CompactRangeOp  # noqa: E402
from txdb.surgery.ops import tool_spans  # noqa: E402
from txdb.model import sidecar as sc  # noqa: E402
from txdb.surgery import pending as pend  # noqa: E402
from txdb.surgery import persist as persist_mod  # noqa: E402
from txdb.surgery.engine import PassOptions, run_surgery  # noqa: E402
from txdb.model.transcript import Transcript  # noqa: E402

BULK = [
    ("strip-attachments", ["--where", "type = 'task_reminder' and age_days > 7"]),
    ("strip-tools", ["--where", "tool_name = 'Read' and result_tokens > 10000", "--only-results"]),
    ("strip-all", ["--where", "kind in ('tool_result', 'thinking') and tokens > 1000"]),
]


def read_and_parse(src: Path) -> None:
    loads = orjson.loads
    with open(src, "rb") as fh:
        for line in fh:
            if line.strip():
                loads(line)


def naive_rewrite(src: Path, dst: Path, loads, dumps) -> None:
    with open(src, "rb") as fh, open(dst, "wb") as out:
        for line in fh:
            if line.strip():
                out.write(dumps(loads(line)) + b"\n")


def _json_dumps(o) -> bytes:
    return json.dumps(o, ensure_ascii=False, separators=(",", ":")).encode()


def timed(fn, reps: int) -> list[float]:
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def bench_big(corpora: list[Path], scratch: Path, reps: int, target_mb: int, results: dict) -> None:
    say(f"\n== strip-all on a ~{target_mb} MB session ==")
    gen = [c for c in corpora if c.name == "generated"] or corpora
    srcs = sorted((p for c in gen for p in session_files(c) if "subagents" not in p.parts),
                  key=lambda p: -p.stat().st_size)
    root = scratch / "big"
    proj = root / "-bench-big"
    proj.mkdir(parents=True)
    t0 = time.perf_counter()
    tmp = proj / "building.jsonl"
    info = build_big_session(srcs, tmp, target_mb * 1_000_000)
    big = proj / f"{info['session_id']}.jsonl"
    tmp.rename(big)
    size = big.stat().st_size
    say(f"  built {mb(size):.1f} MB ({info['passes']} passes over {len(srcs)} sessions) in "
        f"{time.perf_counter() - t0:.1f}s")
    out: dict = {"bytes": size}
    results["big"] = out

    def clean():
        for p in (pend.pending_path(big), pend.meta_path(big)):
            if p.exists():
                p.unlink()

    t_load = timed(lambda: Transcript.load(big), reps)
    out["load_seconds"] = median(t_load)
    say(f"  load (parse + chain): {median(t_load):.2f}s")

    def strip(dry):
        clean()
        rep = run_surgery(big, "strip-all", lambda t, o: ops.strip_all(t), PassOptions(dry_run=dry))
        out["report"] = {k: rep.as_dict()[k] for k in ("changed_lines", "lines", "bytes_before", "bytes_after",
                                                       "tokens_before", "tokens_after")}
    t_dry = timed(lambda: strip(True), reps)
    # The targets' baseline is timed right before each write run, so that a
    # busy machine slows both alike.
    t_parse, t_write = [], []
    for _ in range(reps):
        t_parse += timed(lambda: read_and_parse(big), 1)
        t_write += timed(lambda: strip(False), 1)
    out["strip_all_dry_run_seconds"] = median(t_dry)
    out["strip_all_seconds"] = median(t_write)
    r = out["report"]
    say(f"  run_surgery strip-all (in-process, writes the pending copy): {median(t_write):.2f}s "
        f"({mb(size) / median(t_write):.0f} MB/s); dry run {median(t_dry):.2f}s")
    say(f"    {r['changed_lines']:,} of {r['lines']:,} lines rewritten; {mb(r['bytes_before']):.1f} -> "
        f"{mb(r['bytes_after']):.1f} MB; est. tokens {r['tokens_before']:,} -> {r['tokens_after']:,}")

    # persist-tools: the same walk, plus one sidecar file per moved result
    sidecars = proj / info["session_id"]

    def persist(dry):
        clean()
        shutil.rmtree(sidecars, ignore_errors=True)
        rep = run_surgery(big, "persist-tools", persist_mod.PersistOp(persist_mod.Selection(kinds=("tool",))),
                          PassOptions(dry_run=dry))
        res = rep.result
        out["persist_report"] = {"changed_lines": rep.changed_lines, "results": res["persisted"]["tool"],
                                 "chars_moved": res["chars_moved"], "bytes_after": rep.bytes_after,
                                 "tokens_after": rep.tokens_after}
    t_persist = timed(lambda: persist(False), reps)
    out["persist_tools_seconds"] = median(t_persist)
    pr = out["persist_report"]
    say(f"  run_surgery persist-tools (in-process, sidecars + pending copy): {median(t_persist):.2f}s "
        f"(strip-all {median(t_write):.2f}s); {pr['results']:,} results, {mb(pr['chars_moved']):.1f} M chars "
        f"to sidecars; {mb(size):.1f} -> {mb(pr['bytes_after']):.1f} MB; est. tokens -> {pr['tokens_after']:,}")
    clean()
    shutil.rmtree(sidecars, ignore_errors=True)

    naive = scratch / "naive.jsonl"
    t_naive = timed(lambda: naive_rewrite(big, naive, json.loads, _json_dumps), reps)
    t_naive_or = timed(lambda: naive_rewrite(big, naive, orjson.loads, orjson.dumps), reps)
    naive.unlink()
    out["naive_json_seconds"] = median(t_naive)
    out["naive_orjson_seconds"] = median(t_naive_or)
    out["ratio_vs_naive_json"] = median(t_write) / median(t_naive)
    out["ratio_vs_naive_orjson"] = median(t_write) / median(t_naive_or)
    say(f"  baseline (no peer ships this): naive rewrite json.loads+json.dumps of every line "
        f"{median(t_naive):.2f}s -> txdb/naive = {out['ratio_vs_naive_json']:.2f}x; "
        f"with orjson {median(t_naive_or):.2f}s -> {out['ratio_vs_naive_orjson']:.2f}x")

    # whole processes against an indexed catalog
    db = scratch / "big.db"
    rm_db(db)
    dt, peak, rc, err = run_proc([TXDB, "refresh", "--root", str(root), "--db", str(db)])
    if rc:
        raise SystemExit(f"refresh failed: {err}")
    bench_images_compact(big, scratch, db, reps, out)  # before the apply below strips the session
    bench_rescue(big, db, reps, out)
    clean()
    dt_p, rss_p, rc, err = run_proc([TXDB, "persist-tools", str(big), "--db", str(db)])
    if rc:
        raise SystemExit(f"persist-tools failed: {err}")
    out.update({"cli_persist_tools_seconds": dt_p, "cli_persist_tools_peak_rss": rss_p})
    clean()
    shutil.rmtree(sidecars, ignore_errors=True)
    # The whole command as a user runs it, each run paired with the baseline
    # (wall-clock and user + system CPU: on a shared machine the CPU ratio is
    # the steadier one; the wall-clock gap to the in-process run is mostly
    # waiting for a core).
    runs = []
    for _ in range(reps):
        clean()
        c0 = os.times()
        p0 = time.perf_counter()
        read_and_parse(big)
        p_wall, c1 = time.perf_counter() - p0, os.times()
        p_cpu = (c1.user + c1.system) - (c0.user + c0.system)
        dt_s, rss_s, rc, err = run_proc([TXDB, "strip-all", str(big), "--db", str(db)])
        if rc:
            raise SystemExit(f"strip-all failed: {err}")
        runs.append((dt_s, LAST_CPU[0], rss_s, p_wall, p_cpu))
    dt_s, cpu_s, rss_s = (median([r[i] for r in runs]) for i in range(3))
    out.update({"cli_strip_all_cpu_seconds": cpu_s,
                "cli_strip_all_vs_parse": median([r[0] / r[3] for r in runs]),
                "cli_strip_all_cpu_vs_parse": median([r[1] / r[4] for r in runs])})
    dt_a, rss_a, rc, err = run_proc([TXDB, "apply", str(big), "--db", str(db)])
    if rc:
        raise SystemExit(f"apply failed: {err}")
    out.update({"cli_strip_all_seconds": dt_s, "cli_strip_all_peak_rss": rss_s, "cli_apply_seconds": dt_a,
                "cli_apply_peak_rss": rss_a, "catalog_refresh_seconds": dt})
    say(f"  txdb strip-all PATH (whole process): {dt_s:.2f}s, cpu {cpu_s:.2f}s, peak RSS {mb(rss_s):.0f} MB; "
        f"over read+parse: {out['cli_strip_all_vs_parse']:.1f}x wall-clock, "
        f"{out['cli_strip_all_cpu_vs_parse']:.1f}x CPU (median of {reps} paired runs; target <= 10x)")
    say(f"  txdb persist-tools PATH (whole process): {dt_p:.2f}s, peak RSS {mb(rss_p):.0f} MB "
        f"({rss_p / size:.2f}x the file)")
    out["read_parse_seconds"] = median(t_parse)
    out["strip_all_vs_parse"] = median([w / p for w, p in zip(t_write, t_parse)])
    out["cli_peak_vs_size"] = rss_s / size
    say("  strip-all against the baseline (read the file, orjson.loads every line):")
    say(f"    time: run_surgery strip-all {median(t_write):.2f}s vs read+parse {median(t_parse):.2f}s: "
        f"{out['strip_all_vs_parse']:.1f}x (median of the paired runs; target <= 10x)")
    say(f"    memory: txdb strip-all PATH peak RSS {mb(rss_s):.0f} MB vs file {mb(size):.0f} MB = "
        f"{out['cli_peak_vs_size']:.2f}x (target <= 2x)")
    say(f"  txdb apply PATH (whole process; 0.4 s settle, verify x2, swap, catalog refresh of the new file): "
        f"{dt_a:.2f}s, peak RSS {mb(rss_a):.0f} MB")


def _is_prompt(r) -> bool:
    return r.type == "user" and isinstance((r.parse().get("message") or {}).get("content"), str)


def compact_cut(t: Transcript) -> int:
    """compact --before's cut: the first user prompt past the middle of the chain."""
    return next((r.pos for r in t.chain[len(t.chain) // 2:] if _is_prompt(r)), len(t.chain) // 2)


def range_spans(t: Transcript, cut: int) -> tuple[int, int, int, int]:
    """compact-range's two spans, (a, b) and the widest (wa, wb).

    (a, b): from the first user prompt past a quarter of the chain to the
    last position before ``cut`` that splits no tool call. The widest: from
    the first user prompt to the last position before the leaf that splits
    no tool call: one saved file per record, thousands on a long chain,
    where writing the files is most of the pass."""
    a = next(r.pos for r in t.chain[len(t.chain) // 4:] if _is_prompt(r))
    spans = tool_spans(t)
    b = max((x for x in range(a + 1, cut) if all((a <= u and r <= x) or r < a or u > x for u, r, _ in spans)),
            default=a)
    wa = next(r.pos for r in t.chain if _is_prompt(r))
    ends: dict[int, int] = {}
    for u, r, _ in spans:
        ends[u] = max(r, ends.get(u, r))
    wb, reach = wa, wa
    for x in range(wa, len(t.chain) - 2):
        reach = max(reach, ends.get(x, x))
        if reach <= x:
            wb = x
    return a, b, wa, wb


def bench_images_compact(big: Path, scratch: Path, db: Path, reps: int, out: dict) -> None:
    """replace-images (a transcript for every distinct image) and compact --before
    (cut at the first user prompt past the middle of the chain) on the big session."""
    say("  -- replace-images, compact --before and compact-range on the same session --")

    def clean():
        for p in (pend.pending_path(big), pend.meta_path(big)):
            if p.exists():
                p.unlink()
    t = Transcript.load(big)
    t0 = time.perf_counter()
    refs = images.list_images(t)
    t_list = time.perf_counter() - t0
    hashes = sorted({r.sha256 for r in refs if r.sha256})
    tdir = scratch / "transcripts"
    tdir.mkdir(exist_ok=True)
    for h in hashes:
        (tdir / f"{h}.txt").write_text(f"A screenshot ({h[:8]}): a terminal with three lines of output.\n")
    cut = compact_cut(t)
    del t
    say(f"    list_images: {len(refs):,} images ({len(hashes):,} distinct) in {t_list:.2f}s")
    last: dict = {}

    def replace():
        clean()
        rep = run_surgery(big, "replace-images", lambda tt, o: images.replace_images(tt, tdir))
        last["replace"] = rep
    t_rep = timed(replace, reps)
    r = last["replace"]
    out["replace_images_seconds"] = median(t_rep)
    out["replace_images"] = {"images": r.result["images"], "replaced": r.result["replaced"],
                             "bytes_before": r.bytes_before, "bytes_after": r.bytes_after,
                             "tokens_before": r.tokens_before, "tokens_after": r.tokens_after}
    say(f"    run_surgery replace-images (in-process, writes the pending copy): {median(t_rep):.2f}s; "
        f"{r.result['replaced']:,} of {r.result['images']:,} images replaced; {mb(r.bytes_before):.1f} -> "
        f"{mb(r.bytes_after):.1f} MB; est. tokens {r.tokens_before:,} -> {r.tokens_after:,}")
    clean()
    dt, rss, rc, err = run_proc([TXDB, "replace-images", str(big), "--dir", str(tdir), "--db", str(db)])
    if rc:
        raise SystemExit(f"replace-images failed: {err}")
    clean()
    out.update({"cli_replace_images_seconds": dt, "cli_replace_images_peak_rss": rss})
    say(f"    txdb replace-images PATH --dir D (whole process): {dt:.2f}s, peak RSS {mb(rss):.0f} MB")

    def compact():
        rep = run_surgery(big, "compact", lambda tt, o: compact_before(tt, cut, source=str(big)),
                          PassOptions(fork=True))
        last["compact"] = rep
        Path(rep.target).unlink()
    t_cmp = timed(compact, reps)
    c = last["compact"]
    out["compact_before"] = {"before": cut, "seconds": median(t_cmp), "bytes_after": c.bytes_after,
                             "kept": c.result["kept"], "summarized": c.result["summarized"],
                             "tokens_before": c.tokens_before, "tokens_after": c.tokens_after}
    say(f"    run_surgery compact --before {cut:,} (in-process, writes the new session): {median(t_cmp):.2f}s; "
        f"{c.result['summarized']:,} records summarised, {c.result['kept']:,} kept; new file "
        f"{mb(c.bytes_after):.1f} MB; est. tokens {c.tokens_before:,} -> {c.tokens_after:,}")

    t = Transcript.load(big)
    a, b, wa, wb = range_spans(t, cut)
    folder = sc.session_dir(big, t.session_id) / "persisted" / "message"
    del t

    def compact_range():
        clean()
        shutil.rmtree(folder, ignore_errors=True)
        last["range"] = run_surgery(big, "compact-range", CompactRangeOp(a, b, "bench"))
    t_rng = timed(compact_range, reps)
    g = last["range"]
    out["compact_range"] = {"from": a, "to": b, "seconds": median(t_rng), "records": g.result["records"],
                            "bytes_before": g.bytes_before, "bytes_after": g.bytes_after,
                            "tokens_before": g.tokens_before, "tokens_after": g.tokens_after}
    say(f"    run_surgery compact-range --from {a:,} --to {b:,} (in-process, writes the pending copy and "
        f"{g.result['records']:,} files): {median(t_rng):.2f}s; {mb(g.bytes_before):.1f} -> "
        f"{mb(g.bytes_after):.1f} MB; est. tokens {g.tokens_before:,} -> {g.tokens_after:,}")
    def wide_range():
        clean()
        shutil.rmtree(folder, ignore_errors=True)
        last["wide"] = run_surgery(big, "compact-range", CompactRangeOp(wa, wb, "bench"))
    t_wide = timed(wide_range, reps)
    w = last["wide"]
    out["compact_range_wide"] = {"from": wa, "to": wb, "seconds": median(t_wide), "records": w.result["records"]}
    say(f"    run_surgery compact-range --from {wa:,} --to {wb:,} (the widest span; {w.result['records']:,} files): "
        f"{median(t_wide):.2f}s")
    clean()
    shutil.rmtree(folder, ignore_errors=True)
    dt, rss, rc, err = run_proc([TXDB, "compact-range", str(big), "--from", str(a), "--to", str(b),
                                 "--db", str(db)])
    if rc:
        raise SystemExit(f"compact-range failed: {err}")
    clean()
    shutil.rmtree(folder, ignore_errors=True)
    out.update({"cli_compact_range_seconds": dt, "cli_compact_range_peak_rss": rss})
    say(f"    txdb compact-range PATH --from {a:,} --to {b:,} (whole process): {dt:.2f}s, "
        f"peak RSS {mb(rss):.0f} MB ({rss / g.bytes_before:.2f}x the file)")


RESCUE_TARGET = 150_000


def bench_rescue(big: Path, db: Path, reps: int, out: dict) -> None:
    """rescue --target 150000 on the big session (its recorded context passed 200k, so
    the default target is the 1M window's and asks nothing of it)."""
    from txdb.surgery.rescue import RescueOp

    sdir = sc.session_dir(big)

    def clean():
        for p in (pend.pending_path(big), pend.meta_path(big)):
            if p.exists():
                p.unlink()
        for sub in ("tool-results", "persisted"):
            shutil.rmtree(sdir / sub, ignore_errors=True)
    last: dict = {}

    def rescue():
        clean()
        last["rescue"] = run_surgery(big, "rescue", RescueOp(RESCUE_TARGET))
    t_res = timed(rescue, reps)
    g = last["rescue"]
    steps = [(s["step"], s["tokens_after"]) for s in g.result["steps"]]
    out["rescue"] = {"seconds": median(t_res), "target": g.result["target"], "steps": steps,
                     "bytes_before": g.bytes_before, "bytes_after": g.bytes_after,
                     "tokens_before": g.tokens_before, "tokens_after": g.tokens_after}
    say(f"    run_surgery rescue (--target {g.result['target']:,}; in-process, writes the pending copy "
        f"and its sidecars): {median(t_res):.2f}s; steps {steps}; {mb(g.bytes_before):.1f} -> "
        f"{mb(g.bytes_after):.1f} MB; est. tokens {g.tokens_before:,} -> {g.tokens_after:,}")
    clean()
    dt, rss, rc, err = run_proc([TXDB, "rescue", str(big), "--target", str(RESCUE_TARGET), "--db", str(db)])
    if rc:
        raise SystemExit(f"rescue failed: {err}")
    clean()
    out.update({"cli_rescue_seconds": dt, "cli_rescue_peak_rss": rss})
    say(f"    txdb rescue PATH (whole process): {dt:.2f}s, peak RSS {mb(rss):.0f} MB "
        f"({rss / g.bytes_before:.2f}x the file)")


def bench_bulk(corpora: list[Path], scratch: Path, results: dict) -> None:
    say("\n== bulk --where across the benchmark corpus ==")
    projects = scratch / "projects"
    normalise_corpus(corpora, projects)
    files = session_files(projects)
    total = sum(p.stat().st_size for p in files)
    db = scratch / "corpus.db"
    rm_db(db)
    dt, _, rc, err = run_proc([TXDB, "refresh", "--root", str(projects), "--db", str(db)])
    if rc:
        raise SystemExit(f"refresh failed: {err}")
    say(f"  corpus: {len(files)} files, {mb(total):.1f} MB; indexed in {dt:.2f}s")
    out: dict = {"files": len(files), "bytes": total, "runs": []}
    results["bulk"] = out
    env = dict(os.environ, TXDB_DB=str(db))
    for cmd, args in BULK:
        t0 = time.perf_counter()
        p = subprocess.run([TXDB, cmd, *args, "--json"], capture_output=True, env=env)
        t_plan = time.perf_counter() - t0
        if p.returncode not in (0, 1):
            raise SystemExit(f"{cmd} failed: {p.stderr.decode()[-500:]}")
        plan = json.loads(p.stdout)
        sessions = plan["sessions"]
        pending = [s for s in sessions if s["status"] == "pending"]
        t0 = time.perf_counter()
        a = subprocess.run([TXDB, "apply", "--all-pending", "--json"], capture_output=True, env=env)
        t_apply = time.perf_counter() - t0
        applied = json.loads(a.stdout) if a.stdout.strip() else []
        saved = sum(s["tokens_before"] - s["tokens_after"] for s in sessions if s["tokens_before"] is not None)
        row = {"command": cmd, "args": args, "rows": plan["rows"], "sessions": len(sessions),
               "pending": len(pending), "changed": sum(s["changed"] for s in sessions),
               "refused": plan["refused"], "plan_seconds": t_plan, "apply_seconds": t_apply,
               "applied": sum(1 for x in applied if x["applied"]),
               "apply_refused": sum(1 for x in applied if x["error"]), "est_tokens_saved": saved}
        out["runs"].append(row)
        say(f"  {cmd} {' '.join(args)}")
        say(f"    plan: {row['rows']} rows, {row['sessions']} sessions, {row['changed']} targets changed, "
            f"~{saved:,} est. tokens saved: {t_plan:.2f}s (whole process)")
        say(f"    apply --all-pending: {row['applied']} applied, {row['apply_refused']} refused: {t_apply:.2f}s "
            f"(one 0.4 s settle for all)")
    c = sqlite3.connect(str(db))
    out["surgeries_logged"] = c.execute("SELECT count(*) FROM surgeries").fetchone()[0]
    c.close()
    say(f"  surgeries logged: {out['surgeries_logged']}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", action="append", type=Path, help="corpus folder (repeatable)")
    ap.add_argument("--quick", action="store_true", help="1 run each, 25 MB session instead of 100 MB")
    ap.add_argument("--size-mb", type=int, default=None, help="size of the big session (default 100, 25 with --quick)")
    ap.add_argument("--keep", action="store_true", help="keep the scratch folder")
    ap.add_argument("--out", type=Path, default=HERE / "out" / "surgery.json")
    args = ap.parse_args(argv)
    corpora = [c.resolve() for c in (args.corpus or DEFAULT_CORPUS)]
    for c in corpora:
        if not c.is_dir():
            raise SystemExit(f"no corpus at {c}")
    reps = 1 if args.quick else 3
    compile_txdb()  # the bytecode an installed txdb has: no process compiles its modules first
    scratch = Path(tempfile.mkdtemp(prefix="txdb-bench-surgery-"))
    results: dict = {"reps": reps, "corpora": [str(c) for c in corpora], "python": sys.version.split()[0],
                     "machine": platform.platform(), "cpus": os.cpu_count(),
                     "started": time.strftime("%Y-%m-%dT%H:%M:%S")}
    try:
        bench_big(corpora, scratch, reps, args.size_mb or (25 if args.quick else 100), results)
        bench_bulk(corpora, scratch, results)
    finally:
        if not args.keep:
            shutil.rmtree(scratch, ignore_errors=True)
        else:
            say(f"scratch kept at {scratch}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2, default=str))
    say(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
