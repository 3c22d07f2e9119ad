"""`txdb export --redact` leaves nothing of a secret behind: a planted
corpus holds a secret of each kind the detectors know (detect-secrets'
plugins and txdb's own), each in another field a line can carry (message
text, tool call input, tool result as a string and as a list,
toolUseResult's originalFile / stdout / file.content, a summary, a custom
title, gitBranch, cwd, an attachment, a dict key, a line no block holds),
in the project folder's name and a session file's name, in a subagent
transcript and in a sidecar file, multi-line (RSA, OpenSSH, EC keys; a
Read result's numbered lines, as the CLI writes them) and spelled in JSON
escapes, and a secret's start in a field cut short (a branch name in the
session's transcript and in its subagent's). Read back with DuckDB, no column and no folder name of the export
holds any 8 characters of one."""

from __future__ import annotations

import random
import string
import textwrap
from pathlib import Path
from urllib.parse import unquote

import orjson
import pytest

from conftest import run
from sessions import append, assistant, attachment, user, write
from txdb.catalog import db, secrets
from txdb.catalog.ingest.store import refresh

pytest.importorskip("pyarrow")
duckdb = pytest.importorskip("duckdb")

_rng = random.Random(25)
B64 = string.ascii_letters + string.digits + "+/"
ALNUM = string.ascii_letters + string.digits


def rs(alphabet: str, n: int) -> str:
    return "".join(_rng.choice(alphabet) for _ in range(n))


def pem(kind: str, body_chars: int) -> str:
    body = textwrap.wrap(rs(B64, body_chars), 64)
    label = f"{kind} PRIVATE KEY" if kind else "PRIVATE KEY"
    return "\n".join([f"-----BEGIN {label}-----", *body, f"-----END {label}-----"])


# A 2048-bit RSA key's PEM: 25 lines of 64 characters and a shorter one.
RSA = pem("RSA", 1624)
OPENSSH = pem("OPENSSH", 1800)
EC = pem("EC", 160)
assert len(RSA.splitlines()) == 28

S = {  # name -> the secret (what must vanish)
    "aws": "AKIA" + rs(string.ascii_uppercase + string.digits, 16),
    "github": "ghp_" + rs(ALNUM, 36),
    "slack": "xoxb-" + rs(string.digits, 12) + "-" + rs(string.digits, 13) + "-" + rs(ALNUM, 24).lower(),
    "openssh": OPENSSH,
    "rsa": RSA,
    "stripe": "sk_live_" + rs(ALNUM, 24),
    "ec": EC,
    "sendgrid": "SG." + rs(ALNUM, 22) + "." + rs(ALNUM, 43),
    "openai": "sk-" + rs(ALNUM, 20) + "T3BlbkFJ" + rs(ALNUM, 20),
    "google": "AIza" + rs(ALNUM, 35),
    "gitlab": "glpat-" + rs(ALNUM, 20),
    "mailchimp": rs("0123456789abcdef", 32) + "-us12",
    "pypi": "pypi-AgEIcHlwaS5vcmc" + rs(ALNUM, 80),
    "anthropic": "sk-ant-api03-" + rs(ALNUM + "_-", 93) + "AA",
    "square": "sq0csp-" + rs(ALNUM, 43),
    "twilio": "SK" + rs("0123456789abcdef", 32),
    "azure": rs(B64, 86) + "==",
    "password": "Pw-" + rs(ALNUM, 17),
    "jwt": ("eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9." + "eyJzdWIiOiJ1c2VyLTQyIiwic2Vzc2lvbiI6ImFiYzEyMyJ9."
            + rs(ALNUM, 43)),
    "basic": "Bp" + rs(ALNUM, 14),
    "npm": "npm_" + rs(ALNUM, 36),
    "telegram": rs(string.digits, 9) + ":AA" + rs(ALNUM, 33),
    "discord": "M" + rs(ALNUM, 23) + "." + rs(ALNUM, 6) + "." + rs(ALNUM, 27),
}
SESSION = "5e55a0a0-0000-4000-8000-000000000025"
PROJECT = "-home-me-" + S["anthropic"]  # a project folder named after a key
CWD = f"/srv/{S['mailchimp']}/app"
SESSION_FILE = S["square"] + ".jsonl"  # a session file named after one
KINDS = {"aws": "AWS Access Key", "github": "GitHub Token", "slack": "Slack Token", "openssh": "Private Key",
         "stripe": "Stripe Access Key", "sendgrid": "SendGrid API Key", "openai": "OpenAI Token",
         "google": "Google API Key", "gitlab": "GitLab Token", "mailchimp": "Mailchimp Access Key",
         "pypi": "PyPI Token", "anthropic": "Anthropic API Key", "square": "Square OAuth Secret",
         "twilio": "Twilio API Key", "azure": "Azure Storage Account access key", "password": "Secret Keyword",
         "jwt": "JSON Web Token", "basic": "Basic Auth Credentials", "npm": "NPM tokens",
         "telegram": "Telegram Bot Token", "discord": "Discord Bot Token"}


def numbered(text: str, arrow: bool = True) -> str:
    """A Read result's lines, as Claude Code writes them (older CLIs: a
    padded number and an arrow; 2.1.3xx: the number and a tab)."""
    return "\n".join((f"{i:6}\u2192{line}" if arrow else f"{i}\t{line}")
                     for i, line in enumerate(text.split("\n"), 1))


def _lines(folder: Path) -> list[bytes]:
    """The planted session's lines (one written by hand: JSON escapes), in ``folder``."""
    kw = {"session": SESSION, "cwd": CWD, "gitBranch": f"deploy/{S['gitlab']}"}
    out: list[dict] = []

    def add(obj: dict) -> dict:
        out.append(obj)
        return obj

    u = add(user(f"my key is {S['aws']}, does it work?", **kw))
    a = add(assistant([{"type": "text", "text": f"Use the token {S['github']} instead."}], u["uuid"],
                      session=SESSION))
    call = add(assistant([{"type": "tool_use", "id": "toolu_b", "name": "Bash",
                           "input": {"command": f"curl -H 'Authorization: Bearer {S['slack']}' http://127.0.0.1/"}}],
                         a["uuid"], session=SESSION))
    r = add(user([{"type": "tool_result", "tool_use_id": "toolu_b", "content": "ok"}], call["uuid"], **kw,
                 toolUseResult={"stdout": f"SENDGRID_KEY={S['sendgrid']}\n", "stderr": "", "interrupted": False}))
    w = add(assistant([{"type": "tool_use", "id": "toolu_w", "name": "Write",
                        "input": {"file_path": "/home/me/.ssh/id_ed25519", "content": OPENSSH + "\n"}}],
                      r["uuid"], session=SESSION))
    r = add(user([{"type": "tool_result", "tool_use_id": "toolu_w",
                   "content": "File created successfully at: /home/me/.ssh/id_ed25519"}], w["uuid"], **kw,
                 toolUseResult={"type": "create", "filePath": "/home/me/.ssh/id_ed25519", "content": OPENSSH + "\n",
                                "structuredPatch": [], "originalFile": None}))
    rd = add(assistant([{"type": "tool_use", "id": "toolu_r", "name": "Read",
                         "input": {"file_path": "/home/me/.ssh/id_rsa"}}], r["uuid"], session=SESSION))
    r = add(user([{"type": "tool_result", "tool_use_id": "toolu_r", "content": numbered(RSA)}], rd["uuid"], **kw,
                 toolUseResult={"type": "text", "file": {"filePath": "/home/me/.ssh/id_rsa", "content": RSA,
                                                         "numLines": 28, "startLine": 1, "totalLines": 28}}))
    env = add(assistant([{"type": "tool_use", "id": "toolu_e", "name": "Read", "input": {"file_path": "/app/.env"}}],
                        r["uuid"], session=SESSION))
    dotenv = f"DEBUG=1\nDB_PASSWORD={S['password']}\nREGION=eu-west-1"
    r = add(user([{"type": "tool_result", "tool_use_id": "toolu_e", "content": numbered(dotenv, arrow=False)}],
                 env["uuid"], **kw, toolUseResult={"type": "text", "file": {"filePath": "/app/.env",
                                                                            "content": dotenv}}))
    lst = add(assistant([{"type": "tool_use", "id": "toolu_l", "name": "mcp__vault__get", "input": {"name": "stripe"}}],
                        r["uuid"], session=SESSION))
    r = add(user([{"type": "tool_result", "tool_use_id": "toolu_l",
                   "content": [{"type": "text", "text": f"stripe: {S['stripe']}"}]}], lst["uuid"], **kw))
    ed = add(assistant([{"type": "tool_use", "id": "toolu_x", "name": "Edit",
                         "input": {"file_path": "/app/keys.py", "old_string": "X = 1", "new_string": "X = 2"}}],
                       r["uuid"], session=SESSION))
    original = f'X = 1\nKEY = """\n{EC}\n"""\nDSN = "postgres://admin:{S["basic"]}@db.internal:5432/app"\n'
    r = add(user([{"type": "tool_result", "tool_use_id": "toolu_x",
                   "content": "The file /app/keys.py has been updated."}], ed["uuid"], **kw,
                 toolUseResult={"filePath": "/app/keys.py", "oldString": "X = 1", "newString": "X = 2",
                                "originalFile": original, "structuredPatch": [],
                                # a key, not a value, holding one
                                "seen": {f"https://hooks.example/{S['twilio']}": True}}))
    at = add(attachment({"type": "file", "filename": "/home/me/.pypirc",
                         "content": {"type": "text", "file": {"filePath": "/home/me/.pypirc",
                                                              "content": f"[pypi]\npassword = {S['pypi']}\n"}}},
                        r["uuid"], session=SESSION))
    hook = add(attachment({"type": "hook_success", "hookName": "SessionStart", "hookEvent": "SessionStart",
                           "stdout": f"token={S['jwt']}", "stderr": "", "exitCode": 0}, at["uuid"], session=SESSION))
    persisted = f"<persisted-output>\nOutput too large (9.0KB). Full output saved to: {folder}/{SESSION}/tool-results/" \
                f"toolu_big.txt\n\nPreview (first 2KB):\nAccountKey={S['azure']}\n...\n</persisted-output>"
    big = add(assistant([{"type": "tool_use", "id": "toolu_big", "name": "Bash", "input": {"command": "az keys"}}],
                        hook["uuid"], session=SESSION))
    r = add(user([{"type": "tool_result", "tool_use_id": "toolu_big", "content": persisted}], big["uuid"], **kw))
    sysline = add({"type": "system", "subtype": "informational", "uuid": "5e55a0a0-0000-4000-8000-0000000000aa",
                   "parentUuid": r["uuid"], "sessionId": SESSION, "timestamp": "2026-01-01T00:00:00.000Z",
                   "content": f"wrote ~/.npmrc: //registry.npmjs.org/:_authToken={S['npm']}"})
    last = add(assistant("All done.", sysline["uuid"], session=SESSION))
    add({"type": "summary", "summary": f"Rotated the OpenAI key {S['openai']}", "leafUuid": last["uuid"]})
    add({"type": "custom-title", "customTitle": f"maps key {S['google']}", "sessionId": SESSION})
    lines = [orjson.dumps(o) for o in out]
    # A user message whose raw line spells the bot token in escapes, on a line of its own.
    tg = user(f"bot:\n{S['telegram']}\nend", last["uuid"], **kw)
    spelled = orjson.dumps(tg).replace(S["telegram"].encode(),
                                       S["telegram"][:9].encode() + b"\\u003a" + S["telegram"][10:].encode())
    assert S["telegram"].encode() not in spelled
    lines.append(spelled)
    # A field cut short (the CLI keeps a branch name's first 60 characters):
    # the start of the project folder's key, found whole elsewhere.
    cut = user("which branch?", tg["uuid"], **{**kw, "gitBranch": ("fix/" + S["anthropic"])[:60]})
    lines.append(orjson.dumps(cut))
    return lines


def plant(tmp_path: Path) -> Path:
    """The projects tree: the session, its subagent, its sidecar."""
    root = tmp_path / "projects"
    folder = root / PROJECT
    lines = _lines(folder)
    folder.mkdir(parents=True)
    (folder / SESSION_FILE).write_bytes(b"\n".join(lines) + b"\n")
    side = folder / SESSION / "tool-results" / "toolu_big.txt"
    side.parent.mkdir(parents=True)
    side.write_text(f"AccountKey={S['azure']}\n" + "x" * 9000)
    # Its branch cut short after the GitLab token's first 9 random characters
    # (the token is whole in the session's own lines).
    sub = user(f"subagent: the bot token is {S['discord']}", session=SESSION, isSidechain=True, agentId="a1",
               gitBranch=("deploy/" + S["gitlab"])[:22])
    write(folder / SESSION / "subagents" / "agent-a1.jsonl",
          [sub, assistant("checked", sub["uuid"], session=SESSION)])
    return root


def catalog(tmp_path: Path) -> Path:
    root = plant(tmp_path)
    path = tmp_path / "c.db"
    conn = db.connect(path)
    refresh(conn, [root])
    conn.close()
    return path


def exported_text(out: Path) -> str:
    """Every value of every column of every table, read back with DuckDB
    (the raw JSON decoded too: a secret spelled in escapes is still one),
    every file and folder name of the export, and its marker file."""
    parts = [unquote(str(p.relative_to(out))) for p in out.rglob("*")]
    parts.append((out / "_txdb_export.json").read_text())
    for table in sorted({p.relative_to(out).parts[0] for p in out.rglob("*.parquet")}):
        rel = duckdb.sql(f"SELECT * FROM read_parquet('{out}/{table}/**/*.parquet', hive_partitioning=true, "
                         "union_by_name=true)")
        for row in rel.fetchall():
            for v in row:
                if isinstance(v, str):
                    parts.append(v)
                    if v[:1] in "{[":
                        try:
                            parts.extend(_strings(orjson.loads(v)))
                        except orjson.JSONDecodeError:
                            pass
                elif v is not None:
                    parts.append(str(v))
    return "\n".join(parts)


def _strings(value) -> list[str]:
    out, stack = [], [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            out.append(v)
        elif isinstance(v, dict):
            out.extend(v)
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
    return out


def survivors(secret: str, text: str) -> list[str]:
    """Each run of 8 characters of the secret (within one of its lines)
    that ``text`` holds."""
    return [line[i:i + 8] for line in secret.split("\n") for i in range(len(line) - 7) if line[i:i + 8] in text]


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("planted")
    path = catalog(tmp)
    run("export", tmp / "plain", "--db", path, ok=True)
    run("export", tmp / "redacted", "--db", path, "--redact", ok=True)
    return exported_text(tmp / "plain"), exported_text(tmp / "redacted"), tmp


def test_every_planted_secret_is_in_the_plain_export(exports):
    """The corpus is what it says: each secret is whole in an export without --redact."""
    plain, _, _ = exports
    decoded = plain.replace(r"\u003a", ":")
    assert [n for n, s in S.items() if s not in plain and s not in decoded] == []


@pytest.mark.parametrize("name", list(S))
def test_nothing_of_a_planted_secret_survives_redaction(exports, name):
    _, redacted, _ = exports
    assert survivors(S[name], redacted) == []


def test_each_kind_is_masked_by_name_and_the_rest_kept(exports):
    _, redacted, tmp = exports
    # (The session file's name is masked whole with the project folder's
    # key before it: the key's token runs on over the `/`.)
    assert [k for n, k in KINDS.items() if f"[REDACTED:{k}]" not in redacted and n != "square"] == []
    for kept in ("/home/me/.ssh/id_rsa", "REGION=eu-west-1", "All done.", "Rotated the OpenAI key",
                 "checked", "does it work?", "X = 2"):
        assert kept in redacted
    # Every raw line is still JSON, masks and all.
    raws = duckdb.sql(f"SELECT raw FROM read_parquet('{tmp}/redacted/records/**/*.parquet', "
                      "hive_partitioning=true)").fetchall()
    assert len(raws) > 20
    for (raw,) in raws:
        orjson.loads(raw)
    # A hash's state holds the file's last bytes as they are: left out.
    states = f"SELECT count(sha_state) FROM read_parquet('{tmp}/%s/files/**/*.parquet', hive_partitioning=true)"
    assert duckdb.sql(states % "plain").fetchall() == [(2,)] and duckdb.sql(states % "redacted").fetchall() == [(0,)]
    # The project folder is one partition, under its redacted name.
    projects = {p.name for p in (tmp / "redacted" / "records").iterdir()}
    assert projects == {"project=-home-me-%5BREDACTED%3AAnthropic%20API%20Key%5D"}


def test_the_secrets_view_says_where_each_was_found(exports):
    _, _, tmp = exports
    found = orjson.loads(run("query", "SELECT type, found_in FROM secrets ORDER BY type, found_in",
                             "--db", tmp / "c.db", "--json", ok=True).output)
    where = {(r["type"], r["found_in"]) for r in found}
    for expected in [("Private Key", "tool_result Read"), ("Private Key", "tool_use Write"),
                     ("Private Key", "line user"), ("Anthropic API Key", "file project"),
                     ("Square OAuth Secret", "file path"), ("OpenAI Token", "line summary"),
                     ("Google API Key", "line custom-title"), ("GitLab Token", "line user"),
                     ("NPM tokens", "line system"), ("Discord Bot Token", "text")]:
        assert expected in where, (expected, sorted(where))


def test_a_read_key_is_one_finding_over_its_numbered_lines(exports):
    """The RSA key a Read returned: one finding from its BEGIN line to its
    END line, the line numbers between included (2048 bits: 26 body lines)."""
    _, _, tmp = exports
    conn = db.connect(tmp / "c.db")
    # the block's whole text: blocks.text keeps 400 characters of a long result
    rows = conn.execute("SELECT f.start, f.length, txdb_text(b.file_id, b.offset, b.idx) FROM secret_findings f "
                        "JOIN blocks b USING (file_id, offset, idx) WHERE f.type = 'Private Key' "
                        "AND b.kind = 'tool_result'").fetchall()
    assert len(rows) == 1
    start, length, text = rows[0]
    assert text[start:start + length] == numbered(RSA)[7:]
    assert text[start:start + length].count("\n") == 27


def test_text_refresh_added_since_the_scan_is_masked_by_the_redactor(tmp_path):
    """A redacted export reads one snapshot; text a refresh added after its
    scan (a watcher) is scanned in that snapshot, never exported unscanned."""
    path = catalog(tmp_path)
    conn = db.connect(path)
    secrets.scan_catalog(conn)
    session = tmp_path / "projects" / PROJECT / SESSION_FILE
    late = "ghp_" + rs(ALNUM, 36)
    append(session, user(f"and {late}", None, session=SESSION))
    assert refresh(conn, [tmp_path / "projects"]).grown == 1
    fid = conn.execute("SELECT id FROM files WHERE path = ?", (str(session),)).fetchone()[0]
    assert conn.execute("SELECT count(*) FROM secret_findings WHERE type = 'GitHub Token' AND file_id = ?",
                        (fid,)).fetchone()[0] == 1  # only the first one is stored
    mask = secrets.redactor(conn, fid)
    assert mask(f"x {late} {S['github']} y") == "x [REDACTED:GitHub Token] [REDACTED:GitHub Token] y"


def test_a_token_spelled_in_url_escapes_is_masked(tmp_path):
    """Round 4 attack: a GitHub token in a WebFetch URL with its `_` as `%5F`
    survived `export --redact` whole but for that character: a text holding
    URL escapes is scanned again with them decoded, and what is found is
    masked as written."""
    token = "ghp_" + rs(ALNUM, 36)
    root = tmp_path / "projects"
    u = user("fetch it", session=SESSION)
    a = assistant([{"type": "tool_use", "id": "toolu_u", "name": "WebFetch",
                    "input": {"url": "http://127.0.0.1/?k=" + token.replace("_", "%5F")}}], u["uuid"], session=SESSION)
    write(root / "-home-me-app" / f"{SESSION}.jsonl", [u, a])
    path = tmp_path / "c.db"
    conn = db.connect(path)
    refresh(conn, [root])
    conn.close()
    run("export", tmp_path / "out", "--db", path, "--redact", ok=True)
    assert survivors(token.replace("_", "%5F"), exported_text(tmp_path / "out")) == []


def test_a_secret_cut_by_a_persisted_preview_leaves_nothing_of_its_start(tmp_path):
    """Round 4 attack: `persist-tools` keeps a 2,000-character preview of a
    tool result; a token crossing that cut is whole only in the sidecar file
    (catalogued, never scanned), and its first 25 characters stayed in the
    session: 18 of its 8-character runs survived `export --redact`."""
    token = "ghp_" + rs(ALNUM, 36)
    root = tmp_path / "projects"
    f = root / "-home-me-app" / f"{SESSION}.jsonl"
    u = user("run it", session=SESSION)
    a = assistant([{"type": "tool_use", "id": "toolu_c", "name": "Bash", "input": {"command": "env"}}], u["uuid"],
                  session=SESSION)
    r = user([{"type": "tool_result", "tool_use_id": "toolu_c", "content": "x" * 1975 + token + "\n" + "y" * 20000}],
             a["uuid"], session=SESSION)
    write(f, [u, a, r, assistant("done", r["uuid"], session=SESSION)])
    path = tmp_path / "c.db"
    run("refresh", "--db", path, "--root", root, ok=True)
    run("persist-tools", f, "--db", path, "--apply", ok=True)
    assert token not in f.read_text() and token[:25] in f.read_text()  # the preview holds its start only
    run("refresh", "--db", path, "--root", root, ok=True)
    run("export", tmp_path / "out", "--db", path, "--redact", ok=True)
    assert survivors(token, exported_text(tmp_path / "out")) == []


def test_a_sidecar_written_after_the_scan_is_scanned_once_per_content(tmp_path):
    """A sidecar the CLI wrote after the session's last scan (the session
    file unchanged) is scanned by the next scan; two sidecars with the same
    content are scanned once, and the secret found masks its start in the
    session's own text."""
    token = "ghp_" + rs(ALNUM, 36)
    root = tmp_path / "projects"
    f = root / "-home-me-app" / f"{SESSION}.jsonl"
    u = user(f"the preview held {token[:20]}", session=SESSION)
    write(f, [u, assistant("ok", u["uuid"], session=SESSION)])
    conn = db.connect(tmp_path / "c.db")
    refresh(conn, [root])
    secrets.scan_catalog(conn)
    for name in ("a.txt", "b.txt"):
        side = root / "-home-me-app" / SESSION / "tool-results" / name
        side.parent.mkdir(parents=True, exist_ok=True)
        side.write_text("x" * 100 + "\n" + token + "\n")
    refresh(conn, [root])
    conn.execute("UPDATE secret_scans SET scanned_at = datetime('now', '-1 minute')")  # the scan was before
    report = secrets.scan_catalog(conn)
    assert report.findings == 2 and report.chars == 142  # one content read, its findings stored for each
    where = {r[0] for r in conn.execute("SELECT found_in FROM secrets")}
    assert where == {"sidecar tool-results/a.txt", "sidecar tool-results/b.txt"}
    fid = conn.execute("SELECT id FROM files WHERE path = ?", (str(f),)).fetchone()[0]
    mask = secrets.redactor(conn, fid)
    assert mask is not None and mask(f"held {token[:20]}") == "held [REDACTED:GitHub Token]"
    conn.execute("UPDATE secret_scans SET scanned_at = datetime('now', '+1 minute')")
    assert secrets.scan_catalog(conn).files == 0  # nothing new: not read again


def test_a_url_escaped_secret_is_found_over_its_extent_as_written():
    """A Stripe key with its `_`s as `%5F` / `%5f`, after `%3D` in a query
    string: one finding, from its start to its end as the text writes it;
    the same key unescaped gives the finding it always gave."""
    key = "sk_live_" + rs(ALNUM, 24)
    escaped = key.replace("_", "%5F", 1).replace("_", "%5f")
    text = f"GET https://api.example/charge?token%3D{escaped}&x=1 200"
    [found] = secrets.scan_texts([text])
    assert (found[0].type, text[found[0].start:found[0].start + found[0].length]) == ("Stripe Access Key", escaped)
    assert (found[0].line, found[0].col) == (1, text.index(escaped))
    plain = secrets.scan_texts([f"GET https://api.example/charge?token={key}&x=1 200"])[0]
    assert [(f.type, f.length) for f in plain] == [("Stripe Access Key", len(key))]


def test_the_redactor_masks_each_spelling_with_or_without_u_escapes_in_the_text():
    """A Redactor's expression for texts holding no `\\u` leaves the \\u
    spellings out: the same masks as the whole one, on a key with `/`,
    `+` and newlines, as written, JSON-escaped, and partly in \\u escapes."""
    key = EC
    mask = secrets.Redactor({key: "[REDACTED:Private Key]"})
    as_json = orjson.dumps(key).decode()[1:-1]
    slashed = as_json.replace("/", "\\/")
    u = as_json.replace("B", "\\u0042", 1).replace("E", "\\u0045", 1)
    for spelled in (key, as_json, slashed, u):
        assert mask(f"a {spelled} b") == "a [REDACTED:Private Key] b", spelled[:40]
    assert mask("a \\u0041 b") == "a \\u0041 b"
