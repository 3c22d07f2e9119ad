"""What a compacted range tells the model and the title rule (an extractive
summary; the first prompt carried), and that no marker rescue leaves names a
file that is not there, nor is a superseded file left behind."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from sessions import assistant, user, write
from txdb.model import sidecar as sc
from txdb.cli import cli
from txdb.model.records import note_title, pick_title
from txdb.model.transcript import Transcript

SID = "66666666-0000-0000-0000-000000000001"
CLI_MADE = Path(__file__).parent / "data" / "generated" / "-home-user-src-demo-14" / \
    "5a73f7d9-de47-4921-a60f-d1c8c68135c5.jsonl"
CORPUS_CLI_MADE = Path(__file__).resolve().parents[1].parent / "shared" / "corpus" / "generated" / \
    "-home-user-src-demo-3" / "3fa1842b-cff9-4f12-b5a2-d0571e51cea6.jsonl"
FIRST = "Please fix the flaky login test in the auth module and tell me why it failed before"


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def pending(f: Path) -> Path:
    return Path(str(f) + ".pending")


def title(path: Path) -> tuple[str | None, str | None]:
    """The session's title by the catalog's rule (records.note_title / pick_title), line by line."""
    titles: dict = {}
    for line in path.read_bytes().splitlines():
        note_title(titles, orjson.loads(line))
    return pick_title(titles)


def work(turns: int = 6) -> list[dict]:
    """Turns that read, write and run things."""
    out, parent = [], None
    for t in range(turns):
        u = user(FIRST if t == 0 else f"now step {t}: " + "y" * 300, parent, session=SID)
        calls = [("Read", {"file_path": f"/src/app/mod{t}.py"}), ("Bash", {"command": f"pytest -q tests/test_{t}.py"}),
                 ("Edit", {"file_path": f"/src/app/mod{t}.py", "old_string": "a", "new_string": "b"})]
        prev = u["uuid"]
        for k, (name, inp) in enumerate(calls):
            tid = f"toolu_{t:02d}{k}"
            a = assistant([{"type": "tool_use", "id": tid, "name": name, "input": inp}], prev, session=SID)
            r = user([{"type": "tool_result", "tool_use_id": tid, "content": f"result {t}.{k}\n" + "r" * 3000}],
                     a["uuid"], session=SID)
            out += [a, r] if k else [u, a, r]
            prev = r["uuid"]
        a2 = assistant(f"done {t}", prev, session=SID)
        out.append(a2)
        parent = a2["uuid"]
    return out


def test_a_compacted_range_says_what_it_held_and_the_session_keeps_its_title(tmp_path, monkeypatch):
    monkeypatch.setenv("TXDB_DB", str(tmp_path / "catalog.db"))
    f = write(tmp_path / "claude" / "projects" / "-src-app" / f"{SID}.jsonl", work())
    before = title(f)
    assert before == (FIRST[:60], "prompt")
    r = run("compact-range", f, "--from", 0, "--to", 15, "--json")
    assert r.exit_code == 0, r.output
    out = pending(f).read_bytes()
    assert sc.NO_SUMMARY.encode() not in out
    survivor = orjson.loads(out.splitlines()[0])
    marker = survivor["message"]["content"][0]["text"]
    summary = next(x for x in marker.split("\n") if x.startswith("Summary: "))
    assert '"' + FIRST + '"' in summary and "step 1" in summary                      # the prompts typed
    assert "/src/app/mod0.py" in summary and "/src/app/mod1.py" in summary            # files read and written
    assert "read 2 files" in summary and "wrote 2 files" in summary
    assert "`pytest -q tests/test_0.py`" in summary                                   # commands run
    assert "Bash x2" in summary and "Read x2" in summary and "Edit x2" in summary     # tools and their counts
    saved = {Path(p).name for p in sc.referenced(out)}
    assert f"{survivor['uuid']}.json" in summary and f"{survivor['uuid']}.json" in saved  # where each is saved
    assert len(summary) <= 3_100
    assert title(pending(f)) == before                                                # the title rule: the same
    # the same range again changes nothing (the carried prompt keeps it a survivor)
    r = run("compact-range", f, "--from", 0, "--to", 15, "--json")
    assert r.exit_code == 0 and json.loads(r.output)["result"]["already"] == 1, r.output
    assert run("apply", f).exit_code == 0 and run("verify", f).exit_code == 0
    assert title(f) == before


def test_a_summary_given_is_used_and_a_later_range_carries_no_prompt(tmp_path, monkeypatch):
    monkeypatch.setenv("TXDB_DB", str(tmp_path / "catalog.db"))
    f = write(tmp_path / "claude" / "projects" / "-src-app" / f"{SID}.jsonl", work())
    assert run("compact-range", f, "--from", 16, "--to", 31, "--summary", "the middle").exit_code == 0
    objs = [orjson.loads(x) for x in pending(f).read_bytes().splitlines()]
    survivor = next(o for o in objs if isinstance(o["message"]["content"], str)
                    and o["message"]["content"].startswith("<persisted-range"))
    assert "\nSummary: the middle\n" in survivor["message"]["content"]
    assert title(pending(f)) == title(f)


@pytest.mark.parametrize("src,target", [(CLI_MADE, 28_000), (CORPUS_CLI_MADE, 50_000)], ids=["5a73f7d9", "3fa1842b"])
def test_rescue_leaves_no_marker_naming_a_missing_file_and_no_superseded_file(tmp_path, monkeypatch, src, target):
    # Both need every persist step and then compact-range over blocks those steps moved:
    # the range's preview quoted their sidecars, which were never written (3fa1842b: one).
    if not src.is_file():
        pytest.skip("shared corpus not present")
    monkeypatch.setenv("TXDB_DB", str(tmp_path / "catalog.db"))
    d = tmp_path / "claude" / "projects" / src.parent.name
    d.mkdir(parents=True)
    f = Path(shutil.copyfile(src, d / src.name))
    r = run("rescue", f, "--target", target, "--json")
    assert r.exit_code == 0, r.output
    res = json.loads(r.output)["result"]
    assert res["steps"][-1]["step"] == "compact-range"
    data = pending(f).read_bytes()
    t = Transcript.load(pending(f))
    named: set[str] = set()
    todo = [data]
    while todo:
        for p in sc.referenced(todo.pop()):
            assert Path(p).exists(), p                     # every path a marker names, on disk
            if p not in named and p.endswith(".json"):
                todo.append(Path(p).read_bytes())
            named.add(p)
    sdir = str(sc.session_dir(f))
    quoted = set(re.findall(re.escape(json.dumps(sdir)[1:-1]) + r"/[A-Za-z0-9._/-]+\.(?:txt|json)", data.decode()))
    assert quoted and all(Path(p).is_file() for p in quoted), sorted(p for p in quoted if not Path(p).is_file())[:3]
    on_disk = {str(p) for p in sc.session_dir(f).rglob("*") if p.is_file()}
    assert on_disk <= named, sorted(on_disk - named)[:3]   # nothing written that nothing names
    assert t.chain[-1].uuid == Transcript.load(f).chain[-1].uuid
