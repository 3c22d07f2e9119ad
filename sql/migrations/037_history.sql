-- ~/.claude/history.jsonl: one line per prompt a user typed (display,
-- pastedContents, timestamp in ms, project = the cwd, and in newer
-- releases sessionId). It outlives the transcripts Claude Code sweeps, so
-- it is often the only trace of a session older than txdb (txdb/history.py).
--
-- A prompt is keyed by the sha256 of its line, not by where it is: Claude
-- Code rewrites the file when it prunes old entries, and a prompt once
-- catalogued stays, like the rows of a vanished session file.
CREATE TABLE history (
    id INTEGER PRIMARY KEY,             -- rowid of the full-text index
    line_sha256 TEXT NOT NULL UNIQUE,   -- sha256 of the line (without its newline)
    source TEXT NOT NULL,               -- the history.jsonl it was read from
    timestamp_ms INTEGER,               -- when it was typed (ms since the epoch)
    timestamp TEXT,                     -- the same, ISO 8601 UTC like the records'
    session_id TEXT,                    -- sessionId (absent in older releases)
    cwd TEXT,                           -- its "project": the cwd it was typed in
    project TEXT,                       -- that cwd's project folder name, as files.project
    display TEXT,                       -- the prompt as typed
    pasted INTEGER NOT NULL DEFAULT 0,  -- entries of pastedContents
    pasted_text TEXT,                   -- the text of its text pastes, joined by blank lines
    raw TEXT NOT NULL                   -- the line as JSON
);
CREATE INDEX history_session ON history(session_id, timestamp_ms);

-- The refresh cursor of each history file: a file that only grew is read
-- from its cursor; a shorter one, another inode or other head bytes is read
-- again from the start (its known lines are skipped by their sha256).
CREATE TABLE history_files (
    path TEXT PRIMARY KEY,
    size INTEGER NOT NULL DEFAULT 0,
    inode INTEGER,
    mtime_ns INTEGER,
    head_sha TEXT,                      -- sha256 of the first and the last 4 KiB before the cursor
    cursor INTEGER NOT NULL DEFAULT 0,  -- byte offset after the last complete line read
    lines INTEGER NOT NULL DEFAULT 0,   -- lines read from the current file
    refreshed_at TEXT
);

-- Full-text index of the prompts and their pasted text, kept by the refresh.
CREATE VIRTUAL TABLE history_fts USING fts5(display, pasted_text, content="history", content_rowid="id");
