-- What persisting saved, per session file: the markers (all, and those on
-- the active chain) and, over the active chain's markers, the originals'
-- size (each marker's N) against the markers' own size. Markers whose
-- original size is not stated (a range marker) count in markers only.
CREATE VIEW persisted_by_session AS
SELECT
    p.file_id,
    p.session_id,
    s.title,
    s.project,
    count(*) AS markers,
    sum(p.on_chain) AS chain_markers,
    sum(CASE WHEN p.on_chain = 1 AND p.original_chars IS NOT NULL THEN p.original_chars ELSE 0 END)
        AS chain_original_chars,
    sum(CASE WHEN p.on_chain = 1 AND p.original_chars IS NOT NULL THEN p.marker_chars ELSE 0 END)
        AS chain_marker_chars,
    sum(CASE WHEN p.on_chain = 1 AND p.original_chars IS NOT NULL THEN p.saved_chars ELSE 0 END)
        AS chain_saved_chars
FROM persisted p
LEFT JOIN sessions s ON s.file_id = p.file_id
GROUP BY p.file_id;
