-- One row per persisted marker: a block whose text starts with
-- `<persisted-{kind}>` (txdb's persist commands: kind thinking, text,
-- message, range, image) or Claude Code's own `<persisted-output>` tool
-- result ("Output too large (55.3KB). Full output saved to: PATH"), which is
-- kind 'tool'. Parsed from the marker's header (before "Preview"), so a
-- preview that quotes "Summary:" is never read as the summary.
-- original_chars: the marker's "(N chars)"; for a tool result the record's
-- toolUseResult.persistedOutputSize when Claude Code wrote one (exact), else
-- the marker's rounded size ("55.3KB" -> 56627; original_exact = 0).
-- Which blocks are markers (a text or tool_result block starting so:
-- ingest/rows.py is_marker) and the recorded size come from the markers
-- table refresh fills: scanning every block's text and reading raw JSON
-- here cost 0.6 s on a catalog of 200k lines.
-- A record's persistedThinking list (the thinking the API dropped after an
-- edit, saved: surgery/thinking.py) gives one row per marker, block -1 - n.
-- A range marker names a folder ("(N files)"): its original_chars is NULL.
CREATE VIEW persisted AS
WITH m AS (
    -- a block's marker (its text the block's), or a record's own (persistedThinking, idx < 0: markers.text)
    SELECT k.file_id, k.offset, k.idx, coalesce(b.session_id, r.session_id) AS session_id,
           coalesce(b.kind, 'record') AS block_kind, b.tool_use_id,
           coalesce(b.chars, length(k.text)) AS marker_chars,
           ltrim(coalesce(b.text, k.text), ' ' || char(9, 10, 13)) AS t, k.recorded_size
    FROM markers k  -- markers first
    LEFT JOIN blocks b ON b.file_id = k.file_id AND b.offset = k.offset AND b.idx = k.idx
    LEFT JOIN records r ON k.text IS NOT NULL AND r.file_id = k.file_id AND r.offset = k.offset
    WHERE b.idx IS NOT NULL OR k.text IS NOT NULL
), h AS (
    SELECT m.*,
           CASE WHEN instr(t, char(10) || char(10) || 'Preview') > 0
                THEN substr(t, 1, instr(t, char(10) || char(10) || 'Preview')) ELSE t END || char(10) AS head
    FROM m
), tag AS (
    SELECT h.*,
           substr(t, 12, CASE WHEN instr(t, ' ') BETWEEN 1 AND instr(t, '>') THEN instr(t, ' ')
                              ELSE instr(t, '>') END - 12) AS tag_name
    FROM h
), lines AS (
    SELECT tag.*,
           CASE WHEN tag_name = 'output' THEN
                    CASE WHEN instr(head, 'Full output saved to: ') > 0
                         THEN substr(head, instr(head, 'Full output saved to: ') + 22)
                         WHEN instr(head, ' were saved to: ') > 0
                         THEN substr(head, instr(head, ' were saved to: ') + 16) END
                WHEN instr(head, char(10) || 'Saved to: ') > 0
                THEN substr(head, instr(head, char(10) || 'Saved to: ') + 11) END AS saved_rest,
           CASE WHEN instr(head, char(10) || 'Summary: ') > 0
                THEN substr(head, instr(head, char(10) || 'Summary: ') + 10) END AS summary_rest,
           CASE WHEN instr(head, 'Output too large (') > 0
                THEN substr(head, instr(head, 'Output too large (') + 18) END AS size_rest
    FROM tag
), fields AS MATERIALIZED (
    -- (materialized: each column below is read several times, and each read
    -- re-ran every instr of the ones above it over the whole text: 10 ms a marker)
    SELECT lines.*,
           substr(saved_rest, 1, instr(saved_rest, char(10)) - 1) AS saved_line,
           substr(summary_rest, 1, instr(summary_rest, char(10)) - 1) AS summary,
           substr(size_rest, 1, instr(size_rest, ')') - 1) AS size_text
    FROM lines
), counted AS (
    -- "PATH (1,234 chars)": cut the suffix, then the digits and commas of N.
    SELECT fields.*,
           CASE WHEN saved_line LIKE '% chars)' THEN substr(saved_line, 1, length(saved_line) - 7)
                WHEN saved_line LIKE '% files)' THEN substr(saved_line, 1, length(saved_line) - 7) END AS with_n
    FROM fields
), parsed AS MATERIALIZED (
    SELECT counted.*,
           CASE WHEN with_n IS NOT NULL AND rtrim(with_n, '0123456789,') LIKE '% ('
                THEN substr(rtrim(with_n, '0123456789,'), 1, length(rtrim(with_n, '0123456789,')) - 2)
                ELSE saved_line END AS sidecar_path,
           CASE WHEN saved_line LIKE '% chars)' AND rtrim(with_n, '0123456789,') LIKE '% ('
                 AND length(replace(substr(with_n, length(rtrim(with_n, '0123456789,')) + 1), ',', ''))
                     BETWEEN 1 AND 15
                THEN CAST(replace(substr(with_n, length(rtrim(with_n, '0123456789,')) + 1), ',', '') AS INTEGER)
           END AS stated_chars,
           CASE WHEN NOT CAST(size_text AS REAL) BETWEEN 0 AND 1e6 THEN NULL  -- a hostile size
                WHEN size_text LIKE '% bytes' THEN CAST(size_text AS INTEGER)
                WHEN size_text LIKE '%KB' THEN CAST(round(CAST(size_text AS REAL) * 1024) AS INTEGER)
                WHEN size_text LIKE '%MB' THEN CAST(round(CAST(size_text AS REAL) * 1048576) AS INTEGER)
                WHEN size_text LIKE '%GB' THEN CAST(round(CAST(size_text AS REAL) * 1073741824) AS INTEGER)
           END AS stated_size
    FROM counted
), sized AS (
    SELECT parsed.*, r.line, r.uuid
    FROM parsed JOIN records r ON r.file_id = parsed.file_id AND r.offset = parsed.offset
), checked AS (
    -- markers.recorded_size: the record's toolUseResult.persistedOutputSize,
    -- a plausible integer only (below 10^15: sums never overflow), read at refresh.
    SELECT sized.*, CASE WHEN tag_name = 'output' THEN recorded_size END AS cc_size
    FROM sized
)
SELECT
    CASE tag_name WHEN 'output' THEN 'tool' ELSE tag_name END AS kind,
    s.session_id,
    s.file_id,
    c.pos,
    CASE WHEN c.pos IS NOT NULL THEN 1 ELSE 0 END AS on_chain,
    s.line,
    s.uuid,
    s.idx AS block,
    s.block_kind,
    s.tool_use_id,
    (SELECT u.tool_name FROM blocks u WHERE u.file_id = s.file_id AND u.tool_use_id = s.tool_use_id
       AND u.kind = 'tool_use' LIMIT 1) AS tool_name,
    s.sidecar_path,
    coalesce(s.cc_size, s.stated_chars, s.stated_size) AS original_chars,
    CASE WHEN s.cc_size IS NOT NULL OR s.stated_chars IS NOT NULL THEN 1 ELSE 0 END AS original_exact,
    s.marker_chars,
    coalesce(s.cc_size, s.stated_chars, s.stated_size) - s.marker_chars AS saved_chars,
    s.summary
FROM checked s
LEFT JOIN chain c ON c.file_id = s.file_id AND c.offset = s.offset;
