-- restore, whole: the mode a file had when refresh read it (restore gives
-- it back with that mode and its catalogued mtime_ns; NULL on older rows:
-- 0600), the copies `restore --to` wrote (never the session's own path:
-- `restore ID` always means the original), and what `txdb prune` deleted
-- (so restore can say the archive was pruned, not "run refresh").
ALTER TABLE files ADD COLUMN mode INTEGER;
ALTER TABLE sidecars ADD COLUMN mode INTEGER;

CREATE TABLE restored_copies (
    path TEXT PRIMARY KEY,            -- the copy's session file
    session_id TEXT,
    source TEXT NOT NULL,             -- the catalogued path it was rebuilt from
    restored_at TEXT NOT NULL
);

CREATE TABLE pruned_sessions (
    path TEXT PRIMARY KEY,            -- the session (or subagent) file whose rows went
    session_id TEXT,
    kind TEXT,
    lines INTEGER,
    bytes INTEGER,
    pruned_at TEXT NOT NULL
);
CREATE INDEX pruned_sessions_session ON pruned_sessions(session_id);
