-- The catalog as an archive (txdb restore): the proof of each file's bytes,
-- when it vanished, and the files beside a session that markers name.
-- files.sha256: of the file's first `size` bytes at its last refresh (the
-- whole file then); restore checks what it rebuilds against it. NULL on
-- older rows until a refresh hashes them (the file must still be there).
ALTER TABLE files ADD COLUMN sha256 TEXT;
-- The running SHA-256 state after those bytes (txdb.ingest.sha): a grown
-- file is hashed from its old size on, not read again (NULL: from its start).
ALTER TABLE files ADD COLUMN sha_state BLOB;
-- When refresh first found the file gone (files.gone = 1).
ALTER TABLE files ADD COLUMN gone_at TEXT;

-- Contents, each stored once, keyed by the sha256 of its bytes; `data` is
-- zlib-compressed (stored only to be given back), `size` the bytes' own.
CREATE TABLE blobs (
    sha256 TEXT PRIMARY KEY,
    size INTEGER NOT NULL,
    data BLOB NOT NULL
);

-- Files in a session's folder (<project>/<sessionId>/): tool-results/*,
-- persisted/** and subagents/*.meta.json. Refreshed like the sessions
-- (same size and mtime: skipped); a vanished one keeps its row, marked gone.
CREATE TABLE sidecars (
    id INTEGER PRIMARY KEY,
    path TEXT NOT NULL UNIQUE,        -- absolute path
    root TEXT,                        -- the projects root it was found under
    project TEXT,                     -- project folder name
    session_id TEXT NOT NULL,         -- the session folder's name
    rel TEXT NOT NULL,                -- path inside the session folder
    sha256 TEXT NOT NULL REFERENCES blobs(sha256),
    size INTEGER NOT NULL,
    mtime_ns INTEGER,
    gone INTEGER NOT NULL DEFAULT 0,
    gone_at TEXT,
    refreshed_at TEXT
);
CREATE INDEX sidecars_session ON sidecars(session_id);
CREATE INDEX sidecars_sha256 ON sidecars(sha256);
