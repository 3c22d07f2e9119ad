"""Round-5 attack findings on the logged factor (the swap journal's fit):
each test was a reproducible break (a strict xfail until it was fixed).

Repros (real corpus sessions copied into tmp_path, real SQLite):

1. The catalog's stored estimate outlives the journal it was read from.
   strip-tools --apply a session (its result priced at the logged factor),
   then remove or edit ``<session>.jsonl.swaps.json`` (or: move the folder
   away, refresh, ``txdb restore ID``, which writes the session but no
   journal), refresh: the file is "unchanged", so ``sessions`` keeps the
   logged-factor price while ``analyze`` and a fresh catalog of the same
   folder price it from its own figures (63b159ef: 24,114 vs 23,957).

2. A second surgery after a turn was appended reports an "after" the
   catalog does not show: strip-tools --apply, append a user line, refresh,
   strip-all --apply on d3f32579: the report reads 385,165 -> 140,517
   (~244,648 saved) while ``sessions`` shows 264,299 after the apply (the
   usage reset itself capped the last turn to 262,824). With a recorded
   turn appended instead (a user line and an assistant reply whose usage
   reads the gauge, as Claude Code writes them), the report reads
   384,813 -> 127,579 and ``sessions`` 163,816 after the apply, both far
   under the 278,290 its usage reset wrote for the last turn.

3. ``export --redact`` keeps an AWS secret access key named mid-line in
   prose: a user prompt of a real session gets "my aws key is AKIA... and
   aws_secret_access_key = <40 chars>"; the AKIA key is masked, the secret
   key survives in blocks/*.parquet (the keyword is found only at a line's
   start: "the key: aws_secret_access_key=<40>" survives too).

4. ``export --redact`` keeps a GitHub token whose text (not the JSONL line)
   holds a JSON spelling of it: a prompt or tool output quoting a JSON
   document, {"token": "ghp\\u005f<36>"} (the backslash is in the text).
   The same token \\u-escaped at the JSONL level is masked.
"""
from __future__ import annotations

import shutil
import sys
import uuid
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

TESTS = Path(__file__).resolve().parent
sys.path.insert(0, str(TESTS))
from sessions import session_path  # noqa: E402
from txdb.cli import cli  # noqa: E402

SMALL = "real/bradymholt-dotfiles/-Users-bholt-dev-scratch-ynab-recurring-charges-finder/" \
        "63b159ef-a6e5-4d4d-b078-bc1e65f38e74.jsonl"
LARGE = "real/hannibal8856-claude_backup/-home-moxa-sdc1-home-moxa-mds4xgl3-buildroot-dl/" \
        "d3f32579-7f66-464a-b856-526a67163a15.jsonl"


def run(*args) -> str:
    r = CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return r.output


def _copy(tmp_path: Path, rel: str) -> tuple[Path, Path]:
    src = session_path(rel)
    if not src.is_file():
        pytest.skip("corpus session missing")
    root = tmp_path / "projects"
    (root / "p1").mkdir(parents=True)
    shutil.copyfile(src, root / "p1" / src.name)
    return root, root / "p1" / src.name


def _sessions(db: Path) -> dict[str, int]:
    return {r["session_id"]: r["est_context_tokens"] for r in orjson.loads(run("sessions", "--db", db, "--json"))}


def _fresh(tmp_path: Path, root: Path, name: str) -> dict[str, int]:
    db = tmp_path / name
    run("refresh", "--db", db, "--root", root)
    return _sessions(db)


def _analyze(db: Path, f: Path) -> int:
    return orjson.loads(run("analyze", f, "--db", db, "--json"))["estimate"]["calibrated"]


def _applied(tmp_path: Path, rel: str) -> tuple[Path, Path, Path]:
    root, f = _copy(tmp_path, rel)
    db = tmp_path / "main.db"
    run("refresh", "--db", db, "--root", root)
    run("strip-tools", f, "--apply", "--db", db)
    assert orjson.loads(run("analyze", f, "--db", db, "--json"))["estimate"]["factor_logged"]
    return root, f, db


def test_journal_removed_file_unchanged(tmp_path):
    root, f, db = _applied(tmp_path, SMALL)
    f.with_name(f.name + ".swaps.json").rename(tmp_path / "journal.away")
    run("refresh", "--db", db, "--root", root)
    assert _sessions(db) == _fresh(tmp_path, root, "fresh.db")
    assert _sessions(db)[f.stem] == _analyze(db, f)


def test_journal_edited_file_unchanged(tmp_path):
    root, f, db = _applied(tmp_path, SMALL)
    j = f.with_name(f.name + ".swaps.json")
    doc = orjson.loads(j.read_bytes())
    doc["swaps"][-1]["rows"][-1]["fit"][1] = 2.5
    j.write_bytes(orjson.dumps(doc))
    run("refresh", "--db", db, "--root", root)
    assert _sessions(db) == _fresh(tmp_path, root, "fresh.db")


def test_restore_of_deleted_session_matches_fresh_catalog(tmp_path):
    root, f, db = _applied(tmp_path, SMALL)
    hold = tmp_path / "hold"
    shutil.move(str(f.parent), hold)
    run("refresh", "--db", db, "--root", root)
    run("restore", f.stem, "--db", db, "--root", root)
    assert f.is_file()
    run("refresh", "--db", db, "--root", root)
    assert _sessions(db) == _fresh(tmp_path, root, "fresh.db")


def _append_user_line(f: Path) -> None:
    last = orjson.loads(f.read_bytes().splitlines()[-1])
    rec = {"type": "user", "uuid": str(uuid.uuid4()), "parentUuid": last.get("uuid"),
           "sessionId": last.get("sessionId"), "timestamp": "2026-12-03T08:00:00.000Z", "isSidechain": False,
           "userType": "external", "cwd": last.get("cwd"), "version": last.get("version"),
           "message": {"role": "user", "content": "hand edit: " + "x" * 4000}}
    f.chmod(0o644)
    with f.open("ab") as out:
        out.write(orjson.dumps(rec) + b"\n")


def test_second_strip_after_append_reports_what_sessions_shows(tmp_path):
    root, f, db = _applied(tmp_path, LARGE)
    _append_user_line(f)
    run("refresh", "--db", db, "--root", root)
    rep = orjson.loads(run("strip-all", f, "--apply", "--json", "--db", db))
    assert _sessions(db)[f.stem] == rep["surgery"]["tokens_after"]


def _append_recorded_turn(f: Path, cached: int) -> None:
    lines = f.read_bytes().splitlines()
    last = orjson.loads(lines[-1])
    model = next(r["message"].get("model") for r in map(orjson.loads, reversed(lines)) if r.get("type") == "assistant")
    base = {"sessionId": last.get("sessionId"), "isSidechain": False, "userType": "external",
            "cwd": last.get("cwd"), "version": last.get("version")}
    u1, u2 = str(uuid.uuid4()), str(uuid.uuid4())
    user = dict(base, type="user", uuid=u1, parentUuid=last.get("uuid"), timestamp="2026-12-03T08:00:00.000Z",
                message={"role": "user", "content": "continue: " + "x" * 4000})
    reply = dict(base, type="assistant", uuid=u2, parentUuid=u1, timestamp="2026-12-03T08:00:05.000Z",
                 requestId="req_" + uuid.uuid4().hex[:20],
                 message={"id": "msg_" + uuid.uuid4().hex[:24], "type": "message", "role": "assistant", "model": model,
                          "content": [{"type": "text", "text": "ok, continuing."}], "stop_reason": "end_turn",
                          "stop_sequence": None,
                          "usage": {"input_tokens": 3, "cache_creation_input_tokens": 1100,
                                    "cache_read_input_tokens": cached, "output_tokens": 10}})
    f.chmod(0o644)
    with f.open("ab") as out:
        out.write(orjson.dumps(user) + b"\n" + orjson.dumps(reply) + b"\n")


def test_second_strip_after_recorded_turn_reports_what_sessions_shows(tmp_path):
    root, f, db = _applied(tmp_path, LARGE)
    gauge = orjson.loads(run("analyze", f, "--db", db, "--json"))["estimate"]["recorded_last"]
    _append_recorded_turn(f, gauge)
    run("refresh", "--db", db, "--root", root)
    rep = orjson.loads(run("strip-all", f, "--apply", "--json", "--db", db))
    assert _sessions(db)[f.stem] == rep["surgery"]["tokens_after"]


SECRET = "bB0JxXujr4qqaaABvvLOzAxzXMcU1vsHiQMaRiNT"


def test_redact_aws_secret_key_mid_line(tmp_path):
    text = _export_with_prompt(tmp_path, f"\nmy aws key is AKIAQ7R2ZK5WJ3M4TX8P and aws_secret_access_key = {SECRET}\n")
    assert "[REDACTED:" in text and "AKIAQ7R2ZK5WJ3M4TX8P" not in text
    assert SECRET[:12] not in text


TOKEN = "ghp_" + "Qm3vR8sLx2Tn9WcY4bKpZ7hJd5Fg1AeU6oNi"


def test_redact_token_json_escaped_inside_text(tmp_path):
    text = _export_with_prompt(tmp_path, '\nconfig: {"token": "ghp\\u005f' + TOKEN[4:] + '"}\n')
    assert TOKEN[4:16] not in text


def _export_with_prompt(tmp_path: Path, extra: str) -> str:
    """A copy of a real session whose first prompt gets ``extra``, refreshed
    and exported with --redact: every Parquet cell's text."""
    pytest.importorskip("pyarrow")
    duckdb = pytest.importorskip("duckdb")
    root, f = _copy(tmp_path, SMALL)
    lines = f.read_bytes().splitlines()
    for i, raw in enumerate(lines):
        rec = orjson.loads(raw)
        if rec.get("type") == "user" and isinstance((rec.get("message") or {}).get("content"), str):
            rec["message"]["content"] += extra
            lines[i] = orjson.dumps(rec)
            break
    else:
        pytest.skip("no user prompt")
    f.write_bytes(b"\n".join(lines) + b"\n")
    db, out = tmp_path / "c.db", tmp_path / "out"
    run("refresh", "--db", db, "--root", root)
    run("export", out, "--redact", "--db", db)
    con = duckdb.connect()
    cells = []
    for pq in sorted(out.rglob("*.parquet")):
        cells += [" ".join(map(str, r)) for r in con.execute("SELECT * FROM read_parquet(?)", [str(pq)]).fetchall()]
    return "\n".join(cells)

