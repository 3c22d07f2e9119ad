-- Chain-health errors and warnings (notes left out: the real CLI writes
-- out-of-order timestamps and extra roots itself), with their session.
CREATE VIEW chain_problems AS
SELECT
    h.file_id AS conversation,
    h.file_id,
    s.project,
    s.title,
    h.line,
    h.uuid,
    h.problem,
    h.severity,
    h.detail
FROM chain_health h
LEFT JOIN sessions s ON s.file_id = h.file_id
WHERE h.severity IN ('error', 'warning');
