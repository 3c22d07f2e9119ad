"""Secrets in the archive: `txdb secrets scan` finds them in the text no
scan has read (detect-secrets' plugins, plus txdb's Google API key plugin),
stores where they are and a hash, never the secret; the `secrets` view and
`txdb sessions` show them; `txdb export --redact` (scanning first) writes
Parquet without them, the catalog unchanged."""

from __future__ import annotations

import hashlib
import re
import sqlite3

import orjson
import pytest

from conftest import run
from sessions import append, assistant, attachment, conversation, user, write
from txdb.catalog import db
from txdb.model import deep
from txdb.catalog.ingest.chunks import json_function
from txdb.catalog.ingest.store import refresh

GOOGLE = "AIzaSyD4nT5fAk3kEyF0rTe5t1ngOnlyXYZ1234"
JWT = ("eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJ1c2VyLTQyIiwic2Vzc2lvbiI6ImFiYzEyMyIsImlhdCI6MTcwMDAwMDAwMH0"
       ".k3Jq9XbQmT2vW8yZr1uN5pLs7aHd0eCf6gIo4tKxYwE")
AWS = "AKIAQ7XK2M4NTESTFAKE"
PASSWORD = "s3cr3t-Adm1n-Pa55!"
ATTACHED = "m4il-Pa55word-x9"  # in a file an @-mention attached
SECRETS = {GOOGLE: "Google API Key", JWT: "JSON Web Token", AWS: "AWS Access Key", PASSWORD: "Secret Keyword",
           ATTACHED: "Secret Keyword"}

assert len(GOOGLE) == 39 and GOOGLE.startswith("AIza")


def leaky_session(session: str = "leaky") -> list[dict]:
    """A user pastes a config (a Google key and an admin password), a Bash
    call carries a JWT, a Read result (numbered lines, and again in
    toolUseResult, as Claude Code writes it) an AWS key, an @-mentioned
    file's attachment a mail password."""
    u = user("here is my .env, why does it fail?\n"
             f"GOOGLE_MAPS_KEY={GOOGLE}\nADMIN_PASSWORD={PASSWORD}\nDEBUG=true", session=session)
    a = assistant([{"type": "tool_use", "id": "toolu_1", "name": "Bash",
                    "input": {"command": f"curl -H 'Authorization: Bearer {JWT}' http://localhost/api"}}],
                  u["uuid"], session=session)
    r1 = user([{"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok"}], a["uuid"], session=session)
    a2 = assistant([{"type": "tool_use", "id": "toolu_2", "name": "Read",
                     "input": {"file_path": "/home/me/.aws/credentials"}}], r1["uuid"], session=session)
    creds = f"     1\u2192[default]\n     2\u2192aws_access_key_id = {AWS}\n     3\u2192region = eu-west-1"
    r2 = user([{"type": "tool_result", "tool_use_id": "toolu_2", "content": creds}], a2["uuid"], session=session,
              toolUseResult={"type": "text", "file": {"filePath": "/home/me/.aws/credentials", "content": creds}})
    a3 = assistant("Your key is fine; the region is wrong.", r2["uuid"], session=session)
    env = f"SMTP_HOST=localhost\nSMTP_PASSWORD={ATTACHED}\n"
    at = attachment({"type": "file", "filename": "/home/me/app/.env",
                     "content": {"type": "text", "file": {"filePath": "/home/me/app/.env", "content": env}}},
                    a3["uuid"], session=session)
    return [u, a, r1, a2, r2, a3, at]


def clean_session(session: str = "clean") -> list[dict]:
    u = user("def login(password):\n    return check(password)\nsha 9f86d081884c7d659a2feaea0c55ad015a3bf4f1b2b0b822"
             "cd15d6c15b0f00a08 and uuid 1b4e28ba-2fa1-11d2-883f-0016d3cca427", session=session)
    return [u, assistant("if password == other_password: the check passes", u["uuid"], session=session)]


@pytest.fixture
def unscanned(tmp_path):
    root = tmp_path / "projects"
    write(root / "-home-me-app" / "leaky.jsonl", leaky_session())
    write(root / "-home-me-app" / "clean.jsonl", clean_session())
    write(root / "-home-me-app" / "plain.jsonl", conversation(2, session="plain"))
    path = tmp_path / "c.db"
    conn = db.connect(path)
    refresh(conn, [root])
    return path, conn, root


@pytest.fixture
def leaky(unscanned):
    path, conn, root = unscanned
    report = orjson.loads(run("secrets", "scan", "--db", path, "--json", ok=True).output)
    assert report["findings"] == len(SECRETS) and report["files"] == 3 and report["texts"] > 10
    return path, conn, root


def findings(conn, session: str) -> list[dict]:
    """Each finding with the text it is in: its block's, or for an
    attachment the string its field names."""
    rows = db.rows(conn, "SELECT f.*, b.text, txdb_json(r.file_id, r.offset) AS raw FROM secret_findings f JOIN records r USING (file_id, offset) "
                         "LEFT JOIN blocks b USING (file_id, offset, idx) JOIN sessions s USING (file_id) "
                         "WHERE s.session_id = ? ORDER BY f.offset, f.start", (session,))
    for r in rows:
        if r["idx"] == -1:
            assert r["field"] == "$.content.file.content"
            r["text"] = orjson.loads(r["raw"])["attachment"]["content"]["file"]["content"]
    return rows


def test_refresh_finds_each_secret_and_stores_no_secret(leaky):
    _, conn, _ = leaky
    rows = findings(conn, "leaky")
    found = {r["text"][r["start"]:r["start"] + r["length"]]: r for r in rows}
    assert {s: found[s]["type"] for s in SECRETS if s in found} == SECRETS
    assert len(rows) == len(SECRETS)
    for secret, r in found.items():
        assert r["secret_sha256"] == hashlib.sha256(secret.encode()).hexdigest()
        line = r["text"].split("\n")[r["line"] - 1]
        assert line[r["col"]:r["col"] + r["length"]] == secret
    # The table holds where and what kind, never the secret.
    stored = " ".join(str(v) for row in conn.execute("SELECT * FROM secret_findings") for v in row)
    assert not [s for s in SECRETS if s in stored]
    assert findings(conn, "clean") == [] and findings(conn, "plain") == []


def test_sessions_say_which_files_no_scan_has_read(unscanned):
    path, _, _ = unscanned
    listed = orjson.loads(run("sessions", "--db", path, "--json", ok=True).output)
    assert {s["session_id"]: s["secrets"] for s in listed} == {"leaky": None, "clean": None, "plain": None}


def test_secrets_view_and_sessions_column(leaky):
    path, _, _ = leaky
    r = run("query", "SELECT session_id, type, found_in, count FROM secrets ORDER BY type, found_in", "--db", path,
            "--json", ok=True)
    assert orjson.loads(r.output) == [
        {"session_id": "leaky", "type": "AWS Access Key", "found_in": "tool_result Read", "count": 1},
        {"session_id": "leaky", "type": "Google API Key", "found_in": "text", "count": 1},
        {"session_id": "leaky", "type": "JSON Web Token", "found_in": "tool_use Bash", "count": 1},
        {"session_id": "leaky", "type": "Secret Keyword", "found_in": "attachment file", "count": 1},
        {"session_id": "leaky", "type": "Secret Keyword", "found_in": "text", "count": 1},
    ]
    listed = orjson.loads(run("sessions", "--db", path, "--json", ok=True).output)
    assert {s["session_id"]: s["secrets"] for s in listed} == {"leaky": 5, "clean": 0, "plain": 0}
    table = run("sessions", "--db", path, "--table", ok=True).output
    assert "secrets" in table.splitlines()[0]


def scan(path) -> dict:
    return orjson.loads(run("secrets", "scan", "--db", path, "--json", ok=True).output)


def test_a_scan_reads_only_new_text(leaky):
    path, conn, root = leaky
    assert scan(path)["texts"] == 0  # nothing new
    # A finding taken out by hand stays out: a grown file's old blocks are not scanned again.
    conn.execute("DELETE FROM secret_findings WHERE type = 'Google API Key'")
    last = orjson.loads((root / "-home-me-app" / "leaky.jsonl").read_bytes().splitlines()[-1])
    other = "AKIAZ9YW8V7UTESTFAKE"
    text = f"and this one: key {other}"
    line = user(text, last["uuid"], session="leaky")
    append(root / "-home-me-app" / "leaky.jsonl", line)
    assert refresh(conn, [root]).grown == 1
    assert len(findings(conn, "leaky")) == 4  # refresh itself does not scan
    # The new block's text, and its line's raw JSON (every string it holds).
    assert scan(path) | {"seconds": 0} == {"files": 1, "texts": 2, "chars": len(text) + len(orjson.dumps(line)),
                                            "findings": 1, "seconds": 0}
    types = sorted(r["type"] for r in findings(conn, "leaky"))
    assert types == ["AWS Access Key", "AWS Access Key", "JSON Web Token", "Secret Keyword", "Secret Keyword"]
    # A rewritten file loses its findings with its blocks and is scanned whole again.
    p = root / "-home-me-app" / "leaky.jsonl"
    p.write_bytes(p.read_bytes().replace(b"region = eu-west-1", b"region = us-east-1"))
    assert refresh(conn, [root]).rewritten == 1
    assert findings(conn, "leaky") == []
    assert scan(path)["findings"] == 6
    assert len(findings(conn, "leaky")) == 6


def parquet_text(out) -> str:
    """Every value of every exported Parquet file, as one text."""
    import pyarrow.parquet as pq

    parts = []
    for f in sorted(out.rglob("*.parquet")):
        for col in pq.read_table(f).to_pylist():
            parts.extend(str(v) for v in col.values())
    return "\n".join(parts)


def test_export_redact_masks_every_finding(unscanned, tmp_path):
    """No scan before: the redacted export scans what no scan has read."""
    pytest.importorskip("pyarrow")
    duckdb = pytest.importorskip("duckdb")
    path, conn, _ = unscanned
    before = conn.execute("SELECT group_concat(txdb_json(file_id, offset), '') FROM records").fetchone()[0]
    run("export", tmp_path / "plain-export", "--db", path, ok=True)
    summary = run("export", tmp_path / "redacted", "--db", path, "--redact", ok=True).output
    assert re.search(rf"to {re.escape(str(tmp_path / 'redacted'))} \(secrets redacted; \d+ Parquet files, ", summary)
    plain, redacted = parquet_text(tmp_path / "plain-export"), parquet_text(tmp_path / "redacted")
    assert all(s in plain for s in SECRETS)  # the unredacted export is as it was
    assert [s for s in SECRETS if s in redacted] == []
    for kind in SECRETS.values():
        assert f"[REDACTED:{kind}]" in redacted
    # The raw lines are still JSON, the secret masked in toolUseResult too, the rest as it was.
    raws = duckdb.sql(f"SELECT raw FROM read_parquet('{tmp_path}/redacted/records/**/*.parquet', "
                      "hive_partitioning=true) WHERE session_id = 'leaky' ORDER BY line").fetchall()
    read = [orjson.loads(r[0]) for r in raws if "toolUseResult" in r[0]][0]
    assert "[REDACTED:AWS Access Key]" in read["toolUseResult"]["file"]["content"]
    assert "region = eu-west-1" in read["toolUseResult"]["file"]["content"]
    assert orjson.loads((tmp_path / "redacted" / "_txdb_export.json").read_bytes())["redacted"] is True
    # The catalog itself is unchanged.
    ro = sqlite3.connect(path)
    ro.create_function("txdb_json", 2, json_function(ro))
    assert ro.execute("SELECT group_concat(txdb_json(file_id, offset), '') FROM records").fetchone()[0] == before


def test_positions_hold_across_texts_and_characters_that_lower_to_two():
    """A finding's line, column and start are its own text's, whatever came
    before it in the scan (the texts are searched joined) and though a
    character before it lowers to two (the keyword search reads the
    lowered text)."""
    from txdb.catalog.secrets import scan_texts

    texts = ["nothing here\nat all", f"x\n\u0130\u0130 password = \"{PASSWORD}\"\ny", f"key {AWS}", ""]
    got = [[(f.type, f.line, f.col, t[f.start:f.start + f.length]) for f in fs]
           for fs, t in zip(scan_texts(texts), texts)]
    assert got == [[], [("Secret Keyword", 2, 15, PASSWORD)], [("AWS Access Key", 1, 4, AWS)], []]


def test_an_attachment_nested_deeper_than_orjson_reads_is_scanned(tmp_path):
    """Claude Code records any depth; the scan reads attachments as refresh
    reads lines (txdb/model/deep.py), without recursion."""
    nested: object = f"SMTP_PASSWORD={ATTACHED}"
    for _ in range(1500):
        nested = [nested]
    u = user("hi", session="deep")
    root = tmp_path / "projects"
    (root / "-home-me-app").mkdir(parents=True)
    line = deep.dumps(attachment({"type": "file", "content": nested}, u["uuid"], session="deep"))
    (root / "-home-me-app" / "deep.jsonl").write_bytes(orjson.dumps(u) + b"\n" + line + b"\n")
    conn = db.connect(tmp_path / "c.db")
    refresh(conn, [root])
    assert scan(tmp_path / "c.db")["findings"] == 1
    assert [r["field"] for r in db.rows(conn, "SELECT field FROM secret_findings")] == ["$.content" + "[0]" * 1500]


def test_a_plugin_anchored_to_its_line_finds_a_token_inside_a_longer_text():
    """detect-secrets matches a line at a time: its Telegram plugin's
    expression is anchored (^...$), and holds within a many-line text."""
    from txdb.catalog.secrets import scan_texts

    token = "123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw1"
    texts = ["first text", f"bot setup:\n{token}\ndone"]
    assert [[(f.type, f.line) for f in fs] for fs in scan_texts(texts)] == [[], [("Telegram Bot Token", 2)]]


def test_lines_a_scan_met_clean_before_are_skipped_without_changing_findings():
    """A catalog's scan skips the lines an earlier file's scan found no hit
    in (CleanLines); a file that repeats them, with a secret among them or
    beside them, has the findings a scan of its own gives, line, column and
    start included."""
    from txdb.catalog.secrets import CleanLines, scan_texts

    token = "123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw1"
    shared = "plain words\nconfig follows\n    indent = 4"
    files = [[shared, "first file only"],
             [f"{shared}\npassword = \"{PASSWORD}\"", "x", shared],
             ["config follows", f"key {AWS}\nplain words", f"bot:\n{token}\nplain words"],
             [shared, f"plain words\n{token}", "indent = 4"]]
    clean = CleanLines()
    for texts in files:
        assert scan_texts(texts, clean) == scan_texts(texts)
    assert {"plain words", "config follows", "first file only"} <= clean.lines
    assert not any(token in line or AWS in line for line in clean.lines)
    held = CleanLines(limit=1)  # full: nothing more is kept
    scan_texts(files[0], held)
    scan_texts(files[2], held)
    assert "config follows" in held.lines and f"key {AWS}" not in held.lines and "bot:" not in held.lines


def _strings_of(value) -> list[str]:
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings_of(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings_of(v)]
    return [value] if isinstance(value, str) else []


def test_export_redact_masks_a_secret_spelled_in_json_escapes(tmp_path):
    """A line's raw JSON may spell a key in escapes (\\u0041KIA..., AIz\\u0061Sy...):
    decoded, it is the key; the redacted raw holds it in no spelling."""
    pytest.importorskip("pyarrow")
    duckdb = pytest.importorskip("duckdb")
    root = tmp_path / "projects"
    u = user(f"my key {AWS} and maps {GOOGLE}", session="esc")
    a = assistant(f"noted: {AWS}", u["uuid"], session="esc")
    text = b"".join(dumps_line(o) for o in (u, a))
    escaped = (text.replace(AWS.encode(), b"\\u0041" + AWS[1:].encode())
               .replace(GOOGLE.encode(), GOOGLE[:3].encode() + b"\\u0061" + GOOGLE[4:].encode()))
    assert AWS.encode() not in escaped and GOOGLE.encode() not in escaped
    (root / "-p").mkdir(parents=True)
    (root / "-p" / "esc.jsonl").write_bytes(escaped)
    path = tmp_path / "c.db"
    conn = db.connect(path)
    refresh(conn, [root])
    conn.close()
    run("export", tmp_path / "redacted", "--db", path, "--redact", ok=True)
    raws = duckdb.sql(f"SELECT raw FROM read_parquet('{tmp_path}/redacted/records/**/*.parquet', "
                      "hive_partitioning=true) ORDER BY line").fetchall()
    decoded = [s for (r,) in raws for s in _strings_of(orjson.loads(r))]
    assert len(raws) == 2
    assert [s for s in decoded if AWS in s or GOOGLE in s] == []
    assert any("[REDACTED:AWS Access Key]" in s for s in decoded)
    assert any("[REDACTED:Google API Key]" in s for s in decoded)
    assert any(s.startswith("my key ") for s in decoded)  # the rest as it was


def dumps_line(obj) -> bytes:
    return orjson.dumps(obj) + b"\n"


def test_the_cheaper_indirect_reference_filter_gives_the_library_verdicts():
    """detect-secrets' line filter is replaced by an expression that holds
    on exactly the lines its own does (random lines of its punctuation, and
    shapes it names), and only while the library's is the one it replaces."""
    import random

    from detect_secrets.filters import heuristic

    from txdb.catalog import secrets

    secrets._detector()
    library = re.compile(secrets.LIBRARY_INDIRECT_REFERENCE)
    assert heuristic._get_indirect_reference_regex() is secrets.INDIRECT_REFERENCE
    rng = random.Random(7)
    lines = ["secret = get_secret_key()", "secret = request.headers['apikey']", "a := b[c]", "x !== y(z",
             "key: value", 'token == os.environ["T"]', "k=v(\x0b)", "f(x) = y"]
    lines += ["".join(rng.choice("ab_.-:=! \t([)]\x0b") for _ in range(rng.randint(0, 24))) for _ in range(50_000)]
    verdicts = [bool(library.search(line)) for line in lines]
    assert [bool(secrets.INDIRECT_REFERENCE.search(line)) for line in lines] == verdicts
    assert 1000 < sum(verdicts) < len(lines) - 1000


def test_a_cut_off_start_of_a_secret_is_masked_once_it_identifies_it():
    """Anywhere in a text (a branch name the CLI cut short): 8 characters
    past the kind's fixed start, and 12 in all; a bare fixed start is kept."""
    from txdb.catalog.secrets import Redactor

    key = "sk-ant-api03-" + "Zq8wX2vBn4Lm" * 8
    mask = Redactor({key: "[REDACTED:Anthropic API Key]"})
    assert mask(f'"gitBranch":"fix/{key[:50]}","x"') == '"gitBranch":"fix/[REDACTED:Anthropic API Key]","x"'
    assert mask(f"a {key[:21]} b") == "a [REDACTED:Anthropic API Key] b"
    assert mask(f"a {key[:20]} b") == f"a {key[:20]} b"  # 7 past sk-ant-api03-
    assert mask("sk-ant-api03- is the prefix") == "sk-ant-api03- is the prefix"
    password = "hunter2hunter2xyz"
    mask = Redactor({password: "[REDACTED:Secret Keyword]"})
    assert mask(f"{password[:12]}!") == "[REDACTED:Secret Keyword]!" and mask(password[:11]) == password[:11]
