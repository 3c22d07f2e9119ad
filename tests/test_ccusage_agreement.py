"""`txdb cost` and the usage views agree with ccusage 20.0.24's `session`,
`daily`, `monthly` and `blocks` (--json, --offline) on the same files.

ccusage is installed once with npm into ~/.cache/txdb-tests/ccusage-20.0.24
(its native binary comes from the optional package @ccusage/ccusage-<os>-<arch>);
the test skips with a reason when npm or the registry is unavailable.

How ccusage 20.0.24 counts, and how the comparison follows it:
- It reads every ``*.jsonl`` under ``$CLAUDE_CONFIG_DIR/projects``, keeps the
  lines that carry ``"usage":{`` and a parseable timestamp, and groups them
  into a "session" by path: ``projects/<project>/<stem>.jsonl`` is session
  ``<stem>``, and ``projects/<project>/<uuid>/subagents/agent-*.jsonl`` counts
  toward session ``<uuid>``; the JSON row names only the session (``period``),
  so two projects holding the same stem give two rows with one name.
- It dedupes lines by (message.id, requestId) across all files (a fork or
  a copy under another sessionId included), keeping the duplicate with the
  larger token total; lines with no message.id are never deduped.
- txdb counts each API message once per (message.id, requestId) across
  every file (the billed_usage view), with its last line's figures (what
  the API billed). Summing txdb's rows over the files of each ccusage
  session gives the figure to compare.
Where a session disagrees, the test names it and the reason it found (a
message whose last line is not its largest: ccusage keeps the largest, an
early partial line; or one message.id under two requestIds in one file:
ccusage counts each) and fails otherwise. ``ccusage daily`` per day and
model agrees wherever no such message falls.

`txdb cost --by day|month|session|block` against ccusage's reports: the
same rows (days, months, block starts and ends), the same four token
figures wherever no such message falls, and the cost within 1% wherever
the tokens agree and ccusage prices the model. Where ccusage reports $0 for
tokens, its offline prices lack the model (claude-opus-5-5, a local
qwen3:8b): txdb prices it from genai-prices or calls it unpriced, never $0.
The active block's burn rate and projection follow ccusage's formulas
(tokens over the minutes from the block's first to last message, all four
kinds counted; cost per hour likewise; projected to the block's end);
ccusage's `percentUsed` is the projection's share of --token-limit (txdb's
`projection.percent_of_limit`), txdb's `percent_of_limit` the share used so far.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections import defaultdict
from pathlib import Path

import orjson
import pytest

from txdb.catalog import db
from txdb.catalog.ingest.store import refresh

VERSION = "20.0.24"
CACHE = Path(os.environ.get("TXDB_TEST_CACHE", Path.home() / ".cache" / "txdb-tests")) / f"ccusage-{VERSION}"
from sessions import CORPUS  # noqa: E402
from realcli.install import _file_lock  # noqa: E402
FIELDS = ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
CCUSAGE_FIELDS = ("inputTokens", "outputTokens", "cacheCreationTokens", "cacheReadTokens")


def _native_binary() -> Path | None:
    scope = CACHE / "node_modules" / "@ccusage"
    if scope.is_dir():
        for pkg in sorted(scope.iterdir()):
            exe = pkg / "bin" / ("ccusage.exe" if os.name == "nt" else "ccusage")
            if pkg.name.startswith("ccusage-") and exe.is_file():
                if not os.access(exe, os.X_OK):  # some npm versions unpack it without the exec bit
                    exe.chmod(exe.stat().st_mode | 0o111)
                return exe
    return None


def ccusage_command() -> list[str]:
    exe = _native_binary()
    if exe is None:
        npm = shutil.which("npm")
        if npm is None:
            pytest.skip("npm is not installed: cannot install ccusage")
        CACHE.mkdir(parents=True, exist_ok=True)
        # Parallel workers (pytest-xdist) must not run npm into one folder at once.
        with _file_lock(CACHE.parent / f".ccusage-{VERSION}.lock"):
            exe = _native_binary() or _npm_install(npm)
    if exe is not None:
        return [str(exe)]
    wrapper = CACHE / "node_modules" / ".bin" / "ccusage"
    if wrapper.exists() and shutil.which("node"):
        return [str(wrapper)]
    pytest.skip("ccusage installed but neither its native binary nor node is available")


def _npm_install(npm: str) -> Path | None:
    """npm install ccusage into CACHE (under the caller's lock); skip with the reason if it fails."""
    try:
        proc = subprocess.run(
            [npm, "install", "--no-audit", "--no-fund", "--prefix", str(CACHE), f"ccusage@{VERSION}"],
            capture_output=True, text=True, timeout=300,
        )
    except subprocess.TimeoutExpired:
        pytest.skip("npm install ccusage timed out (registry unreachable?)")
    if proc.returncode != 0:
        pytest.skip(f"npm install ccusage@{VERSION} failed: {proc.stderr.strip()[-300:]}")
    return _native_binary()


def lay_out(corpora: list[Path], projects: Path) -> None:
    """Copy the corpus in Claude Code's layout, one project folder per source folder."""
    for corpus in corpora:
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
                out = projects.joinpath("-".join((corpus.name, *project_parts)), *tail)
                out.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(src, out)


def ccusage_session_key(path: Path, projects: Path) -> tuple[str, str]:
    """(project path, session) as ccusage derives them from a file's path."""
    rel = path.relative_to(projects).parts
    if len(rel) == 2:
        return rel[0], rel[1][: -len(".jsonl")]
    if len(rel) >= 4 and rel[-2] == "subagents":
        return "/".join(rel[:-3]), rel[-3]
    return "/".join(rel[:-2]) or "Unknown Project", rel[-2]


def run_ccusage(cmd: list[str], tmp: Path, report: str = "session", *extra: str) -> dict:
    home = tmp / "home"
    home.mkdir(exist_ok=True)
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(home),  # no other agent's data (codex, ...) is found
        "XDG_CONFIG_HOME": str(home / ".config"),
        "CLAUDE_CONFIG_DIR": str(tmp / "cfg"),
        "NO_COLOR": "1",
        "TZ": "UTC",
    }
    proc = subprocess.run([*cmd, report, "--json", "--offline", *extra], capture_output=True, text=True,
                          env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def usage_lines(path: Path, nested: bool = False):
    """The usage-carrying lines of a file, as ccusage selects them (with
    ``nested``, also a progress line's embedded subagent message)."""
    with open(path, "rb") as fh:
        for raw in fh:
            if b'"usage":{' not in raw:
                continue
            try:
                obj = orjson.loads(raw)
            except orjson.JSONDecodeError:
                continue
            msg = obj.get("message") if isinstance(obj, dict) else None
            if nested and msg is None and isinstance(obj, dict) and isinstance(obj.get("data"), dict):
                inner = obj["data"].get("message")
                msg = inner.get("message") if isinstance(inner, dict) else None
            if isinstance(msg, dict) and isinstance(msg.get("usage"), dict):
                yield obj, msg


LAST_LINE = "last-line"  # txdb keeps a message's last line; an earlier line's total was larger
REQUEST_ID = "request-id"  # one message.id under two requestIds (or none): ccusage counts each
PROGRESS = "progress"  # a subagent's message inside a parent's progress line: ccusage counts it, txdb not


def explain(files: list[Path]) -> list[tuple[str, str, tuple[str, str]]]:
    """Why txdb's figures differ from ccusage's on these files: (reason,
    message, (day, model) of each of its lines)."""
    reasons: list[tuple[str, str, tuple[str, str]]] = []
    for f in files:
        request_ids: dict[str, set] = defaultdict(set)
        lines: dict[str, list[tuple]] = defaultdict(list)
        where: dict[str, set] = defaultdict(set)
        for obj, msg in usage_lines(f, nested=True):
            mid = msg.get("id")
            if obj.get("type") == "progress":
                reasons.append((PROGRESS, f"{mid} in a progress line of {f.name}",
                                (str(obj.get("timestamp") or "")[:10], msg.get("model") or "(none)")))
                continue
            if not mid:
                continue
            u = msg["usage"]
            lines[mid].append(tuple(u.get(k) or 0 for k in FIELDS))
            request_ids[mid].add(obj.get("requestId"))
            where[mid].add((str(obj.get("timestamp") or "")[:10], msg.get("model") or "(none)"))
        for mid, figures in lines.items():
            if sum(figures[-1]) < max(map(sum, figures)):
                reasons += [(LAST_LINE, f"{mid} in {f.name}: lines {figures[:3]}", w) for w in where[mid]]
            if len(request_ids[mid]) > 1:
                reasons += [(REQUEST_ID, f"{mid} in {f.name} under requestIds "
                                         f"{sorted(map(str, request_ids[mid]))}", w) for w in where[mid]]
    return reasons


@pytest.fixture(scope="module")
def compared(tmp_path_factory):
    if not CORPUS.is_dir():
        pytest.skip("../shared/corpus is absent (only present on the developers' machines)")
    cmd = ccusage_command()
    tmp = tmp_path_factory.mktemp("ccusage")
    projects = tmp / "cfg" / "projects"
    lay_out([CORPUS / "real", CORPUS / "generated"], projects)
    report = run_ccusage(cmd, tmp)
    daily = run_ccusage(cmd, tmp, "daily")

    conn = db.connect(tmp / "catalog.db")
    refresh(conn, [projects])
    totals: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    files: dict[tuple[str, str], list[Path]] = defaultdict(list)
    for (path,) in conn.execute("SELECT path FROM files"):
        files[ccusage_session_key(Path(path), projects)].append(Path(path))
    rows = conn.execute(
        "SELECT f.path, sum(coalesce(u.input_tokens, 0)), sum(coalesce(u.output_tokens, 0)), "
        "sum(coalesce(u.cache_creation_input_tokens, 0)), sum(coalesce(u.cache_read_input_tokens, 0)) "
        "FROM billed_usage u JOIN files f ON f.id = u.file_id GROUP BY f.id"
    ).fetchall()
    for path, *figures in rows:
        t = totals[ccusage_session_key(Path(path), projects)]
        for i, v in enumerate(figures):
            t[i] += v
    # The session_usage view is what users query: it must add up to the same.
    view = conn.execute(
        "SELECT sum(input_tokens), sum(output_tokens), sum(cache_creation_input_tokens), "
        "sum(cache_read_input_tokens) FROM session_usage"
    ).fetchone()
    by_day = {(d, m): tuple(r) for d, m, *r in conn.execute(
        "SELECT day, model, input_tokens, output_tokens, cache_creation_input_tokens, cache_read_input_tokens "
        "FROM usage_by_day WHERE model <> '<synthetic>'")}
    conn.close()
    return report, totals, files, view, daily, by_day, tmp


def _mismatches(compared) -> dict[str, tuple[list, list, list]]:
    """Sessions whose figures differ: name -> (ccusage rows, txdb rows, reasons)."""
    report, totals, files = compared[:3]
    sessions = [s for s in report["session"] if s.get("agent", "claude") == "claude"]
    assert sessions, "ccusage reported no Claude sessions"
    # ccusage's rows name only the session; several projects may hold one name.
    by_name: dict[str, list[tuple]] = defaultdict(list)
    for s in sessions:
        by_name[s["period"]].append(tuple(s[k] for k in CCUSAGE_FIELDS))
    ours: dict[str, list[tuple]] = defaultdict(list)
    for (project, name), t in totals.items():
        if any(t):
            ours[name].append(tuple(t))
    out = {}
    for name in sorted(set(by_name) | set(ours)):
        theirs_rows, our_rows = sorted(by_name.get(name, [])), sorted(ours.get(name, []))
        if theirs_rows != our_rows:
            group = [f for (p, n), fs in files.items() if n == name for f in fs]
            out[name] = (theirs_rows, our_rows, explain(group))
    return out


def test_ccusage_sessions_match_txdb_or_differ_for_a_known_reason(compared):
    """Every session agrees on all four figures, or differs for a reason named
    in the module docstring; a message repeated in a session's subagent
    transcript is no longer one (both count it once)."""
    report = compared[0]
    mismatches = _mismatches(compared)
    assert len(mismatches) < len(report["session"])
    problems = [f"{name}: ccusage {theirs} txdb {ours}: unexplained"
                for name, (theirs, ours, reasons) in mismatches.items() if not reasons]
    assert not problems, "\n".join(problems)


def test_ccusage_daily_matches_usage_by_day_where_no_message_differs(compared):
    """``ccusage daily`` per (day, model) equals usage_by_day, except where a
    message of that day and model is one the docstring names."""
    _, _, files, _, daily, by_day, _ = compared
    flagged = {w for fs in files.values() for _, _, w in explain(fs)}
    theirs = {(d["period"], m["modelName"]): tuple(m[k] for k in CCUSAGE_FIELDS)
              for d in daily["daily"] for m in d["modelBreakdowns"] if m["modelName"] != "<synthetic>"}
    agree = [k for k in theirs if k not in flagged]
    assert len(agree) > len(flagged)
    differ = {k: (theirs[k], by_day.get(k)) for k in agree if theirs[k] != by_day.get(k)}
    assert not differ, differ
    assert any(theirs[k] != by_day.get(k) for k in flagged if k in theirs)  # the named reasons are real


def test_session_usage_view_adds_up_to_the_usage_table(compared):
    _, totals, _, view = compared[:4]
    summed = tuple(sum(t[i] for t in totals.values()) for i in range(4))
    assert summed == tuple(view)


# -- txdb cost's reports against ccusage's -----------------------------------

def _cost_json(db_path: Path, *args) -> dict:
    from conftest import run

    return json.loads(run("cost", "--db", db_path, "--json", *args, ok=True).output)


def _tokens(m: dict) -> tuple:
    return tuple(m.get(k, 0) for k in CCUSAGE_FIELDS)


def _ours(r: dict) -> tuple:
    return (r["input_tokens"], r["output_tokens"], r["cache_creation_input_tokens"], r["cache_read_input_tokens"])


def _check_cost(key, our_cost, their_cost, tokens, checked: list, free: list) -> None:
    if not any(tokens):
        return
    if their_cost == 0:  # ccusage's offline prices lack the model
        free.append((key, our_cost))
        assert our_cost is None or our_cost > 0, key
        return
    checked.append(key)
    assert our_cost == pytest.approx(their_cost, rel=0.01), (key, our_cost, their_cost)


@pytest.mark.parametrize("by,report,width", [("day", "daily", 10), ("month", "monthly", 7)])
def test_txdb_cost_by_day_and_month_agree_with_ccusage(compared, by, report, width):
    """Each (day or month, model) of `txdb cost --breakdown` against ccusage's
    modelBreakdowns: the same periods; the same tokens where no message the
    docstring names falls; the cost within 1% where ccusage prices it."""
    files, tmp = compared[2], compared[6]
    flagged = {(d[:width], m) for fs in files.values() for _, _, (d, m) in explain(fs)}
    theirs = run_ccusage(ccusage_command(), tmp, report)[report]
    ours = _cost_json(tmp / "catalog.db", "--by", by, "--breakdown")
    assert [r[by] for r in ours["rows"]] == [t["period"] for t in theirs]
    mine = {(r[by], m["model"]): m for r in ours["rows"] for m in r["models"]}
    checked, free, differ = [], [], []
    for t in theirs:
        for m in t["modelBreakdowns"]:
            key = (t["period"], m["modelName"])
            if key not in mine:
                assert m["modelName"] == "<synthetic>" or key in flagged, key
                continue
            if _tokens(m) != _ours(mine[key]):
                assert key in flagged, (key, _tokens(m), _ours(mine[key]))
                differ.append(key)
                continue
            _check_cost(key, mine[key]["cost_usd"], m["cost"], _tokens(m), checked, free)
    assert len(checked) >= (20 if by == "day" else 8) and free and differ


def test_txdb_cost_by_session_agrees_with_ccusage(compared):
    """`txdb cost --by session` per session against `ccusage session`:
    tokens equal where no named message falls, cost within 1% where ccusage
    prices every model of it."""
    report, _, files, *_, tmp = compared
    mismatched = set(_mismatches(compared))
    ours = {r["session"]: r for r in _cost_json(tmp / "catalog.db", "--by", "session")["rows"]}
    checked, free = [], []
    names = defaultdict(list)
    for s in report["session"]:
        names[s["period"]].append(s)
    for name, rows in names.items():
        if len(rows) != 1 or name in mismatched or name not in ours:
            continue  # one name in two projects, or a difference the docstring names
        t = rows[0]
        assert _tokens(t) == _ours(ours[name]), name
        if any(b["cost"] == 0 and any(_tokens(b)) for b in t.get("modelBreakdowns", ())):
            free.append(name)  # a model ccusage cannot price: its total is short of it
            continue
        _check_cost(name, ours[name]["cost_usd"], t["totalCost"], _tokens(t), checked, free)
    assert len(checked) >= 10


def test_txdb_cost_by_block_agrees_with_ccusage(compared):
    """`txdb cost --by block` against `ccusage blocks` (its gap rows aside):
    the same starts and ends, the same messages and tokens where no named
    message falls in the block, the cost within 1% where ccusage prices it;
    `--token-limit max` is the largest block's tokens."""
    files, tmp = compared[2], compared[6]
    flagged_days = {d for fs in files.values() for _, _, (d, _) in explain(fs)}
    theirs = [b for b in run_ccusage(ccusage_command(), tmp, "blocks")["blocks"] if not b["isGap"]]
    ours = _cost_json(tmp / "catalog.db", "--by", "block", "--token-limit", "max")
    assert [(r["block_start"], r["block_end"]) for r in ours["rows"]] == [(b["startTime"], b["endTime"])
                                                                          for b in theirs]
    checked, free = [], []
    for r, b in zip(ours["rows"], theirs):
        days = {r["block_start"][:10], r["block_end"][:10]}
        t = b["tokenCounts"]
        tokens = (t["inputTokens"], t["outputTokens"], t["cacheCreationInputTokens"], t["cacheReadInputTokens"])
        if tokens != _ours(r):
            assert days & flagged_days, (r["block_start"], tokens, _ours(r))
            continue
        assert r["api_messages"] == b["entries"] and r["total_tokens"] == b["totalTokens"]
        _check_cost(r["block_start"], r["cost_usd"], b["costUSD"], tokens, checked, free)
        assert r["percent_of_limit"] == pytest.approx(100 * r["total_tokens"] / ours["token_limit"], abs=0.05)
    assert len(checked) >= 30
    assert ours["token_limit"] == max(r["total_tokens"] for r in ours["rows"])


def _shift_to_now(projects: Path, minutes_ago: float = 5) -> None:
    """Move every timestamp of the files so the last is ``minutes_ago`` old."""
    import datetime as dt

    def parse(s):
        return dt.datetime.fromisoformat(s.replace("Z", "+00:00"))

    files = sorted(projects.rglob("*.jsonl"))
    stamps = [o["timestamp"] for f in files for o in map(orjson.loads, f.read_bytes().splitlines())
              if isinstance(o, dict) and isinstance(o.get("timestamp"), str)]
    shift = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=minutes_ago) - parse(max(stamps))
    for f in files:
        out = []
        for raw in f.read_bytes().splitlines():
            o = orjson.loads(raw)
            if isinstance(o, dict) and isinstance(o.get("timestamp"), str):
                at = parse(o["timestamp"]) + shift
                o["timestamp"] = at.strftime("%Y-%m-%dT%H:%M:%S.") + f"{at.microsecond // 1000:03d}Z"
            out.append(orjson.dumps(o))
        f.write_bytes(b"\n".join(out) + b"\n")


def test_the_active_block_burns_and_projects_as_ccusage_does(tmp_path):
    """A copy of a real session (and its subagent) moved to end 5 minutes
    ago: one active block, whose burn rate, projection and time left equal
    ccusage's (within the seconds between the two runs)."""
    from conftest import run

    cmd = ccusage_command()
    projects = tmp_path / "cfg" / "projects"
    src = Path(__file__).resolve().parent / "data" / "real" / "-src-experiments-claude_p"
    shutil.copytree(src, projects / src.name)
    _shift_to_now(projects)
    theirs = run_ccusage(cmd, tmp_path, "blocks", "--token-limit", "500000")["blocks"][-1]
    db_path = tmp_path / "c.db"
    run("refresh", "--db", db_path, "--root", projects, ok=True)
    ours = _cost_json(db_path, "--by", "block", "--token-limit", "500000")
    a = ours["active_block"]
    assert theirs["isActive"] and a is not None and a["block_start"] == theirs["startTime"]
    assert a["total_tokens"] == theirs["totalTokens"] and a["api_messages"] == theirs["entries"]
    assert a["burn_rate"]["tokens_per_minute"] == pytest.approx(theirs["burnRate"]["tokensPerMinute"], rel=1e-3)
    assert a["burn_rate"]["cost_usd_per_hour"] == pytest.approx(theirs["burnRate"]["costPerHour"], rel=0.01)
    p = theirs["projection"]
    assert a["minutes_left"] == pytest.approx(p["remainingMinutes"], abs=1.5)
    assert a["projection"]["total_tokens"] == pytest.approx(p["totalTokens"], rel=0.01)
    assert a["projection"]["cost_usd"] == pytest.approx(p["totalCost"], rel=0.01)
    assert a["projection"]["percent_of_limit"] == pytest.approx(theirs["tokenLimitStatus"]["percentUsed"], rel=0.01)
    text = run("cost", "--db", db_path, "--by", "block", "--table", "--token-limit", "500000", ok=True).output
    assert "ACTIVE" in text and "Active block: " in text and "tokens/min" in text and "/h" in text
