"""Targets chosen by query: `--where` on the strip commands, plan / apply /
`apply --all-pending`, stale files, refusals, and the surgeries log.

Real session files in tmp_path, a real SQLite catalog, the real CLI entry
point (click's runner, in-process); nothing mocked.
"""

from __future__ import annotations

import json
import os
import shutil
from datetime import datetime, timedelta, timezone
from pathlib import Path

import orjson
import pytest

from txdb.model import sidecar as sc
from click.testing import CliRunner

from txdb.catalog import db
from txdb.cli import cli
from txdb.catalog.ingest.store import refresh
from txdb.surgery import pending as pend
from txdb.surgery import select as sel
from txdb.surgery.engine import PassOptions

from conftest import rows, run

DATA = Path(__file__).parent / "data"
EDGE = DATA / "surgery" / "edge.jsonl"
TOOLS = next((DATA / "cli" / "-tmp-txdb-cli-fixtures-tools-demo").glob("*.jsonl"))
EF = "ef958aa1-0e93-49f0-bb71-150f63befcd1"
EDGE_ID = "11111111-2222-3333-4444-555555555555"
EXAMPLE_ATT = "type = 'task_reminder' and age_days > 7"
EXAMPLE_READ = "tool_name = 'Read' and result_tokens > 10000"


def iso(days_ago: float) -> str:
    t = datetime.now(timezone.utc) - timedelta(days=days_ago)
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


def set_timestamps(path: Path, ages: dict[str, float]) -> None:
    """Rewrite the timestamp of the records with these uuids (input preparation)."""
    out = []
    for ln in path.read_bytes().splitlines(keepends=True):
        body = ln.rstrip(b"\r\n")
        try:
            o = orjson.loads(body)
        except orjson.JSONDecodeError:
            out.append(ln)
            continue
        if isinstance(o, dict) and o.get("uuid") in ages:
            o["timestamp"] = iso(ages[o["uuid"]])
            out.append(orjson.dumps(o) + ln[len(body):])
        else:
            out.append(ln)
    path.write_bytes(b"".join(out))


def snapshot_tree(root: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def lines(data: bytes) -> list[bytes]:
    return data.splitlines()


def _is_thinking(b) -> bool:
    return isinstance(b, dict) and (b.get("type") in ("thinking", "redacted_thinking") or (
        b.get("type") == "text" and str(b.get("text", "")).lstrip().startswith(("<thinking>", "<think>"))))


def _norm(o: dict) -> dict:
    """An assistant line as far as a strip of something else may not change it:
    without usage (usage reset lowers it), thinking (preserved thinking: the API
    drops later thinking after an edit, txdb removes it) and parent pointers."""
    o = json.loads(json.dumps(o))
    o.pop("parentUuid", None)
    o.pop("leafUuid", None)
    o.pop("persistedThinking", None)  # where the dropped thinking's markers go (saved, never sent)
    m = o.get("message")
    if isinstance(m, dict):
        m.pop("usage", None)
        if isinstance(m.get("content"), list):
            m["content"] = [b for b in m["content"] if not _is_thinking(b)]
            if m["content"] == [{"type": "text", "text": "[thinking stripped by txdb]"}]:
                m["content"] = []
    return o


def check_only(before: bytes, after: bytes, removed_uuids: set[str] = frozenset(), *, strict: bool = True,
               may_change=lambda o: False) -> None:
    """`after` is `before` without the lines of ``removed_uuids`` (exactly those
    must go), and every other line is byte-identical, except:

    - children whose parentUuid (or a leafUuid) was re-pointed to a surviving
      ancestor differ in that key only (checked exactly);
    - lines ``may_change(obj)`` accepts (the targets of a tool strip);
    - unless ``strict``: assistant lines may differ in usage (usage reset) and
      lose thinking (preserved thinking), a thinking-only line may go.

    The contract checker must pass too."""
    from invariants import contract_violations
    assert contract_violations(before, after) == []
    b_objs = [(ln, orjson.loads(ln)) for ln in before.splitlines() if ln.strip()]
    a_objs = [(ln, orjson.loads(ln)) for ln in after.splitlines() if ln.strip()]
    parent = {o["uuid"]: o.get("parentUuid") for _, o in b_objs if o.get("uuid") in removed_uuids}
    assert set(parent) == set(removed_uuids), "a uuid to remove is not in the file"
    assert not removed_uuids & {o.get("uuid") for _, o in a_objs}, "a target is still there"

    def survivor(u):
        while u in parent:
            u = parent[u]
        return u
    i = 0
    for bl, bo in b_objs:
        if bo.get("uuid") in removed_uuids:
            continue
        if i >= len(a_objs) or (a_objs[i][1].get("uuid") != bo.get("uuid")):
            # only a line of nothing but thinking may vanish (preserved thinking)
            content = (bo.get("message") or {}).get("content")
            assert not strict and bo.get("type") == "assistant" and isinstance(content, list) \
                and all(_is_thinking(b) for b in content), f"line lost: {bl[:160]!r}"
            parent[bo["uuid"]] = bo.get("parentUuid")
            continue
        al, ao = a_objs[i]
        i += 1
        if al == bl or may_change(bo):
            continue
        expect = dict(bo)
        for key in ("parentUuid", "leafUuid"):
            if bo.get(key) in parent:
                expect[key] = survivor(bo[key])
        if ao == expect and expect != bo:
            continue
        assert not strict and bo.get("type") == "assistant" and _norm(ao) == _norm(bo), \
            f"line changed without a reason: {bl[:160]!r}"
    assert i == len(a_objs), "lines added"


@pytest.fixture
def tree(tmp_path, projects):
    """The fixture projects plus edge.jsonl as a session with two old task
    reminders (30 days) and a recent one (1 day); catalog refreshed."""
    proj = projects / "-tmp-edge"
    proj.mkdir()
    edge = proj / f"{EDGE_ID}.jsonl"
    shutil.copyfile(EDGE, edge)
    set_timestamps(edge, {"a-att1": 30, "a-att2": 29, "a-att5": 1})
    dbp = tmp_path / "catalog.db"
    conn = db.connect(dbp)
    refresh(conn, [projects])
    conn.close()
    return projects, dbp


def _ef(projects: Path) -> Path:
    return next(projects.rglob(f"{EF}.jsonl"))


def _surgeries(dbp):
    c = db.connect(dbp)
    try:
        return rows(c, "SELECT * FROM surgeries ORDER BY id")
    finally:
        c.close()


# -- the task_reminder example ------------------------------------------------

STRICT = ["--keep-dropped-thinking", "--no-usage-reset"]


@pytest.mark.parametrize("flags", [[], STRICT], ids=["as-written", "strict"])
def test_task_reminder_example_removes_exactly_the_old_ones(tree, flags):
    """As written: the old reminders go, children are re-parented, and the
    documented consequences (usage reset, preserved thinking on the opus-5-5
    edge session) touch assistant lines only. With --keep-dropped-thinking
    --no-usage-reset: nothing else changes, byte for byte."""
    projects, dbp = tree
    edge = projects / "-tmp-edge" / f"{EDGE_ID}.jsonl"
    ef = _ef(projects)
    before = snapshot_tree(projects)

    r = run("strip-attachments", "--where", EXAMPLE_ATT, "--db", dbp, *flags)
    assert r.exit_code == 0, r.output
    assert "pending" in r.output and "targets" in r.output
    # plan mode: no original changed; one pending copy (+ sidecar) per affected session, nothing else
    now = snapshot_tree(projects)
    for p, data in before.items():
        assert now[p] == data, p
    new = sorted(str(p.relative_to(projects)) for p in set(now) - set(before))
    # (and the thinking the edit makes the API drop, saved: each file one the pending copy names)
    named = {str(Path(p).relative_to(projects)) for f in (edge, ef) if pend.pending_path(f).exists()
             for p in sc.referenced(pend.pending_path(f).read_bytes())}
    saved = [p for p in new if "/persisted/thinking/" in p]
    assert set(saved) <= named
    assert [p for p in new if p not in saved] == sorted(str(p.relative_to(projects)) for p in (
        pend.pending_path(edge), pend.meta_path(edge), pend.pending_path(ef), pend.meta_path(ef)))
    assert _surgeries(dbp) == []

    r = run("apply", "--all-pending", "--db", dbp)
    assert r.exit_code == 0, r.output
    assert "2 of 2 pending copies applied" in r.output
    strict = bool(flags)
    check_only(before[edge], edge.read_bytes(), {"a-att1", "a-att2"}, strict=strict)
    check_only(before[ef], ef.read_bytes(), {"34b47ba6-998b-48db-82cd-7c237ab588a8"}, strict=strict)
    for p, data in before.items():  # every other file untouched
        if p not in (edge, ef):
            assert p.read_bytes() == data, p
    assert not pend.pending_path(edge).exists() and not pend.meta_path(edge).exists()

    # the catalog was refreshed for both files: only the recent reminder is left
    c = db.connect(dbp)
    left = rows(c, "SELECT session_id, timestamp FROM attachment_targets WHERE type = 'task_reminder'")
    c.close()
    assert [x["session_id"] for x in left] == [EDGE_ID]
    r = run("strip-attachments", "--where", EXAMPLE_ATT, "--db", dbp)
    assert r.exit_code == 0 and "nothing to do" in r.output


@pytest.mark.parametrize("flags", [[], STRICT], ids=["as-written", "strict"])
def test_task_reminder_example_on_a_real_session_with_six(tmp_path, corpus, flags):
    """A real session (CLI 2.1.x) with 6 task_reminders: the 2 newest made recent,
    the 4 others old; exactly those 4 go."""
    src = next(corpus.joinpath("real").rglob("9f11783a-9bf6-44b6-bc6e-65aadfb575ee.jsonl"))
    proj = tmp_path / "projects" / "-p"
    proj.mkdir(parents=True)
    f = proj / src.name
    shutil.copyfile(src, f)
    f.chmod(0o600)
    rems = [orjson.loads(ln) for ln in f.read_bytes().splitlines() if b'"task_reminder"' in ln]
    rems = [o for o in rems if o.get("type") == "attachment"]
    assert len(rems) == 6
    set_timestamps(f, {o["uuid"]: (40 - i if i < 4 else 2) for i, o in enumerate(rems)})
    before = f.read_bytes()
    dbp = tmp_path / "c.db"
    assert run("refresh", "--root", tmp_path / "projects", "--db", dbp).exit_code == 0
    r = run("strip-attachments", "--where", EXAMPLE_ATT, "--db", dbp, "--apply", "--json", *flags)
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert [(s["targets"], s["changed"], s["status"]) for s in out["sessions"]] == [(4, 4, "applied")]
    check_only(before, f.read_bytes(), {o["uuid"] for o in rems[:4]}, strict=bool(flags))


def test_keep_all_types_stay_unless_drop_all_types(tree):
    projects, dbp = tree
    edge = projects / "-tmp-edge" / f"{EDGE_ID}.jsonl"
    r = run("strip-attachments", "--where", "session_id = '%s'" % EDGE_ID, "--db", dbp, "--json")
    assert r.exit_code == 0, r.output
    [s] = json.loads(r.output)["sessions"]
    # 3 task_reminders + the free hook_success go; queued_command (keep-all) stays
    assert s["targets"] == 5 and s["changed"] == 4
    pending = pend.pending_path(edge).read_bytes()
    assert b'"queued_command"' in pending and b'"task_reminder"' not in pending
    r = run("strip-attachments", "--where", "type = 'queued_command'", "--types", "queued_command", "--drop-all",
            "--db", dbp, "--json")
    assert r.exit_code == 0, r.output
    assert b'"queued_command"' not in pend.pending_path(edge).read_bytes()


# -- the Read example ---------------------------------------------------------

def _big_read_session(projects: Path) -> tuple[Path, str, str]:
    """The tools-demo session with its first Read result grown to ~60,000 chars
    (~15,000 tokens); the second Read stays small. Returns (file, big id, small id)."""
    proj = projects / "-tmp-bigread"
    proj.mkdir()
    f = proj / TOOLS.name
    out, ids = [], []
    names = {}
    for ln in TOOLS.read_bytes().splitlines(keepends=True):
        o = orjson.loads(ln)
        content = (o.get("message") or {}).get("content")
        if isinstance(content, list):
            for b in content:
                if b.get("type") == "tool_use":
                    names[b["id"]] = b["name"]
                if b.get("type") == "tool_result" and names.get(b["tool_use_id"]) == "Read":
                    ids.append(b["tool_use_id"])
                    if len(ids) == 1:
                        b["content"] = "\n".join(f"{i:6d}\tline {i} of a big file" for i in range(2500))
                        ln = orjson.dumps(o) + b"\n"
        out.append(ln)
    f.write_bytes(b"".join(out))
    return f, ids[0], ids[1]


def _results(data: bytes) -> dict[str, object]:
    out = {}
    for ln in data.splitlines():
        o = orjson.loads(ln)
        for b in (o.get("message") or {}).get("content") or []:
            if isinstance(b, dict) and b.get("type") == "tool_result":
                out[b["tool_use_id"]] = b["content"]
    return out


def _without_usage(o: dict) -> dict:
    o = json.loads(json.dumps(o))
    if isinstance(o.get("message"), dict):
        o["message"].pop("usage", None)
    return o


def test_read_example_strips_exactly_those_results(tmp_path, projects):
    f, big, small = _big_read_session(projects)
    dbp = tmp_path / "c.db"
    c = db.connect(dbp)
    refresh(c, [projects])
    expect = {r["tool_use_id"] for r in rows(
        c, f"SELECT tool_use_id FROM block_targets WHERE kind = 'tool_result' AND {EXAMPLE_READ}")}
    c.close()
    assert expect == {big}
    before_tree = snapshot_tree(projects)
    before = f.read_bytes()

    r = run("strip-tools", "--where", EXAMPLE_READ, "--only-results", "--db", dbp, "--apply")
    assert r.exit_code == 0, r.output
    after = f.read_bytes()
    res_b, res_a = _results(before), _results(after)
    assert str(res_a[big]).startswith("[stripped by txdb: ")
    assert {k for k in res_b if res_a[k] != res_b[k]} == {big}
    # line for line: only the result line changed; assistant lines at most by usage reset / preserved thinking
    check_only(before, after, strict=False, may_change=lambda o: big in json.dumps(o))
    for p, data in before_tree.items():
        if p != f:
            assert p.read_bytes() == data, p
    [log] = _surgeries(dbp)
    assert log["command"] == "strip-tools" and log["path"] == str(f.resolve())
    args = json.loads(log["arguments"])
    assert args == {"where": EXAMPLE_READ, "only_results": True, "pass_at": args["pass_at"],
                    "swap": args["swap"]}  # its swap journal entry
    assert [e["id"] for e in json.loads(Path(f"{f.resolve()}.swaps.json").read_bytes())["swaps"]] == [args["swap"]]


def test_read_example_on_the_generated_corpus(tmp_path, corpus):
    root = tmp_path / "projects"
    shutil.copytree(corpus / "generated", root)
    for p in root.rglob("*"):
        p.chmod(0o700 if p.is_dir() else 0o600)
    dbp = tmp_path / "c.db"
    c = db.connect(dbp)
    refresh(c, [root])
    want = {}
    for r in rows(c, f"SELECT path, tool_use_id FROM block_targets WHERE kind = 'tool_result' AND {EXAMPLE_READ}"):
        want.setdefault(r["path"], set()).add(r["tool_use_id"])
    c.close()
    assert len(want) >= 3
    befores = {p: Path(p).read_bytes() for p in want}
    r = run("strip-tools", "--where", EXAMPLE_READ, "--only-results", "--db", dbp, "--apply", "--json")
    assert r.exit_code == 0, r.output
    for p, ids in want.items():
        b, a = _results(befores[p]), _results(Path(p).read_bytes())
        changed = {k for k in b if a[k] != b[k]}
        assert changed == ids, p
    assert len(_surgeries(dbp)) == len(want)


# -- stale files, bad input, refusals ----------------------------------------

def test_stale_file_is_refreshed_and_requeried(tree):
    projects, dbp = tree
    edge = projects / "-tmp-edge" / f"{EDGE_ID}.jsonl"
    data = edge.read_bytes()
    if not data.endswith(b"\n"):
        data += b"\n"
    sid = EDGE_ID
    extra = [
        {"parentUuid": "u-12", "isSidechain": False, "type": "attachment", "uuid": "a-late",
         "timestamp": iso(20), "sessionId": sid,
         "attachment": {"type": "task_reminder", "content": [], "itemCount": 0}},
        {"parentUuid": "a-late", "isSidechain": False, "type": "user", "uuid": "u-late", "timestamp": iso(20),
         "sessionId": sid, "message": {"role": "user", "content": "one more"}},
    ]
    edge.write_bytes(data + b"".join(orjson.dumps(o) + b"\n" for o in extra))
    before = edge.read_bytes()
    r = run("strip-attachments", "--where", EXAMPLE_ATT, "--db", dbp, "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["refreshed"] == [str(edge.resolve())]
    s = next(s for s in out["sessions"] if s["session_id"] == EDGE_ID)
    assert s["targets"] == 3 and s["changed"] == 3  # the appended old reminder was found after the refresh
    c = db.connect(dbp)
    size = c.execute("SELECT size FROM files WHERE path = ?", (str(edge.resolve()),)).fetchone()[0]
    c.close()
    assert size == len(before)
    assert edge.read_bytes() == before
    check_only(before, pend.pending_path(edge).read_bytes(), {"a-att1", "a-att2", "a-late"}, strict=False)


@pytest.mark.parametrize("cond,msg", [
    ("type = 'task_reminder'; DELETE FROM files", "not statements"),
    ("type = ", "syntax error"),
    ("no_such_column = 1", "no such column"),
    ("1) UNION SELECT 1 --", "unbalanced"),
    ("type = 'x' -- comment", "comments"),
    ("(type = 'x'", "unbalanced"),
    ("type = 'x", "unterminated"),
    ("   ", "empty"),
])
def test_bad_where_is_one_line_error(tree, cond, msg):
    projects, dbp = tree
    before = snapshot_tree(projects)
    r = run("strip-attachments", "--where", cond, "--db", dbp)
    assert r.exit_code != 0
    out = r.output.strip()
    assert out.startswith("Error:") and "\n" not in out and msg in out, out
    assert "Traceback" not in r.output
    assert snapshot_tree(projects) == before


def test_where_in_a_string_literal_is_fine(tree):
    projects, dbp = tree
    r = run("strip-tools", "--where", "tool_name = 'a;b -- (c' or tool_name = \"x\"", "--db", dbp)
    assert r.exit_code == 0, r.output
    assert "nothing to do" in r.output


def test_usage_errors(tree):
    projects, dbp = tree
    for args in (["strip-tools", EDGE_ID, "--where", "1"], ["strip-tools"],
                 ["strip-thinking", "--where", "1", "--from", "2"],
                 ["strip-all", "--where", "1", "--apply", "--fork"],
                 ["strip-attachments", "--where", "1", "--list"], ["apply"], ["apply", EDGE_ID, "--all-pending"]):
        r = run(*args, "--db", dbp)
        assert r.exit_code == 2, (args, r.output)
        assert "Traceback" not in r.output


def test_a_refusal_does_not_stop_the_others(tree):
    projects, dbp = tree
    edge = projects / "-tmp-edge" / f"{EDGE_ID}.jsonl"
    ef = _ef(projects)
    r = run("strip-attachments", "--where", EXAMPLE_ATT, "--db", dbp)
    assert r.exit_code == 0, r.output
    # the edge original is rewritten after its snapshot: its apply must refuse
    data = bytearray(edge.read_bytes())
    data[data.index(b"Edge cases")] = ord("e")
    edge.write_bytes(bytes(data))
    ef_before = ef.read_bytes()
    r = CliRunner().invoke(cli, ["apply", "--all-pending", "--db", str(dbp)])
    assert r.exit_code == 1
    assert "1 of 2 pending copies applied; 1 refused" in r.stdout
    assert "Refused:" in r.stderr and "rewritten since the snapshot" in r.stderr
    assert edge.read_bytes() == bytes(data)  # the refusal changed nothing
    assert pend.pending_path(edge).exists()
    assert ef.read_bytes() != ef_before and not pend.pending_path(ef).exists()
    logs = _surgeries(dbp)
    assert [x["session_id"] for x in logs] == [EF]


def test_plan_refusal_in_one_session_others_planned(tree):
    """A file rewritten between the query and the surgery is refused (its rows
    are no longer at their offsets); the other sessions go on."""
    projects, dbp = tree
    edge = projects / "-tmp-edge" / f"{EDGE_ID}.jsonl"
    ef = _ef(projects)
    conn = db.connect(dbp)
    selection = sel.select_targets(conn, dbp, "strip-attachments", EXAMPLE_ATT)
    assert {Path(s.path).name for s in selection.sessions} == {edge.name, ef.name}
    edge.write_bytes(b"\n" + edge.read_bytes())  # every offset moves by one
    outs = sel.plan(conn, selection, "strip-attachments", {}, PassOptions(arguments={"where": EXAMPLE_ATT}))
    conn.close()
    by = {Path(o.path).name: o for o in outs}
    assert by[edge.name].status == "refused" and "changed since it was indexed" in by[edge.name].error
    assert by[ef.name].status == "pending"
    assert not pend.pending_path(edge).exists()


def test_dry_run_writes_nothing_at_all(tree):
    projects, dbp = tree
    before = snapshot_tree(projects)
    for cmd, cond in (("strip-attachments", EXAMPLE_ATT), ("strip-all", "on_chain = 1")):
        r = run(cmd, "--where", cond, "--db", dbp, "--dry-run", "--apply")
        assert r.exit_code == 0, r.output
        assert "Dry run: nothing written." in r.output
    assert snapshot_tree(projects) == before
    assert _surgeries(dbp) == []


def test_strip_thinking_where_removes_exactly_the_selected_block(tree):
    projects, dbp = tree
    edge = projects / "-tmp-edge" / f"{EDGE_ID}.jsonl"
    c = db.connect(dbp)
    think = rows(c, "SELECT offset, idx, chars, signature_chars FROM block_targets "
                    "WHERE session_id = ? AND kind = 'thinking' ORDER BY offset", (EDGE_ID,))
    c.close()
    assert len(think) >= 2
    last = think[-1]
    cond = f"session_id = '{EDGE_ID}' and kind = 'thinking' and offset = {last['offset']}"
    r = run("strip-thinking", "--where", cond, "--db", dbp, "--keep-dropped-thinking", "--no-usage-reset",
            "--json")
    assert r.exit_code == 0, r.output
    [s] = json.loads(r.output)["sessions"]
    assert s["targets"] == 1 and s["changed"] == 1
    before, after = edge.read_bytes(), pend.pending_path(edge).read_bytes()
    changed = [(x, y) for x, y in zip(before.splitlines(), after.splitlines()) if x != y]
    bl = [ln for ln in before.splitlines() if ln.strip()]
    al = [ln for ln in after.splitlines() if ln.strip()]
    # either the block's line was rewritten without it, or (one block per line) the line went
    if len(al) == len(bl):
        assert len(changed) == 1
    else:
        assert len(al) == len(bl) - 1


def test_plan_json_and_table(tree):
    projects, dbp = tree
    r = run("strip-all", "--where", "on_chain = 1 and kind in ('tool_result', 'thinking')", "--db", dbp, "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["view"] == "block_targets" and out["rows"] > 0 and out["refused"] == 0
    for s in out["sessions"]:
        assert {"session_id", "title", "targets", "changed", "tokens_before", "tokens_after", "status"} <= set(s)
        assert s["tokens_after"] <= s["tokens_before"]
    r = run("strip-all", "--where", "on_chain = 1", "--db", dbp)  # reuses the pending copies: passes add up
    assert r.exit_code == 0, r.output
    head = r.output.splitlines()[0]
    for col in ("session", "title", "targets", "est. tokens", "status"):
        assert col in head


def test_a_later_pass_counts_its_own_savings_only(tree):
    """Issue 9 item 14: a second --where pass on the same pending copy that
    changes nothing saves nothing; one that changes something reports what
    it removed from the pending copy, not the sum of every earlier pass."""
    projects, dbp = tree
    cond = "on_chain = 1 and kind = 'tool_result'"
    first = json.loads(run("strip-tools", "--where", cond, "--only-results", "--db", dbp, "--json").output)
    done = [s for s in first["sessions"] if s["status"] == "pending"]
    assert done and sum(s["tokens_before"] - s["tokens_after"] for s in done) > 0
    again = run("strip-tools", "--where", cond, "--only-results", "--db", dbp)
    assert again.exit_code == 0, again.output
    assert "0 changed; ~0 estimated tokens saved (0 bytes removed) by this pass." in again.output
    again = json.loads(run("strip-tools", "--where", cond, "--only-results", "--db", dbp, "--json").output)
    for s in again["sessions"]:
        assert s["changed"] == 0 and s["tokens_before"] == s["tokens_after"]
        assert s["bytes_before"] == s["bytes_after"]
    # a new pass on top: its "before" is where the first pass ended
    ends = {s["path"]: s["tokens_after"] for s in done}
    third = json.loads(run("strip-thinking", "--where", "on_chain = 1 and kind = 'thinking'", "--db", dbp,
                           "--json").output)
    for s in third["sessions"]:
        if s["path"] in ends and s["tokens_before"] is not None:
            assert s["tokens_before"] == ends[s["path"]]


# -- the surgeries log ---------------------------------------------------------

def test_surgeries_rows_are_whole_and_correct(tree):
    projects, dbp = tree
    edge = projects / "-tmp-edge" / f"{EDGE_ID}.jsonl"
    original = edge.read_bytes()
    assert run("strip-tools", EDGE_ID, "--only-results", "--db", dbp).exit_code == 0
    assert run("strip-attachments", "--where", f"session_id = '{EDGE_ID}' and type = 'task_reminder'",
               "--keep-recent", "1", "--db", dbp).exit_code == 0
    meta = json.loads(pend.meta_path(edge).read_text())
    assert [p["command"] for p in meta["passes"]] == ["strip-tools", "strip-attachments"]
    r = run("apply", EDGE_ID, "--db", dbp, "--json")
    assert r.exit_code == 0, r.output
    rep = json.loads(r.output)
    logs = _surgeries(dbp)
    assert [x["id"] for x in logs] == rep["surgery_ids"]
    c = db.connect(dbp)
    fid = c.execute("SELECT id FROM files WHERE path = ?", (str(edge.resolve()),)).fetchone()[0]
    view = rows(c, "SELECT * FROM surgery_log ORDER BY id")
    c.close()
    assert [x["command"] for x in logs] == ["strip-tools", "strip-attachments"]
    for x in logs:
        assert all(x[k] is not None for k in ("at", "command", "arguments", "session_id", "file_id", "path",
                                                "backup_path", "records_changed", "tokens_before", "tokens_after"))
        assert x["session_id"] == EDGE_ID and x["file_id"] == fid and x["path"] == str(edge.resolve())
        assert Path(x["backup_path"]).read_bytes() == original
        assert x["records_changed"] > 0 and x["tokens_after"] < x["tokens_before"]
        datetime.fromisoformat(x["at"].replace("Z", "+00:00"))
    a0, a1 = (json.loads(x["arguments"]) for x in logs)
    assert a0["only_results"] is True and "where" not in a0
    assert a1["where"].startswith("session_id") and a1["keep_recent"] == 1
    assert logs[1]["tokens_before"] == logs[0]["tokens_after"]  # pass 2 started where pass 1 ended
    assert len(view) == 2 and {v["tokens_saved"] for v in view} == {x["tokens_before"] - x["tokens_after"] for x in logs}


def test_snapshot_then_apply_is_logged_too(tree):
    projects, dbp = tree
    ef = _ef(projects)
    assert run("snapshot", ef, "--db", dbp).exit_code == 0
    assert run("apply", ef, "--db", dbp, "--no-backup").exit_code == 0
    [x] = _surgeries(dbp)
    assert x["command"] == "apply" and x["records_changed"] == 0 and x["backup_path"] is None
    assert x["tokens_before"] == x["tokens_after"] > 0


def test_apply_all_pending_none(tree):
    projects, dbp = tree
    r = run("apply", "--all-pending", "--db", dbp)
    assert r.exit_code == 0 and "No pending copies." in r.output


def test_fork_with_where_is_logged(tree):
    projects, dbp = tree
    edge = projects / "-tmp-edge" / f"{EDGE_ID}.jsonl"
    before = snapshot_tree(projects)
    r = run("strip-attachments", "--where", f"session_id = '{EDGE_ID}' and type = 'task_reminder'", "--fork",
            "--db", dbp, "--json")
    assert r.exit_code == 0, r.output
    [s] = json.loads(r.output)["sessions"]
    assert s["status"] == "fork" and Path(s["fork"]).is_file()
    assert edge.read_bytes() == before[edge] and not pend.pending_path(edge).exists()
    [x] = _surgeries(dbp)
    assert x["path"] == s["fork"] and x["session_id"] != EDGE_ID and os.path.isfile(x["path"])


def test_apply_all_refuses_a_file_being_written_and_applies_the_rest(tree):
    """One shared settle: a file a writer appends to every 100 ms is refused
    (and not changed by txdb), the quiet one is applied."""
    import threading
    import time

    projects, dbp = tree
    edge = projects / "-tmp-edge" / f"{EDGE_ID}.jsonl"
    ef = _ef(projects)
    r = run("strip-attachments", "--where", EXAMPLE_ATT, "--db", dbp)
    assert r.exit_code == 0, r.output
    stop = threading.Event()
    line = orjson.dumps({"type": "cost-state", "sessionId": EDGE_ID, "totalCostUSD": 0.02}) + b"\n"
    data = edge.read_bytes()
    if not data.endswith(b"\n"):
        edge.write_bytes(data + b"\n")

    def writer():
        while not stop.is_set():
            with open(edge, "ab") as fh:
                fh.write(line)
            time.sleep(0.1)
    th = threading.Thread(target=writer)
    th.start()
    try:
        time.sleep(0.15)
        conn = db.connect(dbp)
        outs = sel.apply_all(conn, sel.all_pending(conn))
        conn.close()
    finally:
        stop.set()
        th.join()
    by = {Path(o.path).name: o for o in outs}
    assert not by[edge.name].applied and "being written" in by[edge.name].error
    assert by[ef.name].applied and by[ef.name].surgery_ids
    assert pend.pending_path(edge).exists()
    assert b'"a-att1"' in edge.read_bytes()  # untouched by txdb (only the writer's lines added)


def test_every_surgery_command_is_declared_once_and_where_follows_its_view():
    """The declarations (surgery/commands.py) are what the CLI runs: each
    declared command is a CLI command; a command takes --where exactly when its
    declaration names a target view, and that view is what --where selects."""
    import importlib

    from txdb.cli.commands import COMMANDS as CLI
    from txdb.surgery.commands import COMMANDS
    for m in {e.module for e in CLI.values()}:
        importlib.import_module(m)
    assert set(COMMANDS) <= set(CLI)
    for name, c in COMMANDS.items():
        takes_where = any(p.name == "where" for p in cli.commands[name].params)
        assert takes_where == (c.view is not None), name
        assert sel.VIEWS.get(name) == c.view


def test_the_plan_names_the_records_the_usage_reset_rewrites(tree):
    """Issue 19: a pass reports every record it rewrites; the usage reset's
    records (recorded usage lowered) apart from the targets it changed."""
    projects, dbp = tree
    cond = "on_chain = 1 and kind = 'tool_result'"
    out = json.loads(run("strip-tools", "--where", cond, "--only-results", "--db", dbp, "--dry-run",
                         "--json").output)
    lowered = {s["path"]: s["usage_lowered"] for s in out["sessions"]}
    assert sum(lowered.values()) > 0
    for s in out["sessions"]:
        assert s["usage_lowered"] == ((s["report"] or {}).get("usage") or {}).get("capped", 0)
    r = run("strip-tools", "--where", cond, "--only-results", "--db", dbp, "--dry-run")
    changed = sum(s["changed"] for s in out["sessions"])
    assert f"{changed} changed, {sum(lowered.values()):,} usage figures lowered;" in r.output
    none = run("strip-tools", "--where", cond, "--only-results", "--db", dbp, "--dry-run", "--no-usage-reset")
    assert f"{changed} changed;" in none.output and "usage figures lowered" not in none.output
