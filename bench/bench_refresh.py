"""Refresh benchmarks for txdb: prints each figure and ratio, side by side.

    .venv/bin/python bench/bench_refresh.py [--corpus DIR ...] [--quick] [--big] [--no-ccl]

Measured in one run on the same corpus (a normalised copy of the corpus
folders in Claude Code's own layout, so that every tool reads the same tree):

- cold `txdb refresh` as a whole process (start-up included) against a
  minimal mirror (bench/mirror.py, its own process) and against
  `claude-code-log --format json` building its cache from nothing;
- the same corpus added as new files to an existing catalog (a whole
  process), interleaved with those two runs;
- a refresh with nothing changed over 2,000 files (whole process and
  in-process `txdb.catalog.ingest.store.refresh`);
- one appended line in a ~100 MB session (in-process and whole process);
- `txdb analyze` from the catalog for the largest sessions;
- `txdb secrets scan` of the cold catalog (a step of its own; its CPU beside
  the cold refresh's);
- the catalog's size against the corpus's size;
- peak RSS of the cold refresh and of the 100 MB refresh (and, with
  ``--big``, of a 1 GB file).

Each timing is the median of 3 runs (cold refresh, mirror and new files: 7 rounds; 1 with --quick). Results also go to
bench/out/refresh.json. claude-code-log is installed on first use into a
separate venv under ~/.cache/txdb-bench/ccl-venv, never into the project's.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid as uuidlib
from pathlib import Path

import orjson

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
VENV_BIN = REPO / ".venv" / "bin"
TXDB = str(VENV_BIN / "txdb") if (VENV_BIN / "txdb").exists() else shutil.which("txdb") or "txdb"
PY = sys.executable
DEFAULT_CORPUS = [REPO.parent / "shared" / "corpus" / "real", REPO.parent / "shared" / "corpus" / "generated"]
CACHE = Path(os.environ.get("TXDB_BENCH_CACHE", Path.home() / ".cache" / "txdb-bench"))
CCL_VENV = CACHE / "ccl-venv"
CCL_PACKAGE = os.environ.get("TXDB_BENCH_CCL", "claude-code-log")

sys.path.insert(0, str(REPO))
from txdb.catalog import sessions as txcatalog  # noqa: E402
from txdb.catalog import db as txdb_db  # noqa: E402
from txdb.catalog.ingest import store  # noqa: E402


# ---------------------------------------------------------------- helpers

# user + system CPU seconds of the last run_proc: on a shared machine, a
# steadier figure than wall-clock time (it leaves out waiting for a core).
LAST_CPU = [0.0]


# A small process that starts the measured command and reports on it. The
# peak RSS that wait4 reports for a child counts the pages of whoever
# started it until it execs (fork and posix_spawn alike), so a bench
# process grown by its in-process runs would inflate every later figure:
# the command is started from this launcher instead, a fresh interpreter.
_LAUNCHER = """
import os, sys, time
cwd, argv = sys.argv[1], sys.argv[2:]
if cwd:
    os.chdir(cwd)
devnull = os.open(os.devnull, os.O_WRONLY)
t0 = time.perf_counter()
pid = os.posix_spawnp(argv[0], argv, os.environ, file_actions=[(os.POSIX_SPAWN_DUP2, devnull, 1)])
_, status, ru = os.wait4(pid, 0)
dt = time.perf_counter() - t0
print(dt, ru.ru_maxrss, os.waitstatus_to_exitcode(status), ru.ru_utime + ru.ru_stime)
"""


def run_proc(cmd: list[str], env: dict | None = None, cwd: str | None = None) -> tuple[float, int, int, str]:
    """(seconds, peak RSS in bytes of that process, return code, stderr tail)."""
    p = subprocess.run([sys.executable, "-c", _LAUNCHER, cwd or "", *cmd], capture_output=True, env=env)
    if p.returncode != 0 or not p.stdout.strip():
        raise RuntimeError(f"could not run {cmd[0]}: {p.stderr.decode('utf-8', 'replace')[-300:]}")
    dt, rss, rc, cpu = p.stdout.split()
    LAST_CPU[0] = float(cpu)
    rss = int(rss) * (1 if sys.platform == "darwin" else 1024)
    return float(dt), rss, int(rc), p.stderr.decode("utf-8", "replace")[-600:]


def median(xs):
    return statistics.median(xs) if xs else None


def mb(n):
    return n / 1e6


def tree_bytes(root: Path) -> tuple[int, int]:
    n = size = 0
    for folder, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if d != "tool-results"]
        for name in names:
            if name.endswith(".jsonl"):
                n += 1
                size += os.path.getsize(os.path.join(folder, name))
    return n, size


def db_bytes(path: Path) -> int:
    return sum(os.path.getsize(p) for p in (str(path), f"{path}-wal", f"{path}-shm") if os.path.exists(p))


def rm_db(path: Path) -> None:
    for p in (str(path), f"{path}-wal", f"{path}-shm"):
        if os.path.exists(p):
            os.remove(p)


def say(msg: str) -> None:
    print(msg, flush=True)


# ---------------------------------------------------------------- corpus

def normalise_corpus(corpora: list[Path], dest: Path) -> None:
    """Copy every session file into Claude Code's layout:
    dest/<project>/<session>.jsonl and dest/<project>/<session>/subagents/agent-*.jsonl,
    with one project folder per source folder (so every tool sees the same tree)."""
    for corpus in corpora:
        tag = corpus.name
        for folder, dirs, names in os.walk(corpus):
            dirs[:] = [d for d in dirs if d != "tool-results"]
            for name in names:
                if not name.endswith(".jsonl"):
                    continue
                src = Path(folder) / name
                rel = src.relative_to(corpus).parts
                if len(rel) >= 3 and rel[-2] == "subagents":
                    project_parts, tail = rel[:-3], rel[-3:]
                else:
                    project_parts, tail = rel[:-1], rel[-1:]
                project = "-".join((tag,) + tuple(project_parts)).replace("/", "-")
                out = dest.joinpath(project, *tail)
                out.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(src, out)
                meta = src.with_name(name[: -len(".jsonl")] + ".meta.json")
                if meta.exists():
                    shutil.copyfile(meta, out.with_name(meta.name))


def session_files(root: Path) -> list[Path]:
    out = []
    for folder, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if d != "tool-results"]
        out += [Path(folder) / n for n in names if n.endswith(".jsonl")]
    return sorted(out)


# ---------------------------------------------------------------- claude-code-log

def ccl_exe() -> str | None:
    exe = CCL_VENV / "bin" / "claude-code-log"
    if exe.exists():
        return str(exe)
    try:
        CACHE.mkdir(parents=True, exist_ok=True)
        subprocess.run([PY, "-m", "venv", str(CCL_VENV)], check=True, capture_output=True)
        subprocess.run([str(CCL_VENV / "bin" / "pip"), "install", "-q", CCL_PACKAGE],
                       check=True, capture_output=True, timeout=600)
    except (subprocess.SubprocessError, OSError) as e:
        say(f"  claude-code-log could not be installed: {e}")
        return None
    return str(exe) if exe.exists() else None


def ccl_mode(exe: str) -> tuple[list[str], str]:
    help_text = subprocess.run([exe, "--help"], capture_output=True, text=True).stdout
    version = subprocess.run([exe, "--version"], capture_output=True, text=True).stdout.strip()
    m = re.search(r"--format\s+\[([^\]]*)\]", help_text)
    if m and "json" in m.group(1).split("|"):
        return ["--format", "json"], version
    # Older releases have no JSON output: build the cache and skip HTML where possible.
    return ["--no-individual-sessions"], version + " (no --format json: cache + combined HTML only)"


# ---------------------------------------------------------------- big session

def _remap(value, mapping):
    if isinstance(value, str) and value in mapping:
        return mapping[value]
    return value


def build_big_session(src_files: list[Path], out: Path, target_bytes: int) -> dict:
    """Concatenate generated session lines into one long valid chain.

    Each pass over the sources gives every uuid a fresh value (parentUuid,
    leafUuid, logicalParentUuid, message.id and requestId follow), and the
    first root of each later pass hangs below the previous pass's last chain
    line, so the chain stays whole and long.
    """
    sources = []
    for f in src_files:
        lines = [ln for ln in f.read_bytes().splitlines() if ln.strip()]
        objs = []
        for ln in lines:
            try:
                o = orjson.loads(ln)
            except orjson.JSONDecodeError:
                continue
            if isinstance(o, dict):
                objs.append(o)
        if objs:
            sources.append(objs)
    session_id = str(uuidlib.uuid4())
    written = 0
    k = 0
    prev_leaf = None
    template = None
    with open(out, "wb") as fh:
        while written < target_bytes:
            for objs in sources:
                mapping: dict[str, str] = {}
                first_root_done = False
                last_chain = None
                buf = []
                for o in objs:
                    o = dict(o)
                    for key in ("uuid", "parentUuid", "leafUuid", "logicalParentUuid"):
                        v = o.get(key)
                        if isinstance(v, str):
                            if v not in mapping:
                                mapping[v] = str(uuidlib.uuid4())
                            o[key] = mapping[v]
                    if "sessionId" in o:
                        o["sessionId"] = session_id
                    if isinstance(o.get("requestId"), str):
                        o["requestId"] = f"{o['requestId']}_{k}"
                    msg = o.get("message")
                    if isinstance(msg, dict) and isinstance(msg.get("id"), str):
                        msg = dict(msg)
                        msg["id"] = f"{msg['id']}_{k}"
                        o["message"] = msg
                    t = o.get("type")
                    if t in ("user", "assistant", "attachment", "system") and isinstance(o.get("uuid"), str):
                        if o.get("parentUuid") is None and not first_root_done:
                            first_root_done = True
                            if prev_leaf is not None:
                                o["parentUuid"] = prev_leaf
                        if not o.get("isSidechain"):
                            last_chain = o["uuid"]
                    if t == "assistant" and template is None and isinstance(msg, dict) and msg.get("usage"):
                        template = o
                    buf.append(orjson.dumps(o) + b"\n")
                data = b"".join(buf)
                fh.write(data)
                written += len(data)
                k += 1
                if last_chain:
                    prev_leaf = last_chain
                if written >= target_bytes:
                    break
    return {"session_id": session_id, "bytes": written, "passes": k, "template": template}


def append_assistant_line(path: Path, template: dict, parent_uuid: str, n: int) -> str:
    o = dict(template)
    new_uuid = str(uuidlib.uuid4())
    o["uuid"] = new_uuid
    o["parentUuid"] = parent_uuid
    o["timestamp"] = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime())
    o["requestId"] = f"req_bench_append_{n}"
    msg = dict(o["message"])
    msg["id"] = f"msg_bench_append_{n}_{new_uuid[:8]}"
    msg["content"] = [{"type": "text", "text": f"Appended line {n} for the benchmark."}]
    o["message"] = msg
    with open(path, "ab") as fh:
        fh.write(orjson.dumps(o) + b"\n")
    return new_uuid


# ---------------------------------------------------------------- measurements

def compile_txdb() -> None:
    """Give txdb the bytecode an installed package has. pip compiles what it
    installs, but an editable checkout gets bytecode only when Python may
    write it, and PYTHONDONTWRITEBYTECODE (set on some machines) forbids
    that: every txdb process would then compile its modules first (~35 ms),
    while the mirror's imports (stdlib, orjson) are compiled."""
    import compileall

    for folder in (REPO / "txdb", REPO / "sql"):
        compileall.compile_dir(str(folder), quiet=1)


def bench_secrets_scan(db: Path, scratch: Path, reps: int, results: dict) -> None:
    """`txdb secrets scan` of the cold catalog (a step of its own, not part
    of refresh: README, "Secrets in the archive"), on a copy each run."""
    copy = scratch / "secrets.db"
    times, cpu = [], []
    for i in range(reps):
        rm_db(copy)
        shutil.copyfile(db, copy)
        dt, peak, rc, err = run_proc([TXDB, "secrets", "scan", "--db", str(copy)])
        if rc != 0:
            raise SystemExit(f"txdb secrets scan failed ({rc}): {err}")
        times.append(dt)
        cpu.append(LAST_CPU[0])
        say(f"  txdb secrets scan   run {i + 1}: {dt:.2f}s  cpu {LAST_CPU[0]:.2f}s  peak RSS {mb(peak):.0f} MB")
    rm_db(copy)
    results["secrets_scan"] = {"seconds": median(times), "runs": times, "cpu_seconds": median(cpu)}


def bench_export_redact(db: Path, scratch: Path, reps: int, results: dict) -> None:
    """`txdb export --redact` of the cold catalog (it scans first), on a copy each run."""
    copy, out = scratch / "redact.db", scratch / "redacted"
    times, cpu = [], []
    for i in range(reps):
        rm_db(copy)
        shutil.copyfile(db, copy)
        shutil.rmtree(out, ignore_errors=True)
        dt, peak, rc, err = run_proc([TXDB, "export", str(out), "--redact", "--db", str(copy)])
        if rc != 0:
            say(f"  txdb export --redact failed ({rc}): {err}")  # pyarrow missing: no figure
            return
        times.append(dt)
        cpu.append(LAST_CPU[0])
        say(f"  txdb export --redact run {i + 1}: {dt:.2f}s  cpu {LAST_CPU[0]:.2f}s  peak RSS {mb(peak):.0f} MB")
    rm_db(copy)
    shutil.rmtree(out, ignore_errors=True)
    results["export_redact"] = {"seconds": median(times), "runs": times, "cpu_seconds": median(cpu)}


def bench_cold(projects: Path, scratch: Path, reps: int, results: dict, use_ccl: bool,
               pairs: int = 7) -> None:
    n_files, corpus_size = tree_bytes(projects)
    results["corpus"] = {"files": n_files, "bytes": corpus_size}
    say(f"\n== cold refresh: {n_files} files, {mb(corpus_size):.1f} MB ==")

    # txdb, the mirror and txdb adding new files alternate, run for run, so
    # that they share the machine's noise; 7 rounds, since each takes about
    # a second.
    db = scratch / "cold.db"
    mdb = scratch / "mirror.db"
    seed_root, seed_db = existing_catalog(projects, scratch)
    added_db = scratch / "added.db"
    times, rss, mtimes, mrss, atimes = [], [], [], [], []
    cpu, mcpu, acpu = [], [], []
    for i in range(pairs):
        rm_db(db)
        dt, peak, rc, err = run_proc([TXDB, "refresh", "--root", str(projects), "--db", str(db)])
        if rc != 0:
            raise SystemExit(f"txdb refresh failed ({rc}): {err}")
        times.append(dt)
        rss.append(peak)
        cpu.append(LAST_CPU[0])
        say(f"  txdb refresh        run {i + 1}: {dt:.2f}s  cpu {LAST_CPU[0]:.2f}s  peak RSS {mb(peak):.0f} MB")
        rm_db(mdb)
        dt, peak, rc, err = run_proc([PY, str(HERE / "mirror.py"), "--db", str(mdb), str(projects)])
        if rc != 0:
            raise SystemExit(f"mirror failed ({rc}): {err}")
        mtimes.append(dt)
        mrss.append(peak)
        mcpu.append(LAST_CPU[0])
        say(f"  minimal mirror      run {i + 1}: {dt:.2f}s  cpu {LAST_CPU[0]:.2f}s  peak RSS {mb(peak):.0f} MB")
        rm_db(added_db)
        shutil.copyfile(seed_db, added_db)
        dt, peak, rc, err = run_proc([TXDB, "refresh", "--root", str(seed_root), "--root", str(projects),
                                      "--db", str(added_db)])
        if rc != 0:
            raise SystemExit(f"txdb refresh (new files) failed ({rc}): {err}")
        atimes.append(dt)
        acpu.append(LAST_CPU[0])
        say(f"  txdb new files      run {i + 1}: {dt:.2f}s  cpu {LAST_CPU[0]:.2f}s  peak RSS {mb(peak):.0f} MB")
    t_txdb = median(times)
    results["cold_txdb"] = {"seconds": t_txdb, "runs": times, "mb_per_s": mb(corpus_size) / t_txdb,
                            "peak_rss_bytes": max(rss), "cpu_seconds": median(cpu)}
    cat = db_bytes(db)
    with sqlite3.connect(db) as c:
        lines = c.execute("SELECT count(*) FROM records").fetchone()[0]
        errors = c.execute("SELECT count(*) FROM parse_errors WHERE recovered = 0").fetchone()[0]
        tables = c.execute("SELECT name, sum(pgsize) FROM dbstat GROUP BY name ORDER BY 2 DESC LIMIT 12").fetchall() \
            if c.execute("SELECT 1 FROM pragma_module_list WHERE name = 'dbstat'").fetchone() else []
        # the raw lines kept to be given back: their bytes and what raw_chunks stores of them
        raw, packed = c.execute("SELECT coalesce(sum(bytes), 0), coalesce(sum(length(data)), 0) FROM raw_chunks") \
            .fetchone() if c.execute("SELECT 1 FROM sqlite_master WHERE name = 'raw_chunks'").fetchone() else (0, 0)
    results["catalog"] = {"bytes": cat, "ratio_to_corpus": cat / corpus_size, "records": lines,
                          "unparseable_lines": errors, "largest": dict(tables),
                          "raw_bytes": raw, "raw_stored_bytes": packed}
    say(f"  catalog {mb(cat):.1f} MB for {mb(corpus_size):.1f} MB of sessions = {cat / corpus_size:.2f}x "
        f"({lines} records, {errors} unparseable lines)"
        + (f"; raw lines {mb(raw):.1f} MB stored in {mb(packed):.1f} MB ({packed / raw:.2f}x)" if raw else "")
        + ("; largest: " + ", ".join(f"{n} {mb(b):.1f} MB" for n, b in tables) if tables else ""))
    bench_secrets_scan(db, scratch, 3 if pairs > 1 else 1, results)
    bench_export_redact(db, scratch, 3 if pairs > 1 else 1, results)
    t_mirror = median(mtimes)
    results["cold_mirror"] = {"seconds": t_mirror, "runs": mtimes, "mb_per_s": mb(corpus_size) / t_mirror,
                              "peak_rss_bytes": max(mrss), "db_bytes": db_bytes(mdb), "cpu_seconds": median(mcpu)}
    results["ratio_txdb_vs_mirror_throughput"] = t_mirror / t_txdb
    say(f"  txdb throughput / mirror throughput = {t_mirror / t_txdb:.2f}x (target >= 0.5x)")
    t_added = median(atimes)
    results["new_files_txdb"] = {"seconds": t_added, "runs": atimes, "mb_per_s": mb(corpus_size) / t_added,
                                 "cpu_seconds": median(acpu)}
    results["ratio_new_files_vs_mirror_throughput"] = t_mirror / t_added
    say(f"  new files added to a catalog: {mb(corpus_size) / t_added:.1f} MB/s, "
        f"{t_mirror / t_added:.2f}x the mirror's throughput (target >= 0.4x)")

    if not use_ccl:
        return
    exe = ccl_exe()
    if not exe:
        results["cold_ccl"] = {"skipped": "claude-code-log not installable"}
        return
    flags, version = ccl_mode(exe)
    times, rss = [], []
    for i in range(reps):
        home = scratch / "ccl-home"
        if home.exists():
            shutil.rmtree(home)
        cproj = home / ".claude" / "projects"
        shutil.copytree(projects, cproj)
        env = dict(os.environ, HOME=str(home))
        cmd = [exe, "--all-projects", "--projects-dir", str(cproj), *flags]
        dt, peak, rc, err = run_proc(cmd, env=env, cwd=str(home))
        if rc != 0:
            say(f"  claude-code-log failed ({rc}): {err}")
            results["cold_ccl"] = {"failed": err}
            return
        times.append(dt)
        rss.append(peak)
        say(f"  claude-code-log     run {i + 1}: {dt:.2f}s  peak RSS {mb(peak):.0f} MB (parent process)")
    shutil.rmtree(scratch / "ccl-home", ignore_errors=True)
    t_ccl = median(times)
    results["cold_ccl"] = {"seconds": t_ccl, "runs": times, "version": version, "command": flags,
                           "mb_per_s": mb(corpus_size) / t_ccl, "peak_rss_bytes": max(rss),
                           "cpus": os.cpu_count()}
    results["ratio_txdb_vs_ccl_speed"] = t_ccl / t_txdb
    say(f"  claude-code-log {version} {' '.join(flags)}: txdb is {t_ccl / t_txdb:.2f}x faster (target >= 5x)")


def existing_catalog(projects: Path, scratch: Path) -> tuple[Path, Path]:
    """A catalog of one small session (a copy, under a root of its own), to
    which the corpus is then added as new files."""
    root = scratch / "seed"
    src = min((p for p in session_files(projects) if p.stat().st_size > 0), key=lambda p: p.stat().st_size)
    dst = root / "-bench-seed" / src.name
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dst)
    db = scratch / "seed.db"
    rm_db(db)
    dt, _, rc, err = run_proc([TXDB, "refresh", "--root", str(root), "--db", str(db)])
    if rc != 0:
        raise SystemExit(f"txdb refresh (seed) failed ({rc}): {err}")
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # one file to copy
    conn.close()
    return root, db


def bench_unchanged(projects: Path, scratch: Path, reps: int, results: dict, n_files: int = 2000) -> None:
    say(f"\n== nothing changed over {n_files} files ==")
    small = [p for p in session_files(projects) if 0 < p.stat().st_size <= 64_000]
    if not small:
        small = session_files(projects)
    root = scratch / "many"
    if root.exists():
        shutil.rmtree(root)
    for i in range(n_files):
        src = small[i % len(small)]
        dst = root / f"-bench-project-{i % 50:02d}" / f"{uuidlib.UUID(int=i)}.jsonl"
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dst)
    db = scratch / "many.db"
    rm_db(db)
    dt, _, rc, err = run_proc([TXDB, "refresh", "--root", str(root), "--db", str(db)])
    if rc != 0:
        raise SystemExit(f"txdb refresh failed: {err}")
    say(f"  first refresh of {n_files} files: {dt:.2f}s")
    whole = []
    for _ in range(reps):
        dt, _, rc, _ = run_proc([TXDB, "refresh", "--root", str(root), "--db", str(db)])
        whole.append(dt)
    inproc, discover_t = [], []
    conn = txdb_db.connect(db)
    from txdb.catalog.ingest.discover import discover
    for _ in range(reps):
        t0 = time.perf_counter()
        stats = store.refresh(conn, [root])
        inproc.append(time.perf_counter() - t0)
        assert stats.unchanged == n_files, stats.summary()
        t0 = time.perf_counter()
        discover([root])
        discover_t.append(time.perf_counter() - t0)
    conn.close()
    t0 = time.perf_counter()
    conn = txdb_db.connect(db)
    connect_t = time.perf_counter() - t0
    conn.close()
    dt_startup, _, _, _ = run_proc([TXDB, "--help"])
    results["unchanged_2000"] = {
        "files": n_files, "whole_process_seconds": median(whole), "in_process_seconds": median(inproc),
        "discover_seconds": median(discover_t), "connect_seconds": connect_t,
        "txdb_help_process_seconds": dt_startup,
    }
    say(f"  whole process {median(whole) * 1000:.0f} ms, in-process refresh {median(inproc) * 1000:.0f} ms "
        f"(discover alone {median(discover_t) * 1000:.0f} ms; connect {connect_t * 1000:.0f} ms; "
        f"`txdb --help` process {dt_startup * 1000:.0f} ms)  target < 200 ms")


def bench_append(projects: Path, corpora: list[Path], scratch: Path, reps: int, results: dict,
                 target_mb: int, key: str = "append_100mb", with_append: bool = True) -> None:
    say(f"\n== one appended line in a ~{target_mb} MB session ==")
    gen = [c for c in corpora if c.name == "generated"] or corpora
    srcs = []
    for c in gen:
        for p in session_files(c):
            if "subagents" not in p.parts:
                srcs.append(p)
    srcs.sort(key=lambda p: -p.stat().st_size)
    root = scratch / f"big-{target_mb}"
    if root.exists():
        shutil.rmtree(root)
    proj = root / "-bench-big"
    proj.mkdir(parents=True)
    t0 = time.perf_counter()
    info = None
    big = None
    # build_big_session writes the file named after its session id
    tmp = proj / "building.jsonl"
    info = build_big_session(srcs, tmp, target_mb * 1_000_000)
    big = proj / f"{info['session_id']}.jsonl"
    tmp.rename(big)
    say(f"  built {mb(info['bytes']):.1f} MB session ({info['passes']} passes over {len(srcs)} sessions) "
        f"in {time.perf_counter() - t0:.1f}s")
    db = scratch / f"big-{target_mb}.db"
    rm_db(db)
    dt, peak, rc, err = run_proc([TXDB, "refresh", "--root", str(root), "--db", str(db)])
    if rc != 0:
        raise SystemExit(f"txdb refresh failed: {err}")
    out = {"bytes": info["bytes"], "first_refresh_seconds": dt, "first_refresh_mb_per_s": mb(info["bytes"]) / dt,
           "first_refresh_peak_rss_bytes": peak}
    say(f"  first refresh (whole process): {dt:.2f}s ({mb(info['bytes']) / dt:.1f} MB/s), "
        f"peak RSS {mb(peak):.0f} MB")
    results[key] = out
    if not with_append:
        return
    conn = txdb_db.connect(db)
    leaf, chain_len = conn.execute("SELECT leaf_uuid, chain_length FROM sessions").fetchone()
    out["chain_length"] = chain_len
    inproc = []
    n = 0
    for _ in range(reps):
        n += 1
        leaf = append_assistant_line(big, info["template"], leaf, n)
        t0 = time.perf_counter()
        stats = store.refresh(conn, [root])
        inproc.append(time.perf_counter() - t0)
        assert stats.grown == 1 and stats.lines == 1, stats.summary()
        got_leaf, got_len = conn.execute("SELECT leaf_uuid, chain_length FROM sessions").fetchone()
        assert got_leaf == leaf and got_len == chain_len + n, (got_leaf, leaf, got_len, chain_len + n)
    conn.close()
    whole = []
    for _ in range(reps):
        n += 1
        leaf = append_assistant_line(big, info["template"], leaf, n)
        dt, _, rc, err = run_proc([TXDB, "refresh", "--root", str(root), "--db", str(db)])
        whole.append(dt)
    # The in-process time split: refresh of only that file (no discovery) too.
    conn = txdb_db.connect(db)
    one = []
    for _ in range(reps):
        n += 1
        leaf = append_assistant_line(big, info["template"], leaf, n)
        t0 = time.perf_counter()
        store.refresh_path(conn, big, str(root))
        one.append(time.perf_counter() - t0)
    got_leaf, got_len = conn.execute("SELECT leaf_uuid, chain_length FROM sessions").fetchone()
    assert got_leaf == leaf and got_len == chain_len + n
    conn.close()
    out.update({"append_in_process_seconds": median(inproc), "append_whole_process_seconds": median(whole),
                "append_refresh_path_seconds": median(one)})
    say(f"  append one line: in-process refresh {median(inproc) * 1000:.1f} ms "
        f"(refresh_path {median(one) * 1000:.1f} ms), whole process {median(whole) * 1000:.0f} ms  "
        f"target < 50 ms; chain {chain_len} -> {got_len}")
    big.unlink()


def bench_analyze(scratch: Path, reps: int, results: dict, top: int = 3) -> None:
    say("\n== txdb analyze from the catalog ==")
    db = scratch / "cold.db"
    conn = txdb_db.connect(db)
    rows = conn.execute(
        "SELECT f.id, f.path, f.size, s.lines FROM files f JOIN sessions s ON s.file_id = f.id "
        "ORDER BY f.size DESC LIMIT ?", (top,)
    ).fetchall()
    out = []
    for fid, path, size, lines in rows:
        inproc = []
        for _ in range(reps):
            t0 = time.perf_counter()
            txcatalog.analyze(conn, fid)
            inproc.append(time.perf_counter() - t0)
        whole = []
        for _ in range(reps):
            dt, _, rc, err = run_proc([TXDB, "analyze", path, "--db", str(db), "--json"])
            if rc != 0:
                say(f"  analyze failed: {err}")
            whole.append(dt)
        out.append({"path": path, "bytes": size, "lines": lines, "in_process_seconds": median(inproc),
                    "whole_process_seconds": median(whole)})
        say(f"  {Path(path).name[:40]:40s} {mb(size):5.1f} MB {lines:6d} lines: in-process "
            f"{median(inproc) * 1000:.1f} ms, whole process {median(whole) * 1000:.0f} ms  target < 50 ms")
    conn.close()
    results["analyze"] = out


# ---------------------------------------------------------------- main

def summary_table(r: dict) -> str:
    rows = []

    def row(name, value, target="", ok=None):
        mark = "" if ok is None else ("ok" if ok else "MISS")
        rows.append((name, value, target, mark))

    c = r.get("cold_txdb")
    if c:
        row("cold txdb refresh (process)", f"{c['seconds']:.2f} s, {c['mb_per_s']:.1f} MB/s")
        m = r["cold_mirror"]
        row("cold minimal mirror (process)", f"{m['seconds']:.2f} s, {m['mb_per_s']:.1f} MB/s")
        ratio = r["ratio_txdb_vs_mirror_throughput"]
        row("txdb / mirror throughput", f"{ratio:.2f}x", ">= 0.5x", ratio >= 0.5)
        n = r["new_files_txdb"]
        row("new files added to a catalog (process)", f"{n['seconds']:.2f} s, {n['mb_per_s']:.1f} MB/s")
        ratio = r["ratio_new_files_vs_mirror_throughput"]
        row("new files / mirror throughput", f"{ratio:.2f}x", ">= 0.4x", ratio >= 0.4)
        row("CPU time: cold / new files / mirror", f"{c['cpu_seconds']:.2f} / {n['cpu_seconds']:.2f} / "
            f"{m['cpu_seconds']:.2f} s (mirror/txdb {m['cpu_seconds'] / c['cpu_seconds']:.2f}x, "
            f"{m['cpu_seconds'] / n['cpu_seconds']:.2f}x)")
        cc = r.get("cold_ccl", {})
        if "seconds" in cc:
            row("claude-code-log cold (process)", f"{cc['seconds']:.2f} s, {cc['mb_per_s']:.1f} MB/s")
            ratio = r["ratio_txdb_vs_ccl_speed"]
            row("txdb speed / claude-code-log", f"{ratio:.2f}x", ">= 5x", ratio >= 5)
        if "export_redact" in r:
            er = r["export_redact"]
            row("export --redact of that catalog (process, scans first)",
                f"{er['seconds']:.2f} s, CPU {er['cpu_seconds']:.2f} s")
        if "secrets_scan" in r:
            sc = r["secrets_scan"]
            row("secrets scan of that catalog (process)", f"{sc['seconds']:.2f} s, CPU {sc['cpu_seconds']:.2f} s "
                f"(cold refresh CPU {c['cpu_seconds']:.2f} s)")
        row("peak RSS cold txdb refresh", f"{mb(c['peak_rss_bytes']):.0f} MB")
        row("peak RSS minimal mirror", f"{mb(m['peak_rss_bytes']):.0f} MB")
    cat = r.get("catalog")
    if cat:
        row("catalog / corpus size", f"{mb(cat['bytes']):.1f} / {mb(r['corpus']['bytes']):.1f} MB = "
            f"{cat['ratio_to_corpus']:.2f}x")
        if cat.get("raw_bytes"):
            row("raw lines / stored compressed", f"{mb(cat['raw_bytes']):.1f} / {mb(cat['raw_stored_bytes']):.1f} MB = "
                f"{cat['raw_stored_bytes'] / cat['raw_bytes']:.2f}x")
        for name, size in list(cat.get("largest", {}).items())[:8]:
            row(f"  {name}", f"{mb(size):.1f} MB")
    u = r.get("unchanged_2000")
    if u:
        row("unchanged 2000 files, in-process", f"{u['in_process_seconds'] * 1000:.0f} ms", "< 200 ms",
            u["in_process_seconds"] < 0.2)
        row("unchanged 2000 files, process", f"{u['whole_process_seconds'] * 1000:.0f} ms", "< 200 ms",
            u["whole_process_seconds"] < 0.2)
    a = r.get("append_100mb")
    if a:
        row(f"first refresh {mb(a['bytes']):.0f} MB session", f"{a['first_refresh_seconds']:.2f} s, "
            f"peak RSS {mb(a['first_refresh_peak_rss_bytes']):.0f} MB")
        if "append_in_process_seconds" in a:
            row("append 1 line, in-process", f"{a['append_in_process_seconds'] * 1000:.1f} ms", "< 50 ms",
                a["append_in_process_seconds"] < 0.05)
            row("append 1 line, process", f"{a['append_whole_process_seconds'] * 1000:.0f} ms")
    for an in r.get("analyze", []):
        row(f"analyze {mb(an['bytes']):.1f} MB session, in-process", f"{an['in_process_seconds'] * 1000:.1f} ms",
            "< 50 ms", an["in_process_seconds"] < 0.05)
        row(f"analyze {mb(an['bytes']):.1f} MB session, process", f"{an['whole_process_seconds'] * 1000:.0f} ms")
    b = r.get("big_1gb")
    if b:
        row(f"refresh {mb(b['bytes']):.0f} MB file", f"{b['first_refresh_seconds']:.1f} s, "
            f"peak RSS {mb(b['first_refresh_peak_rss_bytes']):.0f} MB")
    w = [max(len(x[i]) for x in rows) for i in range(4)]
    lines = ["", "Summary (median of %d runs)" % r["reps"], "-" * (sum(w) + 9)]
    for x in rows:
        lines.append("  ".join(x[i].ljust(w[i]) for i in range(4)).rstrip())
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", action="append", type=Path, help="corpus folder (repeatable)")
    ap.add_argument("--quick", action="store_true", help="1 run each, 25 MB session instead of 100 MB")
    ap.add_argument("--big", action="store_true", help="also refresh a 1 GB file and report its peak RSS")
    ap.add_argument("--no-ccl", action="store_true", help="skip claude-code-log")
    ap.add_argument("--keep", action="store_true", help="keep the scratch folder")
    ap.add_argument("--cold-only", action="store_true",
                    help="only the first build, the mirror and new files (no claude-code-log)")
    ap.add_argument("--out", type=Path, default=HERE / "out" / "refresh.json")
    args = ap.parse_args(argv)
    corpora = [c.resolve() for c in (args.corpus or DEFAULT_CORPUS)]
    for c in corpora:
        if not c.is_dir():
            raise SystemExit(f"no corpus at {c}")
    reps = 1 if args.quick else 3
    compile_txdb()
    scratch = Path(tempfile.mkdtemp(prefix="txdb-bench-"))
    results: dict = {"reps": reps, "corpora": [str(c) for c in corpora], "python": sys.version.split()[0],
                     "sqlite": sqlite3.sqlite_version, "machine": platform.platform(), "cpus": os.cpu_count(),
                     "started": time.strftime("%Y-%m-%dT%H:%M:%S")}
    try:
        projects = scratch / "projects"
        normalise_corpus(corpora, projects)
        bench_cold(projects, scratch, reps, results, use_ccl=not (args.no_ccl or args.cold_only),
                   pairs=1 if args.quick else 7)
        if not args.cold_only:
            bench_unchanged(projects, scratch, reps, results)
            bench_append(projects, corpora, scratch, reps, results, 25 if args.quick else 100)
            bench_analyze(scratch, reps, results)
            if args.big:
                bench_append(projects, corpora, scratch, 1, results, 1000, key="big_1gb", with_append=False)
    finally:
        if not args.keep:
            shutil.rmtree(scratch, ignore_errors=True)
        else:
            say(f"scratch kept at {scratch}")
    say(summary_table(results))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2, default=str))
    say(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
