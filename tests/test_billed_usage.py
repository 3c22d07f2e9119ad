"""The catalog keeps what the API billed through surgery (issue 9, item 13).

A usage reset lowers the counts in the file (that is what moves Claude
Code's gauge), but ``usage`` and the views over it (``session_usage``,
``usage_by_day``, ``usage_by_model``) keep the figures the API recorded;
the file's current figures are ``usage.gauge_*``, which ``context_gauge``
reads. Judged against ccusage (installed as tests/test_ccusage_agreement.py
does) on the corpus before the surgery, and on small files made here.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rewind import rewind

from txdb.catalog import db, estimate
from txdb.catalog.ingest.store import refresh
from txdb.surgery import ops
from txdb.surgery.engine import run_surgery
from txdb.surgery.log import apply_logged

from test_ccusage_agreement import CORPUS, ccusage_command, lay_out, run_ccusage

FIELDS = ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
CC_FIELDS = ("inputTokens", "outputTokens", "cacheCreationTokens", "cacheReadTokens")
VIEWS_TOTALS = {
    "usage": "SELECT " + ", ".join(f"sum(coalesce({f}, 0))" for f in FIELDS) + " FROM usage",
    "session_usage": "SELECT " + ", ".join(f"sum({f})" for f in FIELDS) + " FROM session_usage",
    "usage_by_day": "SELECT " + ", ".join(f"sum({f})" for f in FIELDS) + " FROM usage_by_day",
    "usage_by_model": "SELECT " + ", ".join(f"sum({f})" for f in FIELDS) + " FROM usage_by_model",
}


def strip_all_and_apply(conn, path: Path):
    rep = run_surgery(path, "strip-all", lambda t, _o: ops.strip_all(t))
    assert rep.written and rep.usage and rep.usage["capped"] > 0, rep.usage
    apply_logged(conn, path, settle=0.0)
    return rep


def ccusage_totals(report: dict) -> tuple[int, ...]:
    rows = [s for s in report["session"] if s.get("agent", "claude") == "claude"]
    return tuple(sum(s[k] for s in rows) for k in CC_FIELDS)


def test_ccusage_before_surgery_equals_the_catalog_after(tmp_path):
    """strip-all + apply (usage reset on) of three CLI-made sessions: the
    file's counts go down (ccusage run again sees less), the catalog's
    usage tables and views still add up to what ccusage saw before."""
    if not (CORPUS / "generated").is_dir():
        pytest.skip("../shared/corpus is absent (only present on the developers' machines)")
    cmd = ccusage_command()
    projects = tmp_path / "cfg" / "projects"
    lay_out([CORPUS / "generated"], projects)
    before = ccusage_totals(run_ccusage(cmd, tmp_path))

    conn = db.connect(tmp_path / "catalog.db")
    refresh(conn, [projects])
    for name, sql in VIEWS_TOTALS.items():
        assert tuple(conn.execute(sql).fetchone()) == before, name
    targets = [Path(p) for (p,) in conn.execute(
        "SELECT f.path FROM files f JOIN session_costs c ON c.file_id = f.id WHERE f.kind = 'session' "
        "ORDER BY c.gauge_tokens DESC LIMIT 3")]
    api_before = {p: conn.execute(
        "SELECT g.gauge_tokens FROM context_gauge g JOIN files f ON f.id = g.file_id WHERE f.path = ?",
        (str(p),)).fetchone()[0] for p in targets}
    reps = {p: strip_all_and_apply(conn, p) for p in targets}

    after = ccusage_totals(run_ccusage(cmd, tmp_path))
    assert after[3] < before[3]  # the reset did lower the files' cache reads
    for name, sql in VIEWS_TOTALS.items():
        assert tuple(conn.execute(sql).fetchone()) == before, name

    for p in targets:
        g = conn.execute(
            "SELECT g.gauge_tokens, g.api_context FROM context_gauge g JOIN files f ON f.id = g.file_id "
            "WHERE f.path = ?", (str(p),)).fetchone()
        # the gauge reads the file as it is now: the reset's figure, below the API's
        assert g[0] == reps[p].usage["last_after"] < g[1] == api_before[p]
        last = _last_usage(p)
        assert g[0] == sum(last.get(k) or 0 for k in
                           ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"))
        lowered = conn.execute(
            "SELECT count(*) FROM usage u JOIN files f ON f.id = u.file_id WHERE f.path = ? AND "
            "u.gauge_cache_read_input_tokens < u.cache_read_input_tokens", (str(p),)).fetchone()[0]
        assert lowered >= 1
    conn.close()


def _last_usage(path: Path) -> dict:
    last = None
    for line in path.read_bytes().splitlines():
        o = json.loads(line)
        if o.get("type") == "assistant" and isinstance(o.get("message", {}).get("usage"), dict) \
                and o["message"].get("model") != "<synthetic>":
            last = o["message"]["usage"]
    return last


# -- without ccusage: re-ingest rules on small files ----------------------------

def _line(obj) -> str:
    return json.dumps(obj, separators=(",", ":")) + "\n"


def _turn(i: int, parent: str | None, cache_read: int) -> list[dict]:
    return [
        {"type": "user", "uuid": f"u{i}", "parentUuid": parent, "sessionId": "s",
         "timestamp": f"2026-11-01T10:{i:02d}:00.000Z", "message": {"role": "user", "content": "x" * 400}},
        {"type": "assistant", "uuid": f"a{i}", "parentUuid": f"u{i}", "sessionId": "s", "requestId": f"r{i}",
         "timestamp": f"2026-11-01T10:{i:02d}:05.000Z",
         "message": {"id": f"m{i}", "role": "assistant", "model": "claude-x",
                     "content": [{"type": "text", "text": "ok"}],
                     "usage": {"input_tokens": 3, "output_tokens": 10, "cache_read_input_tokens": cache_read,
                               "cache_creation_input_tokens": 100}}},
    ]


def _usage(conn, mid):
    return conn.execute(
        "SELECT cache_read_input_tokens, gauge_cache_read_input_tokens, in_file FROM usage WHERE message_id = ?",
        (mid,)).fetchone()


def test_a_rewrite_never_lowers_an_api_figure_and_new_messages_take_the_file(tmp_path):
    proj = tmp_path / "projects" / "-p"
    proj.mkdir(parents=True)
    f = proj / "s.jsonl"
    lines = _turn(0, None, 5_000) + _turn(1, "a0", 9_000)
    f.write_text("".join(map(_line, lines)))
    conn = db.connect(tmp_path / "c.db")
    refresh(conn, [tmp_path / "projects"])
    assert _usage(conn, "m1") == (9_000, 9_000, 1)

    # rewrite: m1 lowered (as a usage reset does), m0 gone, m2 new
    lowered = [dict(x) for x in lines[2:]]
    lowered[1] = json.loads(json.dumps(lowered[1]))
    lowered[1]["message"]["usage"]["cache_read_input_tokens"] = 1_000
    lowered[0]["parentUuid"] = None
    tmp = proj / "s.jsonl.new"
    tmp.write_text("".join(map(_line, lowered + _turn(2, "a1", 12_000))))
    tmp.replace(f)  # a new inode, as apply's rename makes
    refresh(conn, [tmp_path / "projects"])
    assert _usage(conn, "m1") == (9_000, 1_000, 1)  # API kept, gauge lowered
    assert _usage(conn, "m0") == (5_000, None, 0)  # no longer in the file: billed all the same
    assert _usage(conn, "m2") == (12_000, 12_000, 1)  # new: from the file
    total = conn.execute("SELECT cache_read_input_tokens, api_messages FROM session_usage").fetchone()
    assert total == (26_000, 3)

    # a later rewrite (e.g. a second apply) lowers the file further: still never the API's
    text = f.read_text().replace('"cache_read_input_tokens":1000', '"cache_read_input_tokens":10')
    tmp.write_text(text)
    tmp.replace(f)
    refresh(conn, [tmp_path / "projects"])
    assert _usage(conn, "m1") == (9_000, 10, 1)
    g = conn.execute("SELECT gauge_tokens, api_context FROM context_gauge").fetchone()
    assert g == (3 + 12_000 + 100, 3 + 12_000 + 100)  # the last turn (m2) was never lowered
    # prune of a file that is gone forgets its usage with it
    f.unlink()
    refresh(conn, [tmp_path / "projects"], prune=True)
    assert conn.execute("SELECT count(*) FROM usage").fetchone()[0] == 0
    conn.close()


def _iterations(conn, mid):
    """(stored gauge_iterations, usage_context's gauge_iterations, its gauge, iterations) of a message."""
    return conn.execute("SELECT u.gauge_iterations, c.gauge_iterations, c.gauge_tokens, u.iterations FROM usage u "
                        "JOIN usage_context c ON c.file_id = u.file_id AND c.message_id = u.message_id "
                        "WHERE u.message_id = ?", (mid,)).fetchone()


def test_the_files_iterations_are_read_whole_through_a_rewrite(tmp_path):
    """gauge_iterations is stored NULL when it is the row's iterations and
    'null' when the file holds none (migration 044); every reader gets what
    the file holds: the API's iterations[] until a rewrite drops them, none
    once it has (the totals then), none once the message left the file."""
    proj = tmp_path / "projects" / "-p"
    proj.mkdir(parents=True)
    f = proj / "s.jsonl"
    lines = _turn(0, None, 5_000) + _turn(1, "a0", 9_000)
    its = [{"input_tokens": 1, "cache_read_input_tokens": 8_000, "cache_creation_input_tokens": 50}]
    lines[3]["message"]["usage"]["iterations"] = its
    f.write_text("".join(map(_line, lines)))
    conn = db.connect(tmp_path / "c.db")
    refresh(conn, [tmp_path / "projects"])
    stored, whole, gauge, api = _iterations(conn, "m1")
    assert (stored, json.loads(whole), gauge, json.loads(api)) == (None, its, 8_051, its)
    fid = conn.execute("SELECT id FROM files").fetchone()[0]
    assert [t[2] for t in estimate.catalog_turns(conn, fid)] == [5_103, 8_051]

    # rewritten: m1 lowered, its iterations[] gone from the file; m0 gone from the file
    lowered = json.loads(json.dumps(lines[2:]))
    lowered[1]["message"]["usage"]["cache_read_input_tokens"] = 1_000
    del lowered[1]["message"]["usage"]["iterations"]
    lowered[0]["parentUuid"] = None
    tmp = proj / "s.jsonl.new"
    tmp.write_text("".join(map(_line, lowered)))
    tmp.replace(f)
    refresh(conn, [tmp_path / "projects"])
    stored, whole, gauge, api = _iterations(conn, "m1")
    assert (stored, whole, gauge, json.loads(api)) == ("null", None, 3 + 1_000 + 100, its)  # the API's kept
    assert _iterations(conn, "m0") == (None, None, 0, None)
    fid = conn.execute("SELECT id FROM files").fetchone()[0]
    assert [t[2] for t in estimate.catalog_turns(conn, fid)] == [1_103]  # the estimate reads the file's too

    # the file's line holds them again: stored NULL again (the row's own)
    f.write_text("".join(map(_line, lines[2:3] + [lines[3]])).replace('"parentUuid":"a0"', '"parentUuid":null'))
    refresh(conn, [tmp_path / "projects"])
    stored, whole, _gauge, _api = _iterations(conn, "m1")
    assert (stored, json.loads(whole)) == (None, its)
    conn.close()


def test_migration_from_the_previous_schema_keeps_usage_and_recalibrates(tmp_path):
    """A catalog made by schema 007 opens, gets the gauge columns filled from
    the figures it had, and its next refresh re-reads each file once (thinking
    resized, the calibrated estimate stored) without losing an API figure."""
    proj = tmp_path / "projects" / "-p"
    proj.mkdir(parents=True)
    f = proj / "s.jsonl"
    f.write_text("".join(map(_line, _turn(0, None, 5_000) + _turn(1, "a0", 9_000))))
    path = tmp_path / "old.db"
    conn = db.connect(path)
    refresh(conn, [tmp_path / "projects"])
    rewind(conn, "008")  # back to a 007 catalog: what 008 and every later migration added is gone
    conn.close()

    conn = db.connect(path)
    assert [r[0] for r in conn.execute("SELECT name FROM _txdb_migrations WHERE name >= '008' ORDER BY name")] \
        == [n for n, _ in db.migrations() if n >= "008"]
    assert _usage(conn, "m1") == (9_000, 9_000, 1)
    assert conn.execute("SELECT est_context_tokens, raw_context_tokens FROM session_costs").fetchone()[0] is not None
    stats = refresh(conn, [tmp_path / "projects"])
    assert stats.rewritten == 1  # read again once
    assert conn.execute("SELECT est_method FROM sessions").fetchone()[0] in ("lsq", "ratio", "anchor")  # fitted
    assert _usage(conn, "m1") == (9_000, 9_000, 1)
    assert refresh(conn, [tmp_path / "projects"]).unchanged == 1
    conn.close()


def test_blank_catalog_has_the_gauge_columns(tmp_path):
    conn = db.connect(tmp_path / "c.db")
    cols = {r[1] for r in conn.execute("PRAGMA table_info(usage)")}
    assert {"gauge_input_tokens", "gauge_cache_read_input_tokens", "gauge_cache_creation_input_tokens",
            "gauge_iterations", "in_file"} <= cols
    assert {"api_context", "gauge_tokens"} <= {r[1] for r in conn.execute("PRAGMA table_info(context_gauge)")}
    conn.close()
