"""Images: list-images, replace-images (SESSION and --where), the image_targets
view, analyze's warning past the API's image limits, and bad input."""

from __future__ import annotations

import base64
import hashlib
import json
import struct
from pathlib import Path

import orjson
import pytest

from conftest import run
from sessions import assistant, user, write
from txdb.surgery.images import DROPPED


def png(w: int, h: int, salt: bytes = b"") -> bytes:
    """The header of a PNG of w x h pixels (all txdb reads), made distinct by ``salt``."""
    return b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + b"IHDR" + struct.pack(">II", w, h) + b"\x08\x02\x00\x00\x00" + salt


def image_block(data: bytes, media_type: str = "image/png") -> dict:
    return {"type": "image", "source": {"type": "base64", "media_type": media_type,
                                        "data": base64.b64encode(data).decode()}}


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


A = png(100, 100, b"a")
B = png(3000, 2000, b"b")


def image_session(path: Path, session: str = "s-img") -> Path:
    """A pasted image (A) beside text; an image-only message (B); A again inside
    a tool_result (alone there); an image whose data is not base64."""
    u0 = user([{"type": "text", "text": "look at this"}, image_block(A)], None, session=session)
    a0 = assistant("a red square", u0["uuid"], session=session)
    u1 = user([image_block(B)], a0["uuid"], session=session)
    a1 = assistant([{"type": "tool_use", "id": "toolu_r1", "name": "Read", "input": {"file_path": "/x.png"}}],
                   u1["uuid"], session=session)
    r1 = user([{"type": "tool_result", "tool_use_id": "toolu_r1", "content": [image_block(A)]}], a1["uuid"],
              session=session)
    a2 = assistant("same square", r1["uuid"], session=session)
    bad = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "!!not*base64"}}
    u2 = user([{"type": "text", "text": "and this"}, bad], a2["uuid"], session=session)
    a3 = assistant("cannot read it", u2["uuid"], session=session)
    return write(path, [u0, a0, u1, a1, r1, a2, u2, a3])


@pytest.fixture
def env(tmp_path, monkeypatch):
    monkeypatch.setenv("TXDB_DB", str(tmp_path / "catalog.db"))
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "claude"))
    proj = tmp_path / "claude" / "projects" / "-home-me-app"
    image_session(proj / "11111111-0000-0000-0000-000000000001.jsonl")
    return proj


def _session(env) -> Path:
    return env / "11111111-0000-0000-0000-000000000001.jsonl"


def _transcripts(tmp_path, mapping: dict[str, bytes]) -> Path:
    d = tmp_path / "transcripts"
    d.mkdir(exist_ok=True)
    for name, body in mapping.items():
        (d / name).write_bytes(body)
    return d


def _images_in(path: Path) -> list[str]:
    """sha256 of every image block left in a file (top level and in tool results)."""
    out = []
    for line in path.read_bytes().splitlines():
        o = orjson.loads(line)
        c = (o.get("message") or {}).get("content")
        for b in c if isinstance(c, list) else ():
            inner = b.get("content") if b.get("type") == "tool_result" and isinstance(b.get("content"), list) else [b]
            for x in inner:
                if isinstance(x, dict) and x.get("type") == "image":
                    try:
                        out.append(sha(base64.b64decode(x["source"]["data"], validate=True)))
                    except ValueError:
                        out.append("invalid")
    return out


def _contents(path: Path) -> list:
    return [(orjson.loads(ln).get("message") or {}).get("content") for ln in path.read_bytes().splitlines()]


def test_list_images_reports_each_image(env):
    r = run("list-images", _session(env), "--json")
    assert r.exit_code == 0, r.output
    rows = json.loads(r.output)
    assert [(x["pos"], x["where"]) for x in rows] == [(0, "message"), (2, "message"), (4, "tool_result"),
                                                      (6, "message")]
    a, b, nested, bad = rows
    assert a["sha256"] == nested["sha256"] == sha(A)          # same image, same key
    assert (a["width"], a["height"], a["tokens"]) == (100, 100, 14)   # ceil(100*100/750)
    assert (b["width"], b["height"], b["tokens"]) == (3000, 2000, 1600)  # capped
    assert a["base64_chars"] == len(base64.b64encode(A)) and a["media_type"] == "image/png"
    assert nested["tool_use_id"] == "toolu_r1"
    assert bad["sha256"] is None
    text = run("list-images", _session(env)).output
    assert "4 images (2 distinct)" in text and "(invalid base64)" in text


def test_catalog_view_lists_images_of_every_session(env):
    image_session(env / "11111111-0000-0000-0000-000000000002.jsonl", session="s-two")
    assert run("refresh").exit_code == 0
    r = run("query", "select session_id, pos, \"where\", images, width, height, image_sha256 from image_targets "
                     "order by session_id, pos", "--json")
    rows = json.loads(r.output)
    assert len(rows) == 8 and {x["session_id"] for x in rows} == {"s-img", "s-two"}
    nested = [x for x in rows if x["where"] == "tool_result"]
    assert all(x["image_sha256"] == sha(A) and x["images"] == 1 and x["width"] == 100 for x in nested)


def test_replace_images_same_transcript_everywhere(env, tmp_path):
    f = _session(env)
    before = f.read_bytes()
    d = _transcripts(tmp_path, {f"{sha(A)}.txt": "Un carré rouge.\n".encode()})
    r = run("replace-images", f, "--dir", d)
    assert r.exit_code == 0, r.output
    assert "2 of 4 images replaced" in r.output and "2 kept (no transcript)" in r.output
    assert f.read_bytes() == before                           # copy-first
    pending = Path(str(f) + ".pending")
    want = f'<image sha256="{sha(A)}" media_type="image/png">\nUn carré rouge.\n</image>'
    c = _contents(pending)
    assert c[0][1] == {"type": "text", "text": want}
    assert c[4][0]["content"] == [{"type": "text", "text": want}]
    assert sorted(_images_in(pending)) == sorted([sha(B), "invalid"])
    assert run("apply", f).exit_code == 0
    assert sha(A) not in _images_in(f)


def test_drop_missing_never_leaves_an_empty_content_list(env, tmp_path):
    f = _session(env)
    d = _transcripts(tmp_path, {})
    r = run("replace-images", f, "--dir", d, "--drop-missing", "--pos", "2")
    assert r.exit_code == 0, r.output
    pending = Path(str(f) + ".pending")
    assert _contents(pending)[2] == [{"type": "text", "text": DROPPED}]   # B was the message's only block
    r = run("replace-images", f, "--dir", d, "--drop-missing")
    assert r.exit_code == 0, r.output
    c = _contents(pending)
    assert c[4][0]["content"] == [{"type": "text", "text": DROPPED}]      # the tool_result's only block
    assert c[6] == [{"type": "text", "text": "and this"}]                # the invalid image went
    assert _images_in(pending) == []
    assert run("verify", str(pending)).exit_code == 0


def test_transcript_not_utf8_refuses_and_writes_nothing(env, tmp_path):
    f = _session(env)
    d = _transcripts(tmp_path, {f"{sha(A)}.txt": b"\xff\xfe caf\xe9"})
    r = run("replace-images", f, "--dir", d)
    assert r.exit_code == 1
    assert r.output.count("Error:") == 1 and "is not UTF-8" in r.output and "Traceback" not in r.output
    assert not Path(str(f) + ".pending").exists()


def test_folder_of_unrelated_files_changes_nothing(env, tmp_path):
    f = _session(env)
    d = _transcripts(tmp_path, {"notes.md": b"x", "README.txt": b"y", f"{'0' * 64}.txt": b"z",
                                f"{sha(A).upper()}.txt": b"upper-case is not a sha256 name"})
    (d / f"{sha(B)}.txt").mkdir()                              # a folder named like a transcript
    r = run("replace-images", f, "--dir", d)
    assert r.exit_code == 0, r.output
    assert "0 of 4 images replaced" in r.output and "(0 of 1 <sha256>.txt files used; 4 other entries of --dir ignored)" in r.output
    assert "Nothing to change" in r.output and not Path(str(f) + ".pending").exists()
    r = run("replace-images", f, "--dir", tmp_path / "nope")
    assert r.exit_code != 0 and "Error:" in r.output and "Traceback" not in r.output


def test_ignored_entries_of_the_folder_are_counted(env, tmp_path):
    f = _session(env)
    d = _transcripts(tmp_path, {"notes.md": b"x", "README.txt": b"y", f"{sha(A)}.txt": b"red square"})
    (d / "sub").mkdir()
    r = run("replace-images", f, "--dir", d, "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["result"]["ignored"] == 3
    assert "3 other entries of --dir ignored" in run("replace-images", f, "--dir", d, "--dry-run").output


def test_a_symlink_in_the_folder_is_never_read(env, tmp_path):
    """A link named like a transcript (here to a secret outside --dir) is
    ignored and counted: its target never reaches the session."""
    f = _session(env)
    secret = tmp_path / "secret"
    secret.write_bytes(b"root:SECRET-HASH:19000:0:99999:7:::\n")
    d = _transcripts(tmp_path, {})
    (d / f"{sha(A)}.txt").symlink_to(secret)
    (d / f"{sha(B)}.txt").symlink_to(tmp_path / "dangling")
    r = run("replace-images", f, "--dir", d, "--json")
    assert r.exit_code == 0, r.output
    res = json.loads(r.output)["result"]
    assert res["replaced"] == 0 and res["ignored"] == 2 and res["transcripts"] == 0
    assert not Path(str(f) + ".pending").exists()
    assert all(b"SECRET-HASH" not in p.read_bytes() for p in env.iterdir() if p.is_file())


def test_a_transcript_over_the_size_cap_refuses_the_pass(env, tmp_path):
    from txdb.surgery.images import MAX_TRANSCRIPT_BYTES
    f = _session(env)
    before = f.read_bytes()
    d = _transcripts(tmp_path, {f"{sha(B)}.txt": b"fine", f"{sha(A)}.txt": b"x" * (MAX_TRANSCRIPT_BYTES + 1)})
    r = run("replace-images", f, "--dir", d)
    assert r.exit_code == 1 and r.output.count("Error:") == 1 and "Traceback" not in r.output
    assert f"over the {MAX_TRANSCRIPT_BYTES:,}-byte limit" in r.output
    assert f.read_bytes() == before and not Path(str(f) + ".pending").exists()
    (d / f"{sha(A)}.txt").write_bytes(b"x" * MAX_TRANSCRIPT_BYTES)   # at the cap: read
    assert run("replace-images", f, "--dir", d).exit_code == 0


def test_one_trailing_newline_of_a_transcript_is_dropped(env, tmp_path):
    f = _session(env)
    d = _transcripts(tmp_path, {f"{sha(A)}.txt": b"line one\n\n", f"{sha(B)}.txt": b"crlf\r\n\r\n"})
    assert run("replace-images", f, "--dir", d).exit_code == 0
    c = _contents(Path(str(f) + ".pending"))
    assert c[0][1]["text"] == f'<image sha256="{sha(A)}" media_type="image/png">\nline one\n\n</image>'
    assert c[2][0]["text"] == f'<image sha256="{sha(B)}" media_type="image/png">\ncrlf\r\n\n</image>'


def test_replace_images_where_across_sessions(env, tmp_path):
    g = image_session(env / "11111111-0000-0000-0000-000000000002.jsonl", session="s-two")
    d = _transcripts(tmp_path, {f"{sha(A)}.txt": b"red square", f"{sha(B)}.txt": b"big chart"})
    assert run("refresh").exit_code == 0
    r = run("replace-images", "--where", "\"where\" = 'tool_result' or width > 2000", "--dir", d, "--apply")
    assert r.exit_code == 0, r.output
    for p in (_session(env), g):
        left = _images_in(p)
        assert sha(B) not in left and left.count(sha(A)) == 1   # the pasted A was not selected
        assert "invalid" in left


def test_positions_past_the_chain_and_backwards(env, tmp_path):
    f = _session(env)
    d = _transcripts(tmp_path, {})
    r = run("replace-images", f, "--dir", d, "--from", 99)
    assert r.exit_code == 1 and "Error: --from 99 is past the end of the active chain (positions 0..7)" in r.output
    r = run("replace-images", f, "--dir", d, "--from", 5, "--to", 2)
    assert r.exit_code != 0 and "--from 5 is after --to 2" in r.output
    r = run("replace-images", f, "--dir", d, "--pos", 2, "--to", 3)
    assert r.exit_code != 0 and "--pos N is one position" in r.output
    assert not Path(str(f) + ".pending").exists()


def _many_images(path: Path, n: int, big_px: int | None = None, in_tools: bool = False) -> Path:
    objs, parent = [], None
    for i in range(n):
        w = big_px if (big_px and i == 0) else 200
        blk = image_block(png(w, 200, str(i).encode()))
        if in_tools:
            a = assistant([{"type": "tool_use", "id": f"toolu_{i}", "name": "Read", "input": {}}], parent)
            u = user([{"type": "tool_result", "tool_use_id": f"toolu_{i}", "content": [blk]}], a["uuid"])
            objs += [a, u]
        else:
            a = assistant("ok", parent) if parent else None
            u = user([{"type": "text", "text": f"shot {i}"}, blk], a["uuid"] if a else None)
            objs += ([a] if a else []) + [u]
        parent = u["uuid"]
    objs.append(assistant("done", parent))
    return write(path, objs)


def test_analyze_warns_past_the_api_image_limits(env):
    many = _many_images(env / "22222222-0000-0000-0000-000000000001.jsonl", 101)
    r = run("analyze", many)
    assert r.exit_code == 0, r.output
    assert "Images on the active chain: 101" in r.output
    assert "past the API's 100 images per request" in r.output and "txdb replace-images" in r.output
    big = _many_images(env / "22222222-0000-0000-0000-000000000002.jsonl", 21, big_px=2500, in_tools=True)
    r = run("analyze", big, "--json")
    im = json.loads(r.output)["images"]
    assert im["images"] == 21 and im["in_tool_results"] == 21 and im["largest_px"] == 2500
    assert len(im["warnings"]) == 1 and "2000 px limit" in im["warnings"][0]
    assert "strip-tools" in im["warnings"][0]
    ok = _many_images(env / "22222222-0000-0000-0000-000000000003.jsonl", 20, big_px=2500)
    assert json.loads(run("analyze", ok, "--json").output)["images"]["warnings"] == []
    assert "Warning" not in run("analyze", _session(env)).output
