-- Per-session sums kept by refresh, so session-level views read one row per
-- session instead of summing every record (seconds on a large catalog).
ALTER TABLE sessions ADD COLUMN chain_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN chain_bytes INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN record_bytes INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN journal_bytes INTEGER NOT NULL DEFAULT 0;

UPDATE sessions SET
    chain_tokens = (SELECT coalesce(sum(r.tokens), 0) FROM chain c
                    JOIN records r ON r.file_id = c.file_id AND r.offset = c.offset
                    WHERE c.file_id = sessions.file_id),
    chain_bytes = (SELECT coalesce(sum(r.length), 0) FROM chain c
                   JOIN records r ON r.file_id = c.file_id AND r.offset = c.offset
                   WHERE c.file_id = sessions.file_id),
    record_bytes = (SELECT coalesce(sum(r.length), 0) FROM records r WHERE r.file_id = sessions.file_id),
    journal_bytes = (SELECT coalesce(sum(r.length), 0) FROM records r WHERE r.file_id = sessions.file_id
                     AND r.type IN ('api-request', 'api-request-blob', 'api-request-shape'));
