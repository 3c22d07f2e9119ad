-- Records whose parentUuid names no record of their file, kept at refresh
-- time so chain health never probes every record (the view over a million
-- records took seconds). Backfilled once from the records already there.
CREATE TABLE dangling_parents (
    file_id INTEGER NOT NULL,
    offset INTEGER NOT NULL,
    parent_uuid TEXT NOT NULL,
    PRIMARY KEY (file_id, offset),
    FOREIGN KEY (file_id, offset) REFERENCES records(file_id, offset)
);

INSERT INTO dangling_parents (file_id, offset, parent_uuid)
SELECT r.file_id, r.offset, r.parent_uuid FROM records r
WHERE r.parent_uuid IS NOT NULL AND r.uuid IS NOT NULL
  AND NOT EXISTS (SELECT 1 FROM records p WHERE p.file_id = r.file_id AND p.uuid = r.parent_uuid);

-- tool_use / tool_result pairing looks blocks up by file and id.
CREATE INDEX blocks_file_tool_use_id ON blocks(file_id, tool_use_id);
DROP INDEX blocks_tool_use_id;
