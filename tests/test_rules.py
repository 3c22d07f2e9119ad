"""Each rule in one place (issue 10): the places that show a rule's result agree.

- the context gauge: the session page, ``txdb sessions`` and ``session_costs``
  (and ``estimate.recorded_context`` of the file's last turn) on a session
  whose usage has ``iterations[]``, before and after a usage reset;
- keep-newest-N attachments: what the ``attachment_targets`` /
  ``attachments_by_type`` views say the default policy drops is what
  ``strip-attachments`` removes, on real sessions;
- per-record tokens and the system prompt counted once: the stored figures
  are ``records.record_tokens`` / ``records.system_prompt_tokens`` of the lines.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from txdb.catalog import sessions as catalog, db, estimate
from txdb.model import records
from txdb.model.verify import verify_file
from txdb.cli import cli
from txdb.web.metadata import make_datasette
from txdb.catalog.ingest.store import refresh
from txdb.surgery import ops
from txdb.surgery.engine import PassOptions, run_surgery
from txdb.surgery.log import apply_logged
from txdb.model.transcript import Transcript

from rewind import rewind
from sessions import CORPUS, assistant, shipped_files, user, write


def _line(obj) -> str:
    return json.dumps(obj, separators=(",", ":")) + "\n"


def _session_with_iterations(path: Path) -> None:
    """Three turns; the first reads a big file (a strip target), the last
    turn's usage has iterations[] whose last entry differs from the totals."""
    lines = []
    parent = None

    def add(obj):
        nonlocal parent
        obj.setdefault("sessionId", "s1")
        obj["parentUuid"] = parent
        lines.append(obj)
        parent = obj["uuid"]

    def assistant(i, content, usage):
        add({"type": "assistant", "uuid": f"a{i}", "requestId": f"r{i}",
             "timestamp": f"2026-11-01T10:0{i}:05.000Z",
             "message": {"id": f"m{i}", "role": "assistant", "model": "claude-x", "content": content,
                         "usage": usage}})

    add({"type": "user", "uuid": "u0", "timestamp": "2026-11-01T10:00:00.000Z",
         "message": {"role": "user", "content": "read the file"}})
    assistant(0, [{"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {"file_path": "/x"}}],
              {"input_tokens": 5, "output_tokens": 20, "cache_read_input_tokens": 2_000,
               "cache_creation_input_tokens": 500})
    add({"type": "user", "uuid": "u1", "timestamp": "2026-11-01T10:01:00.000Z",
         "message": {"role": "user", "content": [
             {"type": "tool_result", "tool_use_id": "toolu_1", "content": "y" * 80_000}]}})
    assistant(1, [{"type": "text", "text": "read it"}],
              {"input_tokens": 5, "output_tokens": 20, "cache_read_input_tokens": 2_500,
               "cache_creation_input_tokens": 20_000})
    add({"type": "user", "uuid": "u2", "timestamp": "2026-11-01T10:02:00.000Z",
         "message": {"role": "user", "content": "and now?"}})
    # totals 3 + 45_000 + 1_000 = 46_003; the last iteration: 1 + 22_600 + 400 = 23_001
    assistant(2, [{"type": "text", "text": "done"}],
              {"input_tokens": 3, "output_tokens": 30, "cache_read_input_tokens": 45_000,
               "cache_creation_input_tokens": 1_000,
               "iterations": [{"input_tokens": 2, "cache_read_input_tokens": 22_400,
                               "cache_creation_input_tokens": 600, "output_tokens": 10},
                              {"input_tokens": 1, "cache_read_input_tokens": 22_600,
                               "cache_creation_input_tokens": 400, "output_tokens": 20}]})
    path.write_text("".join(_line(o) for o in lines))


def _file_gauge(path: Path) -> int:
    """The gauge by the one Python rule, from the file's last assistant turn."""
    last = None
    for raw in path.read_bytes().splitlines():
        o = orjson.loads(raw)
        if o.get("type") == "assistant" and o["message"].get("model") != "<synthetic>":
            last = o["message"]["usage"]
    return estimate.recorded_context(last)


async def _page_gauge(catalog: Path, file_id: int) -> int:
    ds = make_datasette(catalog)
    await ds.invoke_startup()
    r = await ds.client.get(f"/-/txdb/session/{file_id}?db={catalog.stem}")
    assert r.status_code == 200, r.text[:300]
    m = re.search(r"Gauge \(recorded\)</dt><dd>([\d,]+) tokens", r.text)
    assert m, "the session page shows no gauge"
    return int(m.group(1).replace(",", ""))


def _shown_gauges(conn, catalog: Path, path: Path) -> tuple[int, int, int]:
    file_id, costs = conn.execute(
        "SELECT c.file_id, c.gauge_tokens FROM session_costs c WHERE c.path = ?", (str(path),)).fetchone()
    out = CliRunner().invoke(cli, ["sessions", "--db", str(catalog), "--json"])
    assert out.exit_code == 0, out.output
    (listed,) = [r["gauge_tokens"] for r in json.loads(out.output) if r["path"] == str(path)]
    return file_id, costs, listed


async def test_gauge_agrees_on_page_sessions_and_session_costs_with_iterations_and_after_reset(tmp_path):
    project = tmp_path / "projects" / "-tmp-demo"
    project.mkdir(parents=True)
    path = project / "0b6f1c3e-0000-4000-8000-000000000001.jsonl"
    _session_with_iterations(path)
    catalog = tmp_path / "catalog.db"
    conn = db.connect(catalog)
    refresh(conn, [tmp_path / "projects"])

    file_id, costs, listed = _shown_gauges(conn, catalog, path)
    assert _file_gauge(path) == 23_001  # the last iteration, not the totals (46_003)
    assert costs == listed == await _page_gauge(catalog, file_id) == 23_001

    # A strip with its usage reset lowers the file's figures (iterations too).
    rep = run_surgery(path, "strip-tool-results", lambda t, _o: ops.strip_all(t))
    assert rep.written and rep.usage and rep.usage["capped"] > 0, rep.usage
    apply_logged(conn, path, settle=0.0)
    after = _file_gauge(path)
    assert after < 23_001
    file_id, costs, listed = _shown_gauges(conn, catalog, path)
    assert costs == listed == await _page_gauge(catalog, file_id) == after
    conn.close()


def test_the_gauge_view_is_the_python_rule_on_every_corpus_turn(tmp_path):
    """context_gauge (SQL) and estimate.recorded_context (Python) on every
    usage row of the shipped sessions (and the corpus, when present)."""
    root = tmp_path / "projects"
    for i, f in enumerate(shipped_files("cli") + shipped_files("real") + shipped_files("generated")):
        d = root / f"p{i}"
        d.mkdir(parents=True)
        shutil.copy(f, d / f.name)
    conn = db.connect(tmp_path / "catalog.db")
    refresh(conn, [root])
    n = 0
    for ins, cr, cc, its, gauge in conn.execute(
            "SELECT u.gauge_input_tokens, u.gauge_cache_read_input_tokens, u.gauge_cache_creation_input_tokens, "
            "nullif(coalesce(u.gauge_iterations, u.iterations), 'null'), g.gauge_tokens FROM context_gauge g "
            "JOIN records r ON r.file_id = g.file_id AND r.message_id = g.message_id AND r.offset = "
            "(SELECT c.offset FROM chain c WHERE c.file_id = g.file_id AND c.pos = g.pos) "
            "JOIN usage u ON u.file_id = g.file_id AND u.message_id = g.message_id"):
        usage = {"input_tokens": ins, "cache_read_input_tokens": cr, "cache_creation_input_tokens": cc}
        if its:
            usage["iterations"] = json.loads(its)
        assert (estimate.recorded_context(usage) or 0) == gauge
        n += 1
    assert n > 5


# -- keep the newest N of each attachment kind ----------------------------------

def _attachment_sessions() -> list[Path]:
    files = shipped_files("cli") + shipped_files("real") + shipped_files("generated")
    if (CORPUS / "generated").is_dir():
        files += sorted((CORPUS / "generated").rglob("*.jsonl"))
    return [f for f in files if b'"type":"attachment"' in f.read_bytes()]


def test_attachment_views_and_strip_attachments_drop_the_same_lines(tmp_path):
    sessions = _attachment_sessions()
    if not sessions:
        pytest.skip("no session with attachments")
    root = tmp_path / "projects"
    paths = []
    for i, f in enumerate(sessions):
        d = root / f"p{i}"
        d.mkdir(parents=True)
        paths.append(shutil.copy(f, d / f.name))
    conn = db.connect(tmp_path / "catalog.db")
    refresh(conn, [root])
    compared = dropped_somewhere = 0
    for p in map(Path, paths):
        row = conn.execute("SELECT id FROM files WHERE path = ?", (str(p),)).fetchone()
        if row is None:
            continue
        fid = row[0]
        view_drops = {o for (o,) in conn.execute(
            "SELECT offset FROM attachment_targets WHERE file_id = ? AND policy_keeps = 0", (fid,))}
        on_chain_drops = {o for (o,) in conn.execute(
            "SELECT offset FROM attachment_targets WHERE file_id = ? AND policy_keeps = 0 AND on_chain = 1",
            (fid,))}
        by_type = conn.execute(
            "SELECT coalesce(sum(dropped), 0), coalesce(sum(kept), 0), coalesce(sum(count), 0) "
            "FROM attachments_by_type WHERE file_id = ?", (fid,)).fetchone()
        t = Transcript.load(p)
        plan = ops.attachment_plan(t)
        plan_drops = {d["offset"] for d in plan if d["action"] == "drop"}
        held = {d["offset"] for d in plan if d["reason"] == "leaf or repeated uuid"}
        # what the plan would drop by policy alone is what the view marks
        assert plan_drops | held == view_drops, p
        assert by_type[0] == len(on_chain_drops), p
        # and strip-attachments removes exactly the plan's lines
        before = p.read_bytes()
        rep = run_surgery(p, "strip-attachments", lambda t, _o: ops.strip_attachments(t),
                          PassOptions(usage_reset=False, keep_dropped_thinking=True))  # the thinking rule's removals are not this rule's
        if plan_drops:
            pending = Path(str(p) + ".pending").read_bytes()
            kept = {o for o in _offsets(before) if o not in plan_drops}
            # the lines left are the plan's keeps, in order (a child of a
            # dropped line is relinked: compared by uuid, else by type)
            assert _keys(_lines_at(before, kept)) == _keys(pending.splitlines(keepends=True))
            dropped_somewhere += 1
        else:
            assert not rep.written
        compared += 1
    assert compared
    assert dropped_somewhere or not (CORPUS / "generated").is_dir()


def _offsets(data: bytes) -> list[int]:
    out, off = [], 0
    for line in data.splitlines(keepends=True):
        out.append(off)
        off += len(line)
    return out


def _keys(lines: list[bytes]) -> list:
    out = []
    for line in lines:
        o = orjson.loads(line)
        out.append(o.get("uuid") or o.get("type"))  # a pointer to a dropped line is re-aimed
    return out


def _lines_at(data: bytes, offsets: set[int]) -> list[bytes]:
    out, off = [], 0
    for line in data.splitlines(keepends=True):
        if off in offsets:
            out.append(line)
        off += len(line)
    return out


# -- per-record tokens and the system prompt counted once -----------------------

def test_stored_record_tokens_and_system_prompt_are_the_records_rules(catalog):
    n = 0
    for fid, path in catalog.execute("SELECT id, path FROM files WHERE gone = 0").fetchall():
        data = Path(path).read_bytes()
        objs = []
        links, calls = {}, {}  # what opens a message: records.message_link, in file order
        for off, tokens in catalog.execute("SELECT offset, tokens FROM records WHERE file_id = ? ORDER BY offset",
                                           (fid,)):
            end = data.index(b"\n", off) if b"\n" in data[off:] else len(data)
            try:
                obj = orjson.loads(data[off:end])
            except orjson.JSONDecodeError:
                continue  # a line of several objects: each stored record lies inside it
            objs.append((off, obj))
            parent = links.get(obj.get("parentUuid") or "")
            opens, link = records.message_link(records.message_facts(obj), parent, calls)
            if isinstance(obj.get("uuid"), str):
                links[obj["uuid"]] = link
            assert tokens == records.record_tokens(obj, opens=opens), (path, off)
            n += 1
        sp = catalog.execute("SELECT coalesce(sum(tokens), 0) FROM system_prompt WHERE file_id = ?",
                             (fid,)).fetchone()[0]
        assert sp == records.system_prompt_tokens(o for _off, o in sorted(objs, key=lambda x: x[0])), path
        costs = catalog.execute("SELECT system_prompt_tokens FROM session_costs WHERE file_id = ?",
                                (fid,)).fetchone()
        if costs:
            assert costs[0] == sp
    assert n > 100


# -- --where and apply --all-pending never target a copy's catalog rows ---------

def _catalogue_as(conn, src_path: Path, copy_path: Path) -> None:
    """What an older txdb did: catalogue a backup or pending copy as if it
    were a session (its files row and every row keyed by it, copied)."""
    (fid,) = conn.execute("SELECT id FROM files WHERE path = ?", (str(src_path),)).fetchone()
    cols = [r[1] for r in conn.execute("PRAGMA table_info(files)") if r[1] not in ("id", "path")]
    with db.transaction(conn):
        cur = conn.execute(f"INSERT INTO files (path, {', '.join(cols)}) SELECT ?, {', '.join(cols)} "
                           "FROM files WHERE id = ?", (str(copy_path), fid))
        new = cur.lastrowid
        for (table,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' "
                                     "AND name IN ('records', 'blocks', 'attachments', 'usage', 'sessions', "
                                     "'chain', 'dangling_parents')").fetchall():
            tcols = [r[1] for r in conn.execute(f"PRAGMA table_info({table})") if r[1] != "file_id"]
            conn.execute(f"INSERT INTO {table} (file_id, {', '.join(tcols)}) "
                         f"SELECT ?, {', '.join(tcols)} FROM {table} WHERE file_id = ?", (new, fid))


def test_where_and_all_pending_skip_catalog_rows_of_backups_and_pending_copies(tmp_path):
    project = tmp_path / "projects" / "-tmp-demo"
    project.mkdir(parents=True)
    path = project / "0b6f1c3e-0000-4000-8000-000000000002.jsonl"
    _session_with_iterations(path)
    catalog = tmp_path / "catalog.db"
    conn = db.connect(catalog)
    refresh(conn, [tmp_path / "projects"])
    bak = path.with_name(path.name + ".bak")
    shutil.copyfile(path, bak)
    _catalogue_as(conn, path, bak)
    conn.close()
    bak_bytes = bak.read_bytes()

    r = CliRunner().invoke(cli, ["strip-tools", "--where", "tool_name = 'Read'", "--db", str(catalog)])
    assert r.exit_code == 0, r.output
    assert bak.read_bytes() == bak_bytes
    assert not Path(str(bak) + ".pending").exists()  # the backup was never a target
    pending = Path(str(path) + ".pending")
    assert pending.is_file()

    # the older catalog also holds a row for the pending copy itself
    conn = db.connect(catalog)
    _catalogue_as(conn, path, pending)
    conn.close()
    r = CliRunner().invoke(cli, ["apply", "--all-pending", "--db", str(catalog)])
    assert r.exit_code == 0, r.output
    assert "1 of 1 pending copies applied" in r.output, r.output
    assert not pending.exists() and bak.read_bytes() == bak_bytes


# -- chain health: verify, analyze and the views judge alike --------------------

CHAIN_CODES = {"cut_off_messages", "bridged_parent", "dangling_parent", "dangling_parent_off_chain",
               "more_missing_parents", "parent_outside_file", "orphan_tool_result", "tool_result_before_use",
               "tool_use_without_result"}


def _gap_session(path: Path, gap_seconds: int) -> None:
    """Two turns, then a user line whose parent was deleted, written
    ``gap_seconds`` after the line before it."""
    objs, parent = [], None
    for i, (kind, ts) in enumerate([("user", "10:00:00"), ("assistant", "10:00:05"),
                                    ("user", "10:01:00"), ("assistant", "10:01:05")]):
        objs.append({"type": kind, "uuid": f"{kind[0]}{i}", "parentUuid": parent, "sessionId": "s",
                     "timestamp": f"2026-11-01T{ts}.000Z",
                     "message": {"role": kind, "content": [{"type": "text", "text": f"turn {i}"}],
                                 **({"id": f"m{i}", "model": "claude-x"} if kind == "assistant" else {})}})
        parent = objs[-1]["uuid"]
    t = 65 + gap_seconds
    objs.append({"type": "user", "uuid": "u9", "parentUuid": "deleted-line", "sessionId": "s",
                 "timestamp": f"2026-11-01T10:{t // 60:02d}:{t % 60:02d}.000Z",
                 "message": {"role": "user", "content": "after the gap"}})
    objs.append({"type": "assistant", "uuid": "a9", "parentUuid": "u9", "sessionId": "s",
                 "timestamp": f"2026-11-01T10:{t // 60:02d}:{t % 60:02d}.500Z",
                 "message": {"id": "m9", "role": "assistant", "model": "claude-x",
                             "content": [{"type": "text", "text": "ok"}]}})
    path.write_text("".join(_line(o) for o in objs))


def _judged(conn, fid: int, path: Path):
    by_verify = sorted((f.code, f.severity, f.line) for f in verify_file(path).findings
                       if f.code in CHAIN_CODES and f.severity in ("error", "warning"))
    by_view = sorted(tuple(r) for r in conn.execute(
        "SELECT problem, severity, line FROM chain_problems WHERE file_id = ?", (fid,)))
    by_analyze = sorted((h["problem"], h["severity"], h["count"]) for h in catalog.analyze(conn, fid)["health"]
                        if h["severity"] in ("error", "warning"))
    counted: dict = {}
    for code, sev, _line in by_verify:
        counted[(code, sev)] = counted.get((code, sev), 0) + 1
    return by_verify, by_view, by_analyze, sorted((c, s, n) for (c, s), n in counted.items())


def test_verify_analyze_and_chain_health_agree_on_gaps_and_the_corpus(tmp_path):
    root = tmp_path / "projects"
    project = root / "-tmp-gaps"
    project.mkdir(parents=True)
    bridged = project / "0b6f1c3e-0000-4000-8000-00000000000b.jsonl"
    cut = project / "0b6f1c3e-0000-4000-8000-00000000000c.jsonl"
    _gap_session(bridged, 2)  # resume bridges it (within 5 s)
    _gap_session(cut, 40)  # it cannot: turns 0-3 drop out of what resume sends
    files = shipped_files("cli") + shipped_files("real") + shipped_files("generated")
    if (CORPUS / "real").is_dir():
        files += sorted((CORPUS / "real").rglob("*.jsonl"))
    for i, f in enumerate(files):
        d = root / f"p{i}" / Path(*f.parent.parts[-2:]) if "subagents" in f.parts else root / f"p{i}"
        d.mkdir(parents=True, exist_ok=True)
        shutil.copy(f, d / f.name)
    conn = db.connect(tmp_path / "catalog.db")
    refresh(conn, [root])
    seen = set()
    for fid, path in conn.execute("SELECT id, path FROM files WHERE kind = 'session'").fetchall():
        by_verify, by_view, by_analyze, counted = _judged(conn, fid, Path(path))
        assert by_view == by_verify, path
        assert by_analyze == counted, path
        seen.update(code for code, _s, _l in by_verify)
    fid = lambda p: conn.execute("SELECT id FROM files WHERE path = ?", (str(p),)).fetchone()[0]  # noqa: E731
    assert _judged(conn, fid(bridged), bridged)[1] == [("bridged_parent", "warning", 5)]
    assert [(c, s) for c, s, _l in _judged(conn, fid(cut), cut)[1]] == [("cut_off_messages", "error")]
    assert {"bridged_parent", "cut_off_messages"} <= seen


@pytest.mark.parametrize("usage", [
    {"input_tokens": -5, "cache_read_input_tokens": 1000, "cache_creation_input_tokens": True},
    {"input_tokens": 7, "cache_read_input_tokens": 100, "iterations": [{"input_tokens": "9"}, 3]},
    {"input_tokens": 7, "iterations": [{"input_tokens": 2, "cache_read_input_tokens": -4,
                                        "cache_creation_input_tokens": False, "output_tokens": 99}]},
    {"input_tokens": 7, "iterations": []},
    {"output_tokens": 5, "iterations": [{"output_tokens": 5}]},
], ids=["negative-and-bool", "last-iteration-not-an-object", "odd-iteration-fields", "no-iterations", "none"])
def test_the_gauge_view_is_the_python_rule_on_odd_usage(tmp_path, usage):
    project = tmp_path / "projects" / "-tmp-odd"
    project.mkdir(parents=True)
    path = project / "0b6f1c3e-0000-4000-8000-0000000000dd.jsonl"
    objs = [{"type": "user", "uuid": "u0", "parentUuid": None, "sessionId": "s",
             "timestamp": "2026-11-01T10:00:00.000Z", "message": {"role": "user", "content": "hi"}},
            {"type": "assistant", "uuid": "a0", "parentUuid": "u0", "sessionId": "s",
             "timestamp": "2026-11-01T10:00:05.000Z",
             "message": {"id": "m0", "role": "assistant", "model": "claude-x",
                         "content": [{"type": "text", "text": "ok"}], "usage": usage}}]
    path.write_text("".join(_line(o) for o in objs))
    conn = db.connect(tmp_path / "catalog.db")
    refresh(conn, [tmp_path / "projects"])
    (gauge,) = conn.execute("SELECT gauge_tokens FROM session_costs").fetchone()
    assert gauge == (estimate.recorded_context(usage) or 0) == (_file_gauge(path) or 0)


def test_a_catalog_from_before_chain_findings_judges_its_gaps_on_the_next_refresh(tmp_path):
    project = tmp_path / "projects" / "-tmp-gaps"
    project.mkdir(parents=True)
    path = project / "0b6f1c3e-0000-4000-8000-00000000000b.jsonl"
    _gap_session(path, 2)
    conn = db.connect(tmp_path / "catalog.db")
    refresh(conn, [tmp_path / "projects"])
    rewind(conn, "009")  # back to the schema before 009: no chain_findings
    conn.close()
    conn = db.connect(tmp_path / "catalog.db")
    assert conn.execute("SELECT count(*) FROM chain_problems").fetchone()[0] == 0
    assert refresh(conn, [tmp_path / "projects"]).rewritten == 1  # read again once
    assert [tuple(r) for r in conn.execute("SELECT problem, severity, line FROM chain_problems")] == [
        ("bridged_parent", "warning", 5)]


async def test_the_context_chart_reads_the_gauge_rule_with_iterations(tmp_path):
    """The session page's "context over chain" chart and the gauge state one
    rule: on the session with iterations[] the last turn is 23,001 in the
    chart, the view and the page (not the totals' 46,003); after a usage
    reset the chart keeps what the API measured when each turn ran and ends
    at the gauge the page shows (a new user's item 13: it ended at the last
    recorded turn, 633,614, under a gauge of 46,046), a point of its own
    drawn after the last turn on the page too."""
    from txdb.web import charts

    project = tmp_path / "projects" / "-tmp-demo"
    project.mkdir(parents=True)
    path = project / "0b6f1c3e-0000-4000-8000-000000000002.jsonl"
    _session_with_iterations(path)
    catalog = tmp_path / "catalog.db"
    conn = db.connect(catalog)
    refresh(conn, [tmp_path / "projects"])
    (file_id,) = conn.execute("SELECT id FROM files WHERE path = ?", (str(path),)).fetchone()
    points = [p["context"] for p in charts.context_over_chain(conn, file_id)["points"]]
    (view,) = conn.execute("SELECT gauge_tokens FROM context_gauge WHERE file_id = ?", (file_id,)).fetchone()
    assert points == [2_505, 22_505, 23_001]
    assert points[-1] == view == _file_gauge(path) == await _page_gauge(catalog, file_id)

    run_surgery(path, "strip-tool-results", lambda t, _o: ops.strip_all(t))
    apply_logged(conn, path, settle=0.0)
    after = charts.context_over_chain(conn, file_id)["points"]
    (view,) = conn.execute("SELECT gauge_tokens FROM context_gauge WHERE file_id = ?", (file_id,)).fetchone()
    assert view == _file_gauge(path) < 23_001
    assert [p["context"] for p in after] == points + [view] and after[-1]["now"]
    assert not any(p.get("now") for p in after[:-1])
    conn.close()
    ds = make_datasette(catalog)
    await ds.invoke_startup()
    page = (await ds.client.get(f"/-/txdb/session/{file_id}?db={catalog.stem}")).text
    drawn = [int(v) for v in re.findall(r'<circle class="pt[^"]*" data-turn="\d+" data-value="(\d+)"', page)]
    assert drawn == points + [view] == points + [await _page_gauge(catalog, file_id)]
    assert 'class="pt now"' in page and ">now</text>" in page


def test_the_billed_total_is_one_column_every_usage_view_sums(tmp_path):
    """input + output + cache read + cache creation, stated once
    (usage_context.billed_tokens): billed_usage carries it per API message,
    and session_usage, usage_by_day and usage_by_model sum that column."""
    project = tmp_path / "projects" / "-tmp-demo"
    project.mkdir(parents=True)
    path = project / "0b6f1c3e-0000-4000-8000-000000000003.jsonl"
    _session_with_iterations(path)
    conn = db.connect(tmp_path / "catalog.db")
    refresh(conn, [tmp_path / "projects"])
    want = {}
    for raw in path.read_bytes().splitlines():
        o = orjson.loads(raw)
        if o.get("type") == "assistant":
            u = o["message"]["usage"]
            want[o["message"]["id"]] = sum(u[k] for k in ("input_tokens", "output_tokens", "cache_read_input_tokens",
                                                          "cache_creation_input_tokens"))
    assert dict(conn.execute("SELECT message_id, billed_tokens FROM billed_usage")) == want
    total = sum(want.values())
    assert total == 2_525 + 22_525 + 46_033
    for view in ("session_usage", "usage_by_day", "usage_by_model"):
        assert conn.execute(f"SELECT sum(total_tokens) FROM {view}").fetchone()[0] == total, view
    conn.close()


# -- the context window: the model's, judged on every turn the file records ----

def _window_session(path: Path, model: str = "claude-sonnet-4-6", peak_on_chain: bool = False) -> None:
    """A 200k-model session whose last turn records 50k; one earlier turn
    recorded 250k (only a 1M window holds that), on the chain or on a branch
    a rewind left behind."""
    from sessions import assistant, user, write

    big = {"input_tokens": 10, "output_tokens": 5, "cache_read_input_tokens": 250_000}
    small = {"input_tokens": 10, "output_tokens": 5, "cache_read_input_tokens": 50_000}
    u1 = user("first", session="w1")
    a1 = assistant("one", u1["uuid"], session="w1", usage=small, model=model)
    u2 = user("rewound", a1["uuid"], session="w1")
    a2 = assistant("long", u2["uuid"], session="w1", usage=big, model=model)
    u3 = user("again", a2["uuid"] if peak_on_chain else a1["uuid"], session="w1")
    a3 = assistant("short", u3["uuid"], session="w1", usage=small, model=model)
    write(path, [u1, a1, u2, a2, u3, a3])


@pytest.mark.parametrize("peak_on_chain", [False, True])
def test_a_session_that_recorded_past_200k_is_on_a_1m_window_for_the_view_and_rescue(tmp_path, peak_on_chain):
    from txdb.surgery import rescue

    f = tmp_path / "projects" / "-w" / "w1.jsonl"
    _window_session(f, peak_on_chain=peak_on_chain)
    other = tmp_path / "projects" / "-w" / "w2.jsonl"
    _window_session(other, model="claude-opus-4-6[1m]")
    small = tmp_path / "projects" / "-w" / "w3.jsonl"
    _window_session(small)
    small.write_bytes(small.read_bytes().replace(b'"cache_read_input_tokens":250000', b'"cache_read_input_tokens":150000'))
    conn = db.connect(tmp_path / "catalog.db")
    refresh(conn, [tmp_path / "projects"])
    rows = {Path(p).stem: (w, pct, st) for p, w, pct, st in conn.execute(
        "SELECT f.path, n.window_tokens, n.pct_of_window, n.status FROM sessions_near_limit n "
        "JOIN files f ON f.id = n.file_id")}
    assert rows["w1"] == (1_000_000, 5.0, "ok")   # 50k of 1M: the window is the model's, not the last turn's
    assert rows["w2"] == (1_000_000, 5.0, "ok")
    assert rows["w3"] == (200_000, 25.0, "ok")
    for stem in ("w1", "w2", "w3"):
        assert rescue.window_of(Transcript.load(f.parent / f"{stem}.jsonl")) == rows[stem][0], stem
    # rescue's default aims at the window a resume runs in: 200k unless the model is [1m]
    # (a turn that recorded 250k ran on 1M, but Claude Code auto-compacts a resume that is not [1m])
    room = rescue.release_room("2.1.300")[0]
    assert rescue.default_target(Transcript.load(f)) == 200_000 - rescue.MARGIN - room
    assert rescue.default_target(Transcript.load(other)) == 1_000_000 - rescue.MARGIN - room


def test_the_window_view_is_the_python_rule_on_every_shipped_session(tmp_path):
    """context_gauge.window_tokens (SQL) and rescue.window_of (Python) on the
    shipped sessions (and the real corpus, when present)."""
    from txdb.surgery import rescue

    root = tmp_path / "projects"
    files = shipped_files("cli") + shipped_files("real") + shipped_files("generated")
    if (CORPUS / "real").is_dir():
        files += sorted((CORPUS / "real").rglob("*.jsonl"))[:40]
    for i, f in enumerate(files):
        d = root / f"p{i}"
        d.mkdir(parents=True)
        shutil.copy(f, d / f.name)
    # and the two ways onto a 1M window, which no shipped session takes: a
    # turn on a [1m] model, and a turn that recorded past 200k
    big = {"input_tokens": 10, "output_tokens": 5, "cache_read_input_tokens": 250_000,
           "cache_creation_input_tokens": 0}
    for name, model, usage in (("1m-model", "claude-opus-5[1m]", None), ("past-200k", "claude-opus-5", big)):
        u = user("hello")
        write(root / name / ("5e55e55e-0000-4000-8000-00000000000%d.jsonl" % len(name)),
              [u, assistant("hi", u["uuid"], model=model, usage=usage)])
    conn = db.connect(tmp_path / "catalog.db")
    refresh(conn, [root])
    seen = set()
    for path, window in conn.execute("SELECT f.path, g.window_tokens FROM context_gauge g JOIN files f ON f.id = g.file_id"):
        assert rescue.window_of(Transcript.load(path)) == window, path
        seen.add(window)
    assert seen == {200_000, 1_000_000}


EVERGREEN = (Path(__file__).resolve().parents[1].parent / "shared" / "corpus" / "real" / "bradymholt-dotfiles"
             / "-Users-bholt-dev-evergreen" / "354b2588-2a5c-43d7-b678-e95a4a87bd2a.jsonl")


def test_a_message_wrapper_is_counted_once_however_the_file_is_read(tmp_path):
    """The results of parallel tool calls go as one user message, the lines
    of one assistant message as one (records.message_link): a file read in
    two refreshes (grown) stores the same per-record tokens as one read from
    the start, and a surgery's transcript the same chain sizes."""
    if not EVERGREEN.is_file():
        pytest.skip("corpus not present")
    lines = EVERGREEN.read_bytes().splitlines(keepends=True)
    whole, grown = tmp_path / "whole" / "p", tmp_path / "grown" / "p"
    for d in (whole, grown):
        d.mkdir(parents=True)
    (whole / EVERGREEN.name).write_bytes(b"".join(lines))
    path = grown / EVERGREEN.name
    # cut between two results of one parallel call (a user line below a user line)
    cut = next(i for i in range(len(lines) // 2, len(lines)) if b'"tool_result"' in lines[i]
               and b'"tool_result"' in lines[i - 1] and b'"type":"user"' in lines[i])
    path.write_bytes(b"".join(lines[:cut]))
    conns = {}
    for name, root in (("whole", whole.parent), ("grown", grown.parent)):
        conns[name] = db.connect(tmp_path / f"{name}.db")
        refresh(conns[name], [root])
    path.write_bytes(b"".join(lines))
    refresh(conns["grown"], [grown.parent])
    sql = ("SELECT r.offset, r.tokens FROM records r JOIN chain c ON c.file_id = r.file_id AND c.offset = r.offset"
           " ORDER BY c.pos")
    stored = {name: conn.execute(sql).fetchall() for name, conn in conns.items()}
    assert stored["grown"] == stored["whole"]
    # the transcript a surgery reads sizes the chain as the catalog stored it
    t = Transcript.load(path)
    prefix = ops.chain_prefix_estimates(t)
    steps = [b - a for a, b in zip(prefix, prefix[1:])]
    assert steps == [tok for _o, tok in stored["whole"]]
    for conn in conns.values():
        conn.close()


def test_the_migration_re_reads_files_sized_by_the_older_envelope(tmp_path):
    """Migration 027 marks every file holding conversation lines for a
    re-read, so an older catalog's stored sizes (20 tokens a block, no
    message wrapper) follow the rule, and the estimate stored with them."""
    if not EVERGREEN.is_file():
        pytest.skip("corpus not present")
    proj = tmp_path / "projects" / "p"
    proj.mkdir(parents=True)
    shutil.copyfile(EVERGREEN, proj / EVERGREEN.name)
    conn = db.connect(tmp_path / "c.db")
    refresh(conn, [tmp_path / "projects"])
    right = conn.execute("SELECT sum(tokens) FROM records").fetchone()[0]
    est = conn.execute("SELECT est_context_tokens FROM sessions").fetchone()[0]
    # as the older rule left them: each block's 20, no wrapper
    conn.execute("UPDATE records SET tokens = (SELECT sum(b.tokens) + 20 * count(*) FROM blocks b"
                 " WHERE b.file_id = records.file_id AND b.offset = records.offset)"
                 " WHERE type IN ('user', 'assistant')")
    conn.execute("UPDATE sessions SET est_context_tokens = est_context_tokens - 500")
    conn.execute("DELETE FROM _txdb_migrations WHERE name LIKE '027%'")
    conn.close()
    conn = db.connect(tmp_path / "c.db")
    assert conn.execute("SELECT inode IS NULL FROM files").fetchone()[0] == 1
    refresh(conn, [tmp_path / "projects"])
    assert conn.execute("SELECT sum(tokens) FROM records").fetchone()[0] == right
    assert conn.execute("SELECT est_context_tokens FROM sessions").fetchone()[0] == est
    conn.close()
