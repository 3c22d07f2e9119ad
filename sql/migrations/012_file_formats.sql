-- The format census (view format_census): per file and CLI version, how
-- many lines of each line type, attachment type, block type and envelope
-- key it holds. Small (one row per name seen), kept by refresh; what txdb
-- models is never stored (known_formats says it). Filled here for the rows
-- an older txdb catalogued; a line without a version counts under its
-- session's.
CREATE TABLE file_formats (
    file_id INTEGER NOT NULL,
    version TEXT NOT NULL,            -- the lines' `version` ('' when none is known)
    kind TEXT NOT NULL,               -- line, attachment, block or key
    name TEXT NOT NULL,               -- the type, or the top-level key
    n INTEGER NOT NULL,               -- lines (blocks for a block type)
    PRIMARY KEY (file_id, version, kind, name)
) WITHOUT ROWID;

CREATE TEMP TABLE _record_version AS
SELECT r.file_id, r.offset,
       coalesce(CASE WHEN json_valid(r.raw) AND json_type(r.raw, '$.version') = 'text'
                     THEN nullif(json_extract(r.raw, '$.version'), '') END, s.version, '') AS version
FROM records r LEFT JOIN sessions s ON s.file_id = r.file_id;

INSERT INTO file_formats (file_id, version, kind, name, n)
SELECT v.file_id, v.version, 'line', coalesce(r.type, ''), count(*)
FROM _record_version v JOIN records r ON r.file_id = v.file_id AND r.offset = v.offset
GROUP BY 1, 2, 4;

INSERT INTO file_formats (file_id, version, kind, name, n)
SELECT v.file_id, v.version, 'key', j.key, count(*)
FROM _record_version v JOIN records r ON r.file_id = v.file_id AND r.offset = v.offset, json_each(r.raw) j
WHERE json_valid(r.raw)
GROUP BY 1, 2, 4;

INSERT INTO file_formats (file_id, version, kind, name, n)
SELECT v.file_id, v.version, 'attachment', coalesce(a.type, ''), count(*)
FROM attachments a JOIN _record_version v ON v.file_id = a.file_id AND v.offset = a.offset
GROUP BY 1, 2, 4;

INSERT INTO file_formats (file_id, version, kind, name, n)
SELECT v.file_id, v.version, 'block', CASE WHEN typeof(b.type) = 'text' THEN b.type ELSE '' END, count(*)
FROM blocks b JOIN _record_version v ON v.file_id = b.file_id AND v.offset = b.offset
GROUP BY 1, 2, 4;

DROP TABLE _record_version;
