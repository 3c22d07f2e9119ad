-- The catalog: every line of every session file, keyed by where it lives.

CREATE TABLE files (
    id INTEGER PRIMARY KEY,
    path TEXT NOT NULL UNIQUE,        -- absolute path of the .jsonl file
    root TEXT,                        -- the projects root it was found under
    project TEXT,                     -- project folder name (munged cwd)
    kind TEXT NOT NULL,               -- 'session' or 'subagent'
    session_id TEXT,                  -- sessionId of the file (subagents: agent-<id>)
    size INTEGER NOT NULL DEFAULT 0,  -- size at the last refresh
    mtime_ns INTEGER,
    inode INTEGER,
    head_sha TEXT,                    -- sha256 of the first bytes, to tell growth from rewrite
    tail_sha TEXT,                    -- sha256 of the bytes just before the cursor
    cursor INTEGER NOT NULL DEFAULT 0,-- byte offset after the last ingested line
    lines INTEGER NOT NULL DEFAULT 0, -- lines ingested (the next line number is lines + 1)
    gone INTEGER NOT NULL DEFAULT 0,  -- 1 when the file vanished from disk
    refreshed_at TEXT
);

CREATE TABLE records (
    file_id INTEGER NOT NULL REFERENCES files(id),
    offset INTEGER NOT NULL,          -- byte offset of the object in the file
    length INTEGER NOT NULL,          -- its length in bytes
    line INTEGER NOT NULL,            -- 1-based line number
    session_id TEXT,
    type TEXT,
    subtype TEXT,                     -- system subtype or attachment type
    uuid TEXT,
    parent_uuid TEXT,
    logical_parent_uuid TEXT,
    leaf_uuid TEXT,                   -- summary / last-prompt pointer
    timestamp TEXT,
    is_sidechain INTEGER,
    is_meta INTEGER,
    role TEXT,
    model TEXT,
    message_id TEXT,
    request_id TEXT,
    tokens INTEGER NOT NULL DEFAULT 0, -- estimated context tokens of this line
    raw TEXT NOT NULL,                -- the JSON of the line, as written
    PRIMARY KEY (file_id, offset)
);
CREATE INDEX records_file_line ON records(file_id, line);
CREATE INDEX records_file_uuid ON records(file_id, uuid);
CREATE INDEX records_type ON records(type, subtype);
CREATE INDEX records_session ON records(session_id);

CREATE TABLE blocks (
    file_id INTEGER NOT NULL,
    offset INTEGER NOT NULL,          -- the record's offset
    idx INTEGER NOT NULL,             -- position in message.content (0 for a string body)
    session_id TEXT,
    role TEXT,
    type TEXT,                        -- the block's own type
    kind TEXT,                        -- text, thinking, tool_use, tool_result, image, command, command_output, caveat, other
    tool_name TEXT,
    tool_use_id TEXT,
    is_error INTEGER,
    chars INTEGER NOT NULL DEFAULT 0, -- characters of text, thinking, input JSON or result text
    signature_chars INTEGER NOT NULL DEFAULT 0,
    media_type TEXT,
    width INTEGER,
    height INTEGER,
    image_sha256 TEXT,
    images INTEGER NOT NULL DEFAULT 0,-- images nested in a tool_result
    tokens INTEGER NOT NULL DEFAULT 0,
    text TEXT,                        -- searchable text of the block
    PRIMARY KEY (file_id, offset, idx),
    FOREIGN KEY (file_id, offset) REFERENCES records(file_id, offset)
);
CREATE INDEX blocks_tool_use_id ON blocks(tool_use_id);
CREATE INDEX blocks_kind ON blocks(kind, tool_name);

CREATE TABLE attachments (
    file_id INTEGER NOT NULL,
    offset INTEGER NOT NULL,
    session_id TEXT,
    type TEXT,                        -- attachment.type
    timestamp TEXT,
    policy TEXT,                      -- keep-all, system-prompt, superseded, unknown
    tokens INTEGER NOT NULL DEFAULT 0,-- rendered cost
    from_rendered INTEGER NOT NULL DEFAULT 0, -- cost read from `rendered`
    free INTEGER NOT NULL DEFAULT 0,  -- renders to nothing
    hook_event TEXT,
    PRIMARY KEY (file_id, offset),
    FOREIGN KEY (file_id, offset) REFERENCES records(file_id, offset)
);
CREATE INDEX attachments_type ON attachments(type);

CREATE TABLE usage (
    file_id INTEGER NOT NULL,
    message_id TEXT NOT NULL,         -- one row per API message
    offset INTEGER NOT NULL,          -- the first line that carries it
    request_id TEXT,
    session_id TEXT,
    timestamp TEXT,
    model TEXT,
    input_tokens INTEGER,
    output_tokens INTEGER,
    cache_read_input_tokens INTEGER,
    cache_creation_input_tokens INTEGER,
    ephemeral_5m_input_tokens INTEGER,
    ephemeral_1h_input_tokens INTEGER,
    service_tier TEXT,
    iterations TEXT,                  -- usage.iterations[] as JSON, when present
    PRIMARY KEY (file_id, message_id),
    FOREIGN KEY (file_id, offset) REFERENCES records(file_id, offset)
);
CREATE INDEX usage_session ON usage(session_id);

CREATE TABLE sessions (
    file_id INTEGER PRIMARY KEY REFERENCES files(id),
    session_id TEXT,
    parent_session_id TEXT,           -- for subagent transcripts
    agent_id TEXT,
    project TEXT,
    title TEXT,
    title_source TEXT,                -- custom-title, agent-name, summary, ai-title
    cwd TEXT,
    git_branch TEXT,
    version TEXT,
    model TEXT,
    first_timestamp TEXT,
    last_timestamp TEXT,
    lines INTEGER NOT NULL DEFAULT 0,
    messages INTEGER NOT NULL DEFAULT 0, -- user + assistant lines
    leaf_uuid TEXT,                   -- leaf of the active chain
    chain_length INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX sessions_session_id ON sessions(session_id);

-- The active chain of each file, root (pos 0) to leaf, recomputed by
-- refresh from the same code the surgery commands use.
CREATE TABLE chain (
    file_id INTEGER NOT NULL,
    pos INTEGER NOT NULL,
    offset INTEGER NOT NULL,
    PRIMARY KEY (file_id, pos),
    FOREIGN KEY (file_id, offset) REFERENCES records(file_id, offset)
);
CREATE INDEX chain_record ON chain(file_id, offset);

CREATE TABLE parse_errors (
    file_id INTEGER NOT NULL REFERENCES files(id),
    line INTEGER NOT NULL,
    offset INTEGER NOT NULL,
    length INTEGER NOT NULL,
    message TEXT NOT NULL,
    recovered INTEGER NOT NULL DEFAULT 0, -- 1 when its objects are in records anyway
    PRIMARY KEY (file_id, line)
);
