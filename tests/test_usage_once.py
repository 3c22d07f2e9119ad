"""Usage equals what the API billed: each API message once, its final figures.

- A forked subagent transcript (``<session>/subagents/agent-acompact-*``,
  ``agent-aside_question-*``) repeats its parent's lines, message id, request
  id and sessionId included: those API calls were billed once, and the usage
  views count them once, whichever file a refresh reads first.
- A streamed message whose lines carry growing usage (seen from a
  non-Anthropic model behind Claude Code: an input estimate and output 0 on
  the first line, the real figures on the last) counts its last line.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from rewind import rewind
from txdb.catalog import db
from txdb.catalog.ingest.store import refresh, refresh_path

from sessions import CORPUS  # noqa: E402
SID = "5e55e55e-0000-4000-8000-000000000001"
FIELDS = ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")


def _line(obj) -> str:
    return json.dumps(obj, separators=(",", ":")) + "\n"


def _turn(i: int, parent: str | None, cache_read: int, mid: str | None = None) -> list[dict]:
    mid = mid or f"msg_{i}"
    return [
        {"type": "user", "uuid": f"u{mid}", "parentUuid": parent, "sessionId": SID,
         "timestamp": f"2026-11-01T10:{i:02d}:00.000Z", "message": {"role": "user", "content": "x" * 400}},
        {"type": "assistant", "uuid": f"a{mid}", "parentUuid": f"u{mid}", "sessionId": SID,
         "requestId": f"req_{mid}", "timestamp": f"2026-11-01T10:{i:02d}:05.000Z",
         "message": {"id": mid, "role": "assistant", "model": "claude-x",
                     "content": [{"type": "text", "text": "ok"}],
                     "usage": {"input_tokens": 3, "output_tokens": 10, "cache_read_input_tokens": cache_read,
                               "cache_creation_input_tokens": 100}}},
    ]


def _session_with_fork(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A session of three turns and a compaction subagent that repeats the
    first two (as agent-acompact-* does) and adds one call of its own."""
    projects = tmp_path / "projects"
    proj = projects / "-p"
    (proj / SID / "subagents").mkdir(parents=True)
    parent = proj / f"{SID}.jsonl"
    turns = _turn(0, None, 5_000) + _turn(1, "amsg_0", 9_000) + _turn(2, "amsg_1", 12_000)
    parent.write_text("".join(map(_line, turns)))
    sub = proj / SID / "subagents" / "agent-acompact-e1f845.jsonl"
    own = _turn(3, "amsg_1", 20_000, mid="msg_sub")
    for o in own:
        o["isSidechain"] = True
        o["agentId"] = "acompact-e1f845"
    sub.write_text("".join(map(_line, turns[:4] + own)))
    return projects, parent, sub


def _billed(conn) -> tuple:
    return conn.execute("SELECT " + ", ".join(f"sum({f})" for f in FIELDS) + ", sum(api_messages) "
                        "FROM session_usage").fetchone()


def _per_file(conn) -> dict:
    return {Path(p).name: tuple(row) for p, *row in conn.execute(
        "SELECT f.path, su.api_messages, su.cache_read_input_tokens FROM session_usage su "
        "JOIN files f ON f.id = su.file_id")}


EXPECTED = (3 * 4, 10 * 4, 100 * 4, 5_000 + 9_000 + 12_000 + 20_000, 4)


@pytest.mark.parametrize("order", ["parent first", "subagent first"])
def test_a_forked_subagent_repeating_its_parent_counts_each_api_message_once(tmp_path, order):
    projects, parent, sub = _session_with_fork(tmp_path)
    conn = db.connect(tmp_path / "c.db")
    for f in ([parent, sub] if order == "parent first" else [sub, parent]):
        refresh_path(conn, f, str(projects))
    assert conn.execute("SELECT count(*) FROM usage").fetchone()[0] == 6  # rows stay per file
    assert _billed(conn) == EXPECTED
    # the repeated calls count in the parent session file, whichever was read first
    assert _per_file(conn) == {parent.name: (3, 26_000), sub.name: (1, 20_000)}
    by_day = conn.execute("SELECT sum(cache_read_input_tokens), sum(api_messages) FROM usage_by_day").fetchone()
    by_model = conn.execute("SELECT sum(cache_read_input_tokens), sum(api_messages) FROM usage_by_model").fetchone()
    assert by_day == by_model == (EXPECTED[3], 4)
    conn.close()


def test_the_count_stays_once_as_both_files_grow_in_either_order(tmp_path):
    """Incremental refresh: the subagent's copy arrives before the parent's
    line, then the parent grows; a full refresh agrees with a fresh catalog."""
    projects, parent, sub = _session_with_fork(tmp_path)
    full_parent, full_sub = parent.read_text(), sub.read_text()
    parent.write_text("".join(full_parent.splitlines(keepends=True)[:2]))
    conn = db.connect(tmp_path / "c.db")
    refresh(conn, [projects])
    assert _billed(conn)[3] == 5_000 + 9_000 + 20_000
    parent.write_text(full_parent)  # grows: msg_1 is now in both files
    assert refresh_path(conn, parent, str(projects)) == "grown"
    assert _billed(conn) == EXPECTED
    sub.write_text(full_sub + _line(_turn(4, "amsg_sub", 30_000, mid="msg_sub2")[1]))
    assert refresh(conn, [projects]).grown == 1
    fresh = db.connect(tmp_path / "fresh.db")
    refresh(fresh, [projects])
    assert _billed(conn) == _billed(fresh) == (EXPECTED[0] + 3, EXPECTED[1] + 10, EXPECTED[2] + 100,
                                               EXPECTED[3] + 30_000, 5)
    conn.close()
    fresh.close()


def test_other_sessions_repeating_a_message_id_still_count(tmp_path):
    """Only the same (message id, request id) merges: a message id under
    another request id is another API call."""
    projects, parent, sub = _session_with_fork(tmp_path)
    sub.write_text(sub.read_text().replace('"requestId":"req_msg_0"', '"requestId":"req_other"'))
    conn = db.connect(tmp_path / "c.db")
    refresh(conn, [projects])
    assert _billed(conn)[3] == EXPECTED[3] + 5_000
    conn.close()


# -- a streamed message's final figures -------------------------------------

def _streamed(mid: str, i: int, parent: str | None) -> list[dict]:
    """One API message as three lines (thinking, text, tool_use), the usage
    growing as the stream went: the first line carries the input estimate
    and output 0, the last the billed figures (the shape seen from a model
    served behind Claude Code through an Anthropic-compatible endpoint)."""
    figures = [(29_121, 0), (29_121, 0), (2_050, 420)]
    lines, prev = [], parent
    for k, (inp, out) in enumerate(figures):
        uid = f"{mid}-{k}"
        lines.append({"type": "assistant", "uuid": uid, "parentUuid": prev, "sessionId": SID,
                      "timestamp": f"2026-11-02T09:{i:02d}:0{k}.000Z",
                      "message": {"id": mid, "role": "assistant", "model": "qwen3:8b",
                                  "content": [{"type": "text", "text": f"part {k}"}],
                                  "usage": {"input_tokens": inp, "output_tokens": out,
                                            "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0}}})
        prev = uid
    return lines


def _figures(conn, mid):
    return conn.execute("SELECT input_tokens, output_tokens, gauge_input_tokens FROM usage WHERE message_id = ?",
                        (mid,)).fetchone()


def test_a_streamed_message_counts_its_last_line(tmp_path):
    proj = tmp_path / "projects" / "-p"
    proj.mkdir(parents=True)
    f = proj / f"{SID}.jsonl"
    user = {"type": "user", "uuid": "u0", "parentUuid": None, "sessionId": SID,
            "timestamp": "2026-11-02T09:00:00.000Z", "message": {"role": "user", "content": "hi"}}
    a, b = _streamed("msg_a", 1, "u0"), _streamed("msg_b", 2, "msg_a-2")
    f.write_text("".join(map(_line, [user] + a + b[:1])))  # msg_b is still streaming
    conn = db.connect(tmp_path / "c.db")
    refresh(conn, [tmp_path / "projects"])
    assert _figures(conn, "msg_a") == (2_050, 420, 2_050)
    assert _figures(conn, "msg_b") == (29_121, 0, 29_121)  # what the file says so far
    f.write_text("".join(map(_line, [user] + a + b)))
    assert refresh(conn, [tmp_path / "projects"]).grown == 1
    assert _figures(conn, "msg_b") == (2_050, 420, 2_050)
    assert conn.execute("SELECT input_tokens, output_tokens, api_messages FROM session_usage").fetchone() == \
        (4_100, 840, 2)
    conn.close()


def test_a_streamed_message_in_the_real_corpus_counts_its_last_line(tmp_path):
    src = CORPUS / "real" / "dalvarezrod-proyecto_jarvis"
    if not src.is_dir():
        pytest.skip("../shared/corpus is absent")
    projects = tmp_path / "projects"
    shutil.copytree(src, projects / "-jarvis")
    last: dict[str, tuple] = {}
    for f in (projects / "-jarvis").rglob("*.jsonl"):
        for raw in f.read_bytes().splitlines():
            o = json.loads(raw)
            m = o.get("message")
            if o.get("type") == "assistant" and isinstance(m, dict) and isinstance(m.get("usage"), dict):
                last[m["id"]] = (m["usage"].get("input_tokens") or 0, m["usage"].get("output_tokens") or 0)
    conn = db.connect(tmp_path / "c.db")
    refresh(conn, [projects])
    got = dict((mid, (i, o)) for mid, i, o in conn.execute(
        "SELECT message_id, input_tokens, output_tokens FROM billed_usage"))
    assert got == last
    assert got["msg_2ce552b35a0f3f19e19344fd"] == (2_050, 420)  # its first line: (29121, 0)
    conn.close()


def test_a_catalog_from_before_the_last_line_rule_takes_the_final_figures(tmp_path):
    """Migration 013: a catalog whose rows hold a streamed message's first
    line keeps showing them until the next refresh, which re-reads the file
    once and takes the last line; a file a surgery rewrote keeps its rows."""
    proj = tmp_path / "projects" / "-p"
    proj.mkdir(parents=True)
    f = proj / f"{SID}.jsonl"
    f.write_text("".join(map(_line, _streamed("msg_a", 1, None))))
    path = tmp_path / "old.db"
    conn = db.connect(path)
    refresh(conn, [tmp_path / "projects"])
    # back to schema 011 with the first line's figures, as it stored them
    conn.execute("UPDATE usage SET input_tokens = 29121, output_tokens = 0, gauge_input_tokens = 29121")
    rewind(conn, "013")
    conn.close()
    conn = db.connect(path)
    assert _figures(conn, "msg_a") == (29_121, 0, 29_121)  # no gap before the refresh
    assert refresh(conn, [tmp_path / "projects"]).rewritten == 1
    assert _figures(conn, "msg_a") == (2_050, 420, 2_050)
    assert conn.execute("SELECT rewritten FROM usage").fetchone()[0] == 0
    assert refresh(conn, [tmp_path / "projects"]).unchanged == 1
    conn.close()


# -- forks and copies of a real session --------------------------------------

REAL = Path(__file__).resolve().parent / "data" / "real" / "-src-experiments-claude_p"


def _cost(db_path) -> dict:
    from conftest import run

    return json.loads(run("cost", "--db", db_path, "--json", ok=True).output)


def test_forks_and_copies_of_a_real_session_add_no_api_call(tmp_path):
    """Three `txdb fork`s of a copied real session (with its subagent) and
    a plain copy of its file under another name: the same API calls, billed
    once (they raised `txdb cost` by each fork's figures), in the cost and
    the usage views alike, and the original keeps them."""
    from conftest import run

    projects = tmp_path / "projects"
    shutil.copytree(REAL, projects / REAL.name)
    db_path = tmp_path / "c.db"
    run("refresh", "--db", db_path, "--root", projects, ok=True)
    before = _cost(db_path)
    assert before["total"]["api_messages"] > 10 and before["total"]["cost_usd"] > 0
    sid = "29ccd257-68b1-427f-ae5f-6524b7cb6f20"
    for n in range(3):
        r = run("fork", sid, "--db", db_path, "--fork-title", f"fork {n}")
        assert r.exit_code == 0, r.output
    copy = projects / REAL.name / "0c0c0c0c-0000-4000-8000-000000000001.jsonl"
    copy.write_bytes((projects / REAL.name / f"{sid}.jsonl").read_bytes())
    run("refresh", "--db", db_path, "--root", projects, ok=True)
    conn = db.connect(db_path)
    files = conn.execute("SELECT count(*) FROM files WHERE kind = 'session' AND gone = 0").fetchone()[0]
    assert files == 5  # the original, three forks, the copy
    forks = conn.execute("SELECT count(*) FROM records WHERE forked").fetchone()[0]
    assert forks > 0
    after = _cost(db_path)
    assert after["total"] == before["total"]
    for view in ("usage_by_day", "usage_by_model"):
        assert conn.execute(f"SELECT sum(api_messages), sum(total_tokens), round(sum(cost_usd), 6) FROM {view}"
                            ).fetchone() == (before["total"]["api_messages"], before["total"]["total_tokens"],
                                             pytest.approx(before["total"]["cost_usd"], abs=1e-5))
    by_session = {r["session"]: r for r in json.loads(run("cost", "--db", db_path, "--by", "session", "--json",
                                                          ok=True).output)["rows"]}
    assert list(by_session) == [sid]  # the forks and the copy made no API call
    assert by_session[sid]["api_messages"] == before["total"]["api_messages"]
    assert conn.execute("SELECT sum(api_messages) FROM session_usage").fetchone()[0] == \
        before["total"]["api_messages"]
    conn.close()
