"""The real-CLI harness works: install, fake API, driver, scenarios, oracle.

Tests marked ``realcli`` install the pinned Claude Code CLI from npm (once,
cached) and skip with one reason when that is impossible.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import shutil
import subprocess
import sys
import uuid
import zlib
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from realcli import (  # noqa: E402
    CLAUDE_CODE_VERSION,
    CLI_RELEASES,
    DATA_DIR,
    Sandbox,
    claude_binary,
    cli_releases,
    content_blocks,
    munge,
    resume,
)
from realcli import scenarios  # noqa: E402
from realcli.driver import clean_env  # noqa: E402
from realcli.install import ClaudeUnavailable, cached_install, install_claude  # noqa: E402
from realcli.fake_api import FakeAPI, bash, classify, text, thinking  # noqa: E402
from sessions import session_path  # noqa: E402

realcli = pytest.mark.realcli

# --------------------------------------------------------------------------
# helpers


def lines(path: Path) -> list[dict]:
    out = []
    for raw in path.read_bytes().splitlines():
        if raw.strip():
            out.append(json.loads(raw))
    return out


def blocks_of(records: list[dict], role: str | None = None) -> list[dict]:
    out = []
    for d in records:
        if d.get("type") in ("user", "assistant") and (role is None or d["type"] == role):
            out.extend(content_blocks(d["message"]))
    return out


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def post(base_url: str, path: str, body: dict) -> tuple[int, str, bytes]:
    host, port = base_url.removeprefix("http://").split(":")
    c = http.client.HTTPConnection(host, int(port), timeout=10)
    c.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, r.getheader("Content-Type") or "", data


def sse_events(data: bytes) -> list[tuple[str, dict]]:
    out = []
    for chunk in data.decode().split("\n\n"):
        if not chunk.strip():
            continue
        ev = dict(line.split(": ", 1) for line in chunk.splitlines())
        out.append((ev["event"], json.loads(ev["data"])))
    return out


# --------------------------------------------------------------------------
# no CLI needed


def test_fake_api_streams_scripted_replies_and_records_requests():
    main_body = {"model": "m", "stream": True, "tools": [{"name": "Bash"}],
                 "system": [{"type": "text", "text": "You are a Claude agent"}],
                 "messages": [{"role": "user", "content": "hi " * 400}]}
    compact_body = dict(main_body, messages=[{"role": "user", "content":
                                              "Your task is to create a detailed summary of the conversation so far"}])
    with FakeAPI([thinking("hmm", "SIG123") + bash("echo 1")], fallback=text("fallback")) as api:
        assert api.base_url.startswith("http://127.0.0.1:")
        # a side request (compact) does not consume the script
        st, ct, data = post(api.base_url, "/v1/messages?beta=true", compact_body)
        assert st == 200 and ct == "text/event-stream"
        assert "<summary>" in "".join(e["delta"].get("text", "") for n, e in sse_events(data)
                                      if n == "content_block_delta")
        st, ct, data = post(api.base_url, "/v1/messages?beta=true", main_body)
        evs = sse_events(data)
        names = [n for n, _ in evs]
        assert names[0] == "message_start" and names[-2:] == ["message_delta", "message_stop"]
        deltas = [e["delta"] for n, e in evs if n == "content_block_delta"]
        assert {"type": "thinking_delta", "thinking": "hmm"} in deltas
        assert {"type": "signature_delta", "signature": "SIG123"} in deltas
        tool_json = "".join(d["partial_json"] for d in deltas if d["type"] == "input_json_delta")
        assert json.loads(tool_json) == {"command": "echo 1", "description": "Run a command"}
        md = evs[-2][1]
        assert md["delta"]["stop_reason"] == "tool_use"
        u = md["usage"]
        total = u["input_tokens"] + u["cache_read_input_tokens"] + u["cache_creation_input_tokens"]
        assert total >= 1200 // 4 - 10  # chars / 4
        # script exhausted: fallback, non-streaming JSON
        st, ct, data = post(api.base_url, "/v1/messages", dict(main_body, stream=False))
        msg = json.loads(data)
        assert msg["content"] == [{"type": "text", "text": "fallback"}] and msg["stop_reason"] == "end_turn"
        st, _, data = post(api.base_url, "/v1/messages/count_tokens", main_body)
        assert st == 200 and json.loads(data)["input_tokens"] > 0
        st, _, _ = post(api.base_url, "/v1/unknown", {})
        assert st == 404
        kinds = [r.kind for r in api.requests]
        assert kinds == ["compact", "main", "main", "count_tokens", "other"]
        assert api.requests[1].body == main_body


def test_what_the_bench_calls_sent_is_what_the_fake_api_bills():
    """bench_truth's "sent" is in the units of the usage the fake API records
    (so of the usage a CLI-made session holds, which txdb's estimate is
    fitted on): it counted the compact JSON the CLI sends, 1-4% below what
    the fake bills (json.dumps's separators), most after a strip leaves
    many small blocks."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    import bench_truth

    body = {"model": "m", "stream": True, "tools": [{"name": "Bash", "input_schema": {"type": "object"}}],
            "system": [{"type": "text", "text": "You are a Claude agent"}],
            "messages": [{"role": "user", "content": [{"type": "text", "text": "go"}]}]
            + [m for i in range(60) for m in (
                {"role": "assistant", "content": [{"type": "tool_use", "id": f"toolu_{i:06}", "name": "Bash",
                                                   "input": {"command": "ls", "description": "list"}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"toolu_{i:06}",
                                              "content": "[stripped by txdb: 691 chars]", "is_error": False}]})]}
    with FakeAPI([text("ok")]) as api:
        _, _, data = post(api.base_url, "/v1/messages?beta=true", body)
    u = [e["usage"] for n, e in sse_events(data) if n == "message_delta"][0]
    billed = u["input_tokens"] + u["cache_read_input_tokens"] + u["cache_creation_input_tokens"]
    assert bench_truth.request_tokens(body) == billed


def test_classify_side_requests():
    assert classify({"messages": [{"role": "user", "content": "x"}], "tools": [{}]}) == "main"
    assert classify({"system": "Generate a short title for this conversation",
                     "messages": [{"role": "user", "content": "x"}]}) == "title"
    assert classify({"system": "helper", "messages": [{"role": "user", "content": "x"}]}) == "side"
    assert classify({"messages": [{"role": "user", "content": "SUB-1 go"}], "tools": [{}]},
                    {"SUB-1 go": []}) == "subagent"


def test_env_is_sanitised(monkeypatch, tmp_path):
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", "/somewhere/else")
    monkeypatch.setenv("CLAUDE_CODE_ENTRYPOINT", "cli")
    monkeypatch.setenv("CLAUDECODE", "1")
    monkeypatch.setenv("ANTHROPIC_AUTH_TOKEN", "not-for-the-child")
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.invalid:1")
    env = clean_env(tmp_path, "http://127.0.0.1:9")
    assert not any(k.startswith(("CLAUDE_CODE_ENTRY", "CLAUDECODE", "CLAUDE_CONFIG")) for k in env)
    assert "ANTHROPIC_AUTH_TOKEN" not in env and "HTTPS_PROXY" not in env
    assert env["HOME"] == str(tmp_path) and env["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:9"
    assert env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] == "1" and env["IS_SANDBOX"] == "1"


def test_png_and_munge():
    png = scenarios.png_bytes(3, 2)
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    ihdr_len = int.from_bytes(png[8:12], "big")
    assert png[12:16] == b"IHDR" and ihdr_len == 13
    assert zlib.crc32(png[12:16 + ihdr_len]) == int.from_bytes(png[16 + ihdr_len:20 + ihdr_len], "big")
    assert munge("/home/user/src/demo_1.x") == "-home-user-src-demo-1-x"
    assert munge("C:\\Users\\a b") == "C--Users-a-b"


@pytest.fixture
def fresh_install_env(monkeypatch, tmp_path):
    """An empty cache and no override; forget per-process install results."""
    monkeypatch.setenv("TXDB_TEST_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("TXDB_CLAUDE_BIN", raising=False)
    cached_install.cache_clear()
    yield tmp_path / "cache"
    cached_install.cache_clear()


def test_install_without_npm_skips_with_one_reason(fresh_install_env, monkeypatch, tmp_path):
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    with pytest.raises(ClaudeUnavailable, match="npm is not installed"):
        install_claude()
    with pytest.raises(pytest.skip.Exception, match=r"real Claude Code CLI [0-9.]+ unavailable: npm is not installed"):
        claude_binary()


def test_install_refused_by_registry_leaves_no_debris(fresh_install_env, monkeypatch):
    if shutil.which("npm") is None:
        pytest.skip("npm is not installed")
    monkeypatch.setenv("npm_config_registry", "http://127.0.0.1:9/")  # closed loopback port
    monkeypatch.setenv("npm_config_fetch_retries", "0")
    with pytest.raises(ClaudeUnavailable, match=r"npm install @anthropic-ai/claude-code@.* failed: .*ECONNREFUSED"):
        install_claude()
    assert [p.name for p in fresh_install_env.iterdir()] == [f".claude-code-{CLAUDE_CODE_VERSION}.lock"]


FAKE_NPM = """#!{python}
import os, sys, time
args = sys.argv[1:]
prefix = args[args.index("--prefix") + 1]
with open(os.environ["FAKE_NPM_LOG"], "a") as f:
    f.write(" ".join(args) + "\\n")
time.sleep(1.0)
d = os.path.join(prefix, "node_modules", "@anthropic-ai", "claude-code-linux-x64")
os.makedirs(d)
os.symlink(os.environ["FAKE_NPM_BINARY"], os.path.join(d, "claude"))
"""


@realcli
def test_concurrent_installs_run_npm_once(claude, tmp_path):
    """Two processes installing into one empty cache: one npm run, same result."""
    fakebin = tmp_path / "bin"
    fakebin.mkdir()
    npm = fakebin / "npm"
    npm.write_text(FAKE_NPM.format(python=sys.executable))
    npm.chmod(0o755)
    log = tmp_path / "npm.log"
    env = dict(os.environ, PATH=f"{fakebin}{os.pathsep}{os.environ.get('PATH', '')}",
               TXDB_TEST_CACHE=str(tmp_path / "cache"), FAKE_NPM_LOG=str(log),
               FAKE_NPM_BINARY=str(claude))
    env.pop("TXDB_CLAUDE_BIN", None)
    code = ("import sys; sys.path.insert(0, sys.argv[1]); "
            "from realcli.install import install_claude; print(install_claude())")
    tests_dir = str(Path(__file__).resolve().parent)
    procs = [subprocess.Popen([sys.executable, "-c", code, tests_dir], env=env, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    paths = {o.strip() for o, _ in outs}
    assert len(paths) == 1 and Path(paths.pop()).is_relative_to(tmp_path / "cache" / f"claude-code-{CLAUDE_CODE_VERSION}")
    assert len(log.read_text().splitlines()) == 1
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == [
        f".claude-code-{CLAUDE_CODE_VERSION}.lock", f"claude-code-{CLAUDE_CODE_VERSION}"]


# --------------------------------------------------------------------------
# with the real CLI


@pytest.fixture(scope="module")
def claude() -> Path:
    return claude_binary()


@pytest.fixture(scope="module")
def tools_run(claude, tmp_path_factory):
    with Sandbox(claude, tmp_path_factory.mktemp("tools")) as sb:
        f = scenarios.tools_session(sb)
    return sb, f


@pytest.fixture(scope="module")
def subagent_run(claude, tmp_path_factory):
    with Sandbox(claude, tmp_path_factory.mktemp("subagent")) as sb:
        f = scenarios.subagent_session(sb)
    return sb, f


@pytest.fixture(scope="module")
def compact_run(claude, tmp_path_factory):
    with Sandbox(claude, tmp_path_factory.mktemp("compact")) as sb:
        f = scenarios.compact_session(sb)
    return sb, f


@realcli
def test_releases_checked_full_locally_a_subset_in_ci():
    assert CLI_RELEASES[0] == CLAUDE_CODE_VERSION and len(set(CLI_RELEASES)) >= 3
    every = tuple((v, True) for v in CLI_RELEASES)
    assert cli_releases({}) == every  # a developer's machine: the full matrix
    assert cli_releases({"TXDB_CLI_VERSIONS": "all", "CI": "true"}) == every
    ci = cli_releases({"CI": "true"})  # CI: the pinned release in full, the others on a subset
    assert [v for v, _ in ci] == list(CLI_RELEASES)
    assert [full for _, full in ci] == [v == CLAUDE_CODE_VERSION for v in CLI_RELEASES]
    assert cli_releases({"TXDB_CLI_VERSIONS": "pinned"}) == ((CLAUDE_CODE_VERSION, True),)
    assert cli_releases({"TXDB_CLI_VERSIONS": "2.1.332, 2.1.250,2.1.332"}) == (("2.1.332", True),
                                                                               ("2.1.250", True))


def test_binary_is_the_pinned_version(claude):
    import subprocess

    out = subprocess.run([str(claude), "--version"], capture_output=True, text=True, timeout=60)
    assert out.stdout.split()[0] == CLAUDE_CODE_VERSION


@realcli
def test_cli_writes_tool_pairs_thinking_and_images(tools_run):
    sb, f = tools_run
    assert f.parent == sb.project_dir and f.parent.name == munge(sb.cwd)
    recs = lines(f)
    sid = f.stem
    assert all(r.get("sessionId") in (None, sid) for r in recs)
    assert {r.get("version") for r in recs if r.get("type") == "user"} == {CLAUDE_CODE_VERSION}
    uses = {b["id"]: b for b in blocks_of(recs, "assistant") if b["type"] == "tool_use"}
    results = {b["tool_use_id"]: b for b in blocks_of(recs, "user") if b["type"] == "tool_result"}
    assert sorted(b["name"] for b in uses.values()) == ["Bash", "Edit", "Read", "Read", "Write"]
    assert set(uses) == set(results), "every tool_use has its tool_result"
    bash_id = next(i for i, b in uses.items() if b["name"] == "Bash")
    assert "hello-from-bash" in json.dumps(results[bash_id]["content"])
    png_id = next(i for i, b in uses.items() if b["input"].get("file_path", "").endswith(".png"))
    assert any(b.get("type") == "image" for b in results[png_id]["content"])
    thinks = [b for b in blocks_of(recs, "assistant") if b["type"] == "thinking"]
    assert len(thinks) == 3 and all(b["signature"] for b in thinks)
    prompts = [r["message"]["content"] for r in recs
               if r.get("type") == "user" and isinstance(r["message"]["content"], str)]
    assert prompts == ["Please inspect this project and make out.txt.", "What does out.txt say now?"]
    assert (sb.cwd / "out.txt").read_text() == "second version\n"
    # the CLI made no side requests in -p mode here: every request is the main loop
    assert {r.kind for r in sb.api.message_requests()} == {"main"}
    assert len(sb.runs) == 2 and all(r.ok for r in sb.runs)


@realcli
def test_cli_writes_subagent_side_files(subagent_run):
    sb, f = subagent_run
    sub = f.with_suffix("") / "subagents"
    agents = sorted(sub.glob("agent-*.jsonl"))
    assert len(agents) == 1
    assert agents[0].with_suffix(".meta.json").is_file()
    srecs = lines(agents[0])
    names = [b["name"] for b in blocks_of(srecs, "assistant") if b["type"] == "tool_use"]
    assert names == ["Bash", "Read"]
    assert all(r.get("isSidechain") for r in srecs if r.get("type") in ("user", "assistant"))
    main_uses = [b for b in blocks_of(lines(f), "assistant") if b["type"] == "tool_use"]
    assert [b["name"] for b in main_uses] == ["Agent"]
    assert any(r.kind == "subagent" for r in sb.api.message_requests())


@realcli
def test_oracle_reports_resumed_messages(tools_run, tmp_path):
    _, f = tools_run
    before = sha256(f)
    r = resume(f, "PING-ORACLE", workdir=tmp_path)
    assert r.loaded and not r.compacted, r.summary()
    assert sha256(f) == before, "the source is never written"
    ua = r.user_assistant_messages()
    assert ua[0]["role"] == "user" and "PING-ORACLE" in json.dumps(ua[-1])
    uses = {b["id"]: b["name"] for b in r.blocks("tool_use")}
    results = {b["tool_use_id"] for b in r.blocks("tool_result")}
    assert sorted(uses.values()) == ["Bash", "Edit", "Read", "Read", "Write"] and set(uses) == results
    assert "hello-from-bash" in r.text() and "Turn two: out.txt says" in r.messages_text()
    assert r.system_chars > 1000 and r.messages_chars == len(json.dumps(
        r.messages, ensure_ascii=False, separators=(",", ":")))
    assert len(r.message_sizes) == len(r.messages)
    # the scratch copy received the resumed turn; the source did not
    assert "PING-ORACLE" in r.session_file.read_text() and "PING-ORACLE" not in f.read_text()


@realcli
def test_null_parent_mid_file_shortens_resume(tools_run, tmp_path):
    """DESIGN.md: a parentUuid set to null in mid-file cuts what --resume sends."""
    _, f = tools_run
    full = resume(f, "ping", workdir=tmp_path / "full")
    cut_file = tmp_path / "cut" / f.name
    cut_file.parent.mkdir(parents=True)
    out = []
    for raw in f.read_bytes().splitlines(keepends=True):
        d = json.loads(raw)
        if d.get("type") == "user" and d["message"]["content"] == "What does out.txt say now?":
            d["parentUuid"] = None
            raw = json.dumps(d, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"
        out.append(raw)
    cut_file.write_bytes(b"".join(out))
    cut = resume(cut_file, "ping", workdir=tmp_path / "cut-run")
    assert full.loaded and cut.loaded, (full.summary(), cut.summary())
    assert len(cut.user_assistant_messages()) < len(full.user_assistant_messages())
    assert cut.messages_chars < full.messages_chars
    assert "hello-from-bash" in full.messages_text() and "hello-from-bash" not in cut.messages_text()
    assert "What does out.txt say now?" in cut.messages_text()


@realcli
def test_high_recorded_usage_makes_resume_compact(tools_run, tmp_path):
    """The oracle's `compacted` flag sees the CLI's auto-compact on resume."""
    _, f = tools_run
    recs = f.read_bytes().splitlines(keepends=True)
    last = max(i for i, raw in enumerate(recs) if json.loads(raw).get("type") == "assistant")
    d = json.loads(recs[last])
    d["message"]["usage"].update(input_tokens=5, cache_creation_input_tokens=0,
                                 cache_read_input_tokens=990_000)
    recs[last] = json.dumps(d, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"
    big = tmp_path / "big" / f.name
    big.parent.mkdir()
    big.write_bytes(b"".join(recs))
    r = resume(big, "ping", workdir=tmp_path / "run")
    assert r.loaded and r.compacted, r.summary()
    assert "being continued from a previous conversation" in r.messages_text()


@realcli
def test_compact_scenario_and_resume_below_boundary(compact_run, tmp_path):
    sb, f = compact_run
    recs = lines(f)
    bounds = [r for r in recs if r.get("subtype") == "compact_boundary"]
    assert len(bounds) == 1 and bounds[0]["parentUuid"] is None and bounds[0]["logicalParentUuid"]
    assert [r.kind for r in sb.api.message_requests()].count("compact") == 1
    r = resume(f, "ping", workdir=tmp_path)
    assert r.loaded and not r.compacted, r.summary()
    assert "being continued from a previous conversation" in r.messages_text()
    assert "First answer after compaction." in r.messages_text()
    assert "hello" not in r.messages_text() and not r.blocks("tool_use")


@realcli
def test_missing_session_does_not_load(claude, tmp_path):
    with Sandbox(claude, tmp_path) as sb:
        res = sb.run("ping", resume=str(uuid.uuid4()))
        assert res.returncode != 0 and "No conversation found" in res.stderr
        assert not sb.api.message_requests()


# --------------------------------------------------------------------------
# corpus sessions (read-only source, resumed from a scratch copy); demo-9 and
# demo-14 are shipped in tests/data/generated, the others need ../shared/corpus

GENERATED = [
    "-home-user-src-demo-1/91f27d20-32b7-42f9-8096-f776eb39baf6.jsonl",  # has subagents/
    "-home-user-src-demo-9/b88a7a83-a643-4c78-b0b0-bae40b5e91ae.jsonl",  # has a /compact
    "-home-user-src-demo-14/5a73f7d9-de47-4921-a60f-d1c8c68135c5.jsonl",
]
REAL = [
    "hannibal8856-claude_backup/-home-moxa-sdc1-home-moxa-mds4xgl3-buildroot-dl/"
    "d3f32579-7f66-464a-b856-526a67163a15.jsonl",  # 3.9 MB
    "bradymholt-dotfiles/-Users-bholt-dev-evergreen/354b2588-2a5c-43d7-b678-e95a4a87bd2a.jsonl",  # 2.8 MB
]


def corpus_file(rel: str) -> Path:
    """The session shipped in tests/data when it is, else ../shared/corpus's."""
    p = session_path(rel)
    if not p.is_file():
        pytest.skip(f"corpus not available: {p}")
    return p


@realcli
@pytest.mark.parametrize("rel", GENERATED, ids=lambda s: s.split("/")[0])
def test_generated_corpus_session_resumes(rel, claude, tmp_path):
    src = corpus_file("generated/" + rel)
    before = sha256(src)
    r = resume(src, "ping", workdir=tmp_path)
    assert r.loaded and not r.compacted, r.summary()
    assert len(r.user_assistant_messages()) >= 2
    assert sha256(src) == before
    if "demo-9" in rel:  # resume sends only what hangs below the compact boundary
        assert "being continued from a previous conversation" in r.messages_text()
        assert len(r.messages) < 20


@realcli
@pytest.mark.parametrize("rel", REAL, ids=lambda s: s.split("/")[0])
def test_real_multi_mb_session_resumes_without_compacting(rel, claude, tmp_path):
    src = corpus_file("real/" + rel)
    assert src.stat().st_size > 2_000_000
    r = resume(src, "ping", workdir=tmp_path)
    assert r.loaded and not r.compacted, r.summary()
    assert len(r.user_assistant_messages()) >= 10
    assert r.messages_chars > 100_000


# --------------------------------------------------------------------------
# the committed fixtures


def committed_sessions() -> list[Path]:
    return sorted(p for p in DATA_DIR.glob("*/*.jsonl"))


def test_committed_fixtures_are_small_and_laid_out_like_claude():
    sessions = committed_sessions()
    assert len(sessions) >= 2
    for p in sessions:
        assert p.stat().st_size < 300_000, p
        assert p.parent.name.startswith("-")
        recs = lines(p)
        assert {r["sessionId"] for r in recs if "sessionId" in r} == {p.stem}
        cwd = next(r["cwd"] for r in recs if r.get("cwd"))
        assert munge(cwd) == p.parent.name
    assert any((p.with_suffix("") / "subagents").is_dir() for p in sessions)


@realcli
@pytest.mark.parametrize("session", committed_sessions(), ids=lambda p: p.parent.name)
def test_committed_fixture_resumes(session, claude, tmp_path):
    r = resume(session, "ping", workdir=tmp_path)
    assert r.loaded and not r.compacted, r.summary()
