"""usage.billed (migration 042) is the rank billed_usage computed for each
page before: kept by refresh and the triggers through every change that
moves which file an API message counts in (a file read in either order, a
file that grows, one kept aside when another takes its path, one pruned,
a catalog migrated from 041). Each check compares the flag with the rank
computed from nothing, in one window over every row (the view's old rule).
Then sessions.long_context (the same migration), context_gauge's 1M
window test, against the view's own lookup of the rows."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from rewind import rewind
from txdb.catalog import db
from txdb.catalog.ingest.store import prune_gone, refresh, refresh_path

SID = "5e55e55e-0000-4000-8000-0000000000b1"

# The rank from nothing: the billed_usage view's rule before 042.
FRESH = """
SELECT v.file_id, v.message_id,
       v.message_id LIKE 'uuid:%' OR row_number() OVER (
           PARTITION BY v.message_id, v.request_id
           ORDER BY coalesce(v.input_tokens, 0) + coalesce(v.output_tokens, 0)
                    + coalesce(v.cache_read_input_tokens, 0) + coalesce(v.cache_creation_input_tokens, 0) DESC,
                    g.kind = 'session' DESC,
                    NOT EXISTS (SELECT 1 FROM records r WHERE r.file_id = v.file_id AND r.offset = v.offset
                                AND r.forked) DESC,
                    g.path) = 1
FROM usage v JOIN files g ON g.id = v.file_id
"""


def _flags(conn) -> dict:
    return {(f, m): b for f, m, b in conn.execute("SELECT file_id, message_id, billed FROM usage")}


def _assert_fresh(conn) -> None:
    assert _flags(conn) == {(f, m): int(b) for f, m, b in conn.execute(FRESH)}


def _line(obj) -> str:
    return json.dumps(obj, separators=(",", ":")) + "\n"


def _turns(n: int, sid: str = SID, cache_read: int = 1_000, forked: bool = False) -> str:
    lines, parent = [], None
    for i in range(n):
        u = {"type": "user", "uuid": f"u{i}", "parentUuid": parent, "sessionId": sid,
             "timestamp": f"2026-11-01T10:{i:02d}:00.000Z", "message": {"role": "user", "content": "x" * 40}}
        a = {"type": "assistant", "uuid": f"a{i}", "parentUuid": f"u{i}", "sessionId": sid, "requestId": f"req_{i}",
             "timestamp": f"2026-11-01T10:{i:02d}:05.000Z",
             "message": {"id": f"msg_{i}", "role": "assistant", "model": "claude-x",
                         "content": [{"type": "text", "text": "ok"}],
                         "usage": {"input_tokens": 3, "output_tokens": 10, "cache_read_input_tokens": cache_read,
                                   "cache_creation_input_tokens": 100}}}
        if forked:
            for o in (u, a):
                o["forkedFrom"] = {"sessionId": SID, "messageUuid": o["uuid"]}
        lines += [u, a]
        parent = f"a{i}"
    return "".join(map(_line, lines))


def _counted_in(conn) -> dict:
    return {Path(p).parent.name + "/" + Path(p).name: n for p, n in conn.execute(
        "SELECT f.path, count(*) FROM billed_usage u JOIN files f ON f.id = u.file_id GROUP BY f.path")}


def test_copies_count_once_in_the_first_path_whichever_is_read_first(tmp_path):
    projects = tmp_path / "projects"
    for name, turns in (("-b", 3), ("-a", 4), ("-c", 3)):
        (projects / name).mkdir(parents=True)
        (projects / name / f"{SID}.jsonl").write_text(_turns(turns))
    conn = db.connect(tmp_path / "c.db")
    for name in ("-b", "-c", "-a"):
        refresh_path(conn, projects / name / f"{SID}.jsonl", str(projects))
        _assert_fresh(conn)
    assert _counted_in(conn) == {f"-a/{SID}.jsonl": 4}
    # a copy grows by a message the first path has: still counted there
    with open(projects / "-c" / f"{SID}.jsonl", "a") as fh:
        fh.write(_turns(5)[len(_turns(3)):])
    assert refresh_path(conn, projects / "-c" / f"{SID}.jsonl", str(projects)) == "grown"
    _assert_fresh(conn)
    assert _counted_in(conn) == {f"-a/{SID}.jsonl": 4, f"-c/{SID}.jsonl": 1}
    # a rewrite with larger figures takes all of them
    (projects / "-b" / f"{SID}.jsonl").write_text(_turns(3, cache_read=2_000))
    assert refresh_path(conn, projects / "-b" / f"{SID}.jsonl", str(projects)) == "rewritten"
    _assert_fresh(conn)
    assert _counted_in(conn) == {f"-b/{SID}.jsonl": 3, f"-a/{SID}.jsonl": 1, f"-c/{SID}.jsonl": 1}
    conn.close()


def test_a_file_row_that_moves_or_changes_kind_is_ranked_again(tmp_path):
    """The trigger on files: a row takes another path (as a link's
    discovery and restore move one) or another kind."""
    projects = tmp_path / "projects"
    for name in ("-a", "-b"):
        (projects / name).mkdir(parents=True)
        (projects / name / f"{SID}.jsonl").write_text(_turns(2))
    conn = db.connect(tmp_path / "c.db")
    refresh(conn, [projects])
    assert _counted_in(conn) == {f"-a/{SID}.jsonl": 2}
    conn.execute("UPDATE files SET path = ? WHERE path = ?",
                 (str(projects / "-z" / f"{SID}.jsonl"), str(projects / "-a" / f"{SID}.jsonl")))
    _assert_fresh(conn)
    assert _counted_in(conn) == {f"-b/{SID}.jsonl": 2}
    conn.execute("UPDATE files SET kind = 'subagent' WHERE path = ?", (str(projects / "-b" / f"{SID}.jsonl"),))
    _assert_fresh(conn)
    assert _counted_in(conn) == {f"-z/{SID}.jsonl": 2}
    conn.close()


def test_a_fork_counts_after_the_original_and_a_pruned_original_hands_over(tmp_path):
    projects = tmp_path / "projects"
    (projects / "-p").mkdir(parents=True)
    original = projects / "-p" / f"{SID}.jsonl"
    original.write_text(_turns(3))
    fork = projects / "-p" / "00000000-0000-4000-8000-0000000000f0.jsonl"  # sorts before the original
    fork.write_text(_turns(3, sid=fork.stem, forked=True))
    conn = db.connect(tmp_path / "c.db")
    refresh(conn, [projects])
    _assert_fresh(conn)
    assert _counted_in(conn) == {f"-p/{original.name}": 3}
    original.unlink()
    refresh(conn, [projects])
    assert conn.execute("SELECT gone FROM files WHERE path = ?", (str(original),)).fetchone() == (1,)
    _assert_fresh(conn)  # gone, its archive still counts
    prune_gone(conn, None, dry_run=False)
    _assert_fresh(conn)  # the trigger: the counted rows deleted, the fork's count
    assert _counted_in(conn) == {f"-p/{fork.name}": 3}
    conn.close()


def test_a_file_kept_aside_for_a_new_one_at_its_path_is_ranked_again(tmp_path):
    projects = tmp_path / "projects"
    for name in ("-a", "-b"):
        (projects / name).mkdir(parents=True)
        (projects / name / f"{SID}.jsonl").write_text(_turns(2))
    conn = db.connect(tmp_path / "c.db")
    refresh(conn, [projects])
    assert _counted_in(conn) == {f"-a/{SID}.jsonl": 2}
    first = projects / "-a" / f"{SID}.jsonl"
    first.unlink()
    refresh(conn, [projects])
    # another file at the gone one's path: the gone row moves to an archived path
    first.write_text(_turns(1, sid=SID, cache_read=7))
    refresh(conn, [projects])
    paths = [p for (p,) in conn.execute("SELECT path FROM files ORDER BY id")]
    assert len(paths) == 3 and paths[0] != str(first)
    _assert_fresh(conn)
    conn.close()


def test_a_catalog_from_before_042_is_ranked_by_the_migration(tmp_path):
    projects = tmp_path / "projects"
    for name in ("-b", "-a"):
        (projects / name).mkdir(parents=True)
        (projects / name / f"{SID}.jsonl").write_text(_turns(3))
    path = tmp_path / "old.db"
    conn = db.connect(path)
    refresh(conn, [projects])
    rewind(conn, "042")
    assert "billed" not in {r[1] for r in conn.execute("PRAGMA table_info(usage)")}
    conn.close()
    conn = db.connect(path)
    _assert_fresh(conn)
    assert sorted(_flags(conn).values()) == [0, 0, 0, 1, 1, 1]
    assert {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'")} >= {
        "usage_billed_deleted", "files_billed_moved"}
    conn.close()


def test_copies_of_the_real_corpus_count_as_one(tmp_path):
    """Two copies of the shipped real sessions under two roots: every rank
    as from nothing, and the cost of both equals the cost of one."""
    src = Path(__file__).resolve().parent / "data" / "real"
    one, two = tmp_path / "one", tmp_path / "two"
    shutil.copytree(src, one)
    shutil.copytree(src, two)
    conn = db.connect(tmp_path / "c.db")
    refresh(conn, [one])
    alone = conn.execute("SELECT count(*), sum(billed_tokens), round(sum(cost_usd), 6) FROM billed_cost").fetchone()
    refresh(conn, [two])
    _assert_fresh(conn)
    assert conn.execute("SELECT count(*) FROM usage").fetchone()[0] == 2 * alone[0]
    assert conn.execute("SELECT count(*), sum(billed_tokens), round(sum(cost_usd), 6) FROM billed_cost"
                        ).fetchone() == alone
    assert os.path.commonpath([p for (p,) in conn.execute(
        "SELECT DISTINCT f.path FROM billed_usage u JOIN files f ON f.id = u.file_id")]).startswith(
        str(one if str(one) < str(two) else two))
    conn.close()


# -- sessions.long_context: context_gauge's 1M window test, kept by refresh ---

LIVE = ("SELECT s.file_id, EXISTS (SELECT 1 FROM usage_context w WHERE w.file_id = s.file_id "
        "AND (w.model LIKE '%[1m]%' OR w.gauge_tokens > 200000)) FROM sessions s")


def _long(conn) -> dict:
    return dict(conn.execute("SELECT file_id, long_context FROM sessions"))


def _windows(conn) -> dict:
    return dict(conn.execute("SELECT file_id, window_tokens FROM context_gauge"))


def test_the_long_context_flag_follows_growth_and_rewrites(tmp_path):
    projects = tmp_path / "projects"
    (projects / "-p").mkdir(parents=True)
    f = projects / "-p" / f"{SID}.jsonl"
    f.write_text(_turns(2))
    conn = db.connect(tmp_path / "c.db")
    refresh(conn, [projects])
    assert _long(conn) == dict(conn.execute(LIVE)) and set(_long(conn).values()) == {0}
    assert set(_windows(conn).values()) == {200_000}
    big = _turns(3, cache_read=250_000)
    with open(f, "a") as fh:  # a turn past 200k appended
        fh.write(big[len(_turns(2, cache_read=250_000)):])
    assert refresh_path(conn, f, str(projects)) == "grown"
    assert _long(conn) == dict(conn.execute(LIVE)) and set(_long(conn).values()) == {1}
    assert set(_windows(conn).values()) == {1_000_000}
    f.write_text(_turns(3))  # rewritten under 200k
    assert refresh_path(conn, f, str(projects)) == "rewritten"
    assert _long(conn) == dict(conn.execute(LIVE)) and set(_long(conn).values()) == {0}
    conn.close()


def test_a_catalog_from_before_042_is_filled_as_it_migrates_and_a_null_flag_by_refresh(tmp_path):
    projects = tmp_path / "projects"
    for name, cache_read in (("-a", 1_000), ("-b", 250_000)):
        (projects / name).mkdir(parents=True)
        (projects / name / f"{SID}.jsonl").write_text(_turns(2, cache_read=cache_read))
    path = tmp_path / "old.db"
    conn = db.connect(path)
    refresh(conn, [projects])
    windows = _windows(conn)
    assert sorted(windows.values()) == [200_000, 1_000_000]
    rewind(conn, "042")
    conn.close()
    conn = db.connect(path)  # 042 again: filled once the views are back
    assert _long(conn) == dict(conn.execute(LIVE)) and sorted(_long(conn).values()) == [0, 1]
    assert _windows(conn) == windows
    conn.execute("UPDATE sessions SET long_context = NULL")
    assert _windows(conn) == windows  # a NULL flag: looked up by the view
    assert refresh(conn, [projects]).unchanged == 2
    assert _long(conn) == dict(conn.execute(LIVE)) and sorted(_long(conn).values()) == [0, 1]
    assert _windows(conn) == windows
    conn.close()
