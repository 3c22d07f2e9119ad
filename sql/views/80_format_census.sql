-- What each Claude Code release writes, and what of it txdb does not model:
-- per CLI version (the lines' `version`; a line without one counts under its
-- session's), each line type, attachment type, content block type and
-- top-level (envelope) key seen, in how many lines (blocks) and files.
-- modelled = 0: not in known_formats (txdb stores it but reads nothing of it:
-- an unknown line or attachment type, a block of kind 'other', a key no code
-- reads). Read from the small table file_formats kept by refresh.
CREATE VIEW format_census AS
SELECT
    f.version,
    f.kind,
    f.name,
    CASE WHEN EXISTS (SELECT 1 FROM known_formats k WHERE k.kind = f.kind AND f.name GLOB k.name)
         THEN 1 ELSE 0 END AS modelled,
    sum(f.n) AS count,
    count(*) AS files
FROM file_formats f
GROUP BY f.version, f.kind, f.name
ORDER BY f.version, f.kind, f.name;
