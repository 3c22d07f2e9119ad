-- The surgery log: one row per surgery command that changed (or forked) a
-- session file. Written by the surgery commands; read by the surgery_log view.

CREATE TABLE surgeries (
    id INTEGER PRIMARY KEY,
    at TEXT,                          -- when it was applied (ISO 8601, UTC)
    command TEXT,                     -- strip-tools, strip-attachments, persist, fork, ...
    arguments TEXT,                   -- the command's arguments, as JSON
    session_id TEXT,
    file_id INTEGER,                  -- files.id of the session file it changed
    path TEXT,                        -- the session file it changed (or wrote, for a fork)
    backup_path TEXT,                 -- the .bak it left behind
    records_changed INTEGER,
    tokens_before INTEGER,            -- estimated context tokens before
    tokens_after INTEGER              -- and after
);
