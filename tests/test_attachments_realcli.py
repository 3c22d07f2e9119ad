"""Attachments as the real CLI renders them (policy.RENDER_TEMPLATES,
RENDERS_NOTHING, TASK_TOOL_MODELS).

On copies of two real 2.1.x sessions, ``strip-attachments --list`` prices
each type; dropping every line of that type (``--types T --drop-all``,
apply) and resuming with CLI 2.1.328 must shrink the request by that much,
within 10% or 200 tokens (chars/4 of system + tools + messages, as
bench/bench_truth.py measures it). The default policy run is held to the
same. Before this, the plan priced 56 task_reminders the CLI never sends
(the session resumes on a model without the task tools) at 2,493 tokens,
and auto_mode lines, which the CLI re-renders as a page of guidance, at 18
tokens each."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from realcli import CORPUS_DIR, claude_binary  # noqa: E402
from realcli.oracle import resume  # noqa: E402

pytestmark = pytest.mark.realcli

TXDB = str(Path(sys.executable).parent / "txdb")
OPUS5 = "real/hannibal8856-claude_backup/-home-moxa-sdc1-home-moxa-mds4xgl3-buildroot-dl/d3f32579-7f66-464a-b856-526a67163a15.jsonl"
SONNET = "real/4thehalibit-omarchy-backup/-home-vwestberg-Claude/1fb5e404-604d-4a2b-baf1-3beb42a67371.jsonl"
CASES = {
    OPUS5: [None, "task_reminder", "total_tokens_reminder", "edited_text_file"],
    SONNET: [None, "task_reminder", "auto_mode"],
}


def _sent(path: Path, binary, work: Path) -> int:
    r = resume(path, ping="attachments-ping", binary=binary, workdir=work, timeout=300)
    assert r.loaded and not r.compacted, r.summary()
    body = r.main_request
    dump = lambda x: len(json.dumps(x, ensure_ascii=False, separators=(",", ":"))) if x is not None else 0  # noqa: E731
    return (dump(body.get("system")) + dump(body.get("tools")) + dump(body.get("messages"))) // 4


def _txdb(*args, cwd):
    p = subprocess.run([TXDB, *args, "--json"], cwd=cwd, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


@pytest.mark.parametrize("rel", list(CASES), ids=["opus5-d3f32579", "sonnet-1fb5e404"])
def test_listed_attachment_cost_is_the_request_shrink(rel, tmp_path):
    src = CORPUS_DIR / rel
    if not src.is_file():
        pytest.skip(f"no corpus session {rel}")
    binary = claude_binary()
    base = _sent(src, binary, tmp_path / "base")
    misses = []
    for att_type in CASES[rel]:
        work = tmp_path / (att_type or "policy")
        proj = work / "projects" / "p"
        proj.mkdir(parents=True)
        path = proj / src.name
        shutil.copyfile(src, path)
        db = ["--db", str(work / "c.db")]
        listing = {row["type"]: row for row in _txdb("strip-attachments", str(path), *db, "--list", cwd=work)}
        if att_type is None:
            predicted = sum(row["drop_tokens"] for row in listing.values())
            _txdb("strip-attachments", str(path), *db, cwd=work)
        else:
            predicted = listing[att_type]["tokens"]
            _txdb("strip-attachments", str(path), *db, "--types", att_type, "--drop-all", "--include-free", cwd=work)
        subprocess.run([TXDB, "apply", str(path), *db], cwd=work, check=True, capture_output=True)
        shrink = base - _sent(path, binary, work)
        if abs(predicted - shrink) > max(200, 0.10 * abs(shrink)):
            misses.append((att_type or "policy", predicted, shrink))
    assert not misses, f"listed vs request shrink: {misses}"


NOTICES = "generated/-home-user-src-demo-12/2ecab158-3408-4b97-9c60-af04fe425efe.jsonl"


def test_a_dropped_read_truncation_notice_saves_what_the_cli_stops_sending(tmp_path):
    """CLI 2.1.328 sends each read_truncation_notice line's banner (462
    characters here); with every such line dropped it still sends one
    notice per truncated Read, a short form of its own (208 characters), so
    a line costs the difference: priced at its whole banner, the plan said
    about twice what the request lost (35b6100b: ~2,394 for 19 lines)."""
    src = CORPUS_DIR / NOTICES
    if not src.is_file():
        pytest.skip("corpus session missing")
    binary = claude_binary()
    proj = tmp_path / "projects" / src.parent.name
    proj.mkdir(parents=True)
    path = proj / src.name
    shutil.copyfile(src, path)
    base = resume(path, ping="notice-ping", binary=binary, workdir=tmp_path / "base")
    db = ["--db", str(tmp_path / "c.db")]
    listing = {row["type"]: row for row in _txdb("strip-attachments", str(path), *db, "--list", cwd=tmp_path)}
    row = listing["read_truncation_notice"]
    # the API would drop later thinking after this edit; kept, the shrink is the notices' alone
    _txdb("strip-attachments", str(path), *db, "--types", "read_truncation_notice", "--drop-all",
          "--keep-dropped-thinking", "--no-usage-reset", cwd=tmp_path)
    subprocess.run([TXDB, "apply", str(path), *db], cwd=tmp_path, check=True, capture_output=True)
    after = resume(path, ping="notice-ping", binary=binary, workdir=tmp_path / "after")
    assert after.loaded and not after.compacted, after.summary()
    notices = [json.dumps(r.main_request, ensure_ascii=False).count("[Truncated: PARTIAL view") for r in (base, after)]
    assert notices[0] == notices[1] == row["count"] > 0  # one re-emitted for each dropped
    dump = lambda b: len(json.dumps(b.get("messages"), ensure_ascii=False, separators=(",", ":")))  # noqa: E731
    shrink = (dump(base.main_request) - dump(after.main_request)) / 4
    assert abs(row["tokens"] - shrink) <= row["count"], (row["tokens"], shrink)
