-- usage.invalid names the counts of an API usage object that are not a
-- JSON integer from 0 to records.MAX_COUNT (a negative, 2^63, 10^30, a
-- float, a string, a boolean), as written; those counts are stored as NULL
-- and such a row is never priced (billed_cost, txdb cost says how many it
-- left out). Rows stored before this migration kept a negative as it was
-- and turned the rest into NULL: a negative is named here, and the files
-- whose rows may hold another are read again (their rows take the file's
-- figures once more: rewritten = 2, as in 013).
ALTER TABLE usage ADD COLUMN invalid TEXT;
UPDATE usage SET invalid = trim(
        CASE WHEN input_tokens < 0 THEN 'input_tokens=' || input_tokens || ' (negative); ' ELSE '' END
     || CASE WHEN output_tokens < 0 THEN 'output_tokens=' || output_tokens || ' (negative); ' ELSE '' END
     || CASE WHEN cache_read_input_tokens < 0
             THEN 'cache_read_input_tokens=' || cache_read_input_tokens || ' (negative); ' ELSE '' END
     || CASE WHEN cache_creation_input_tokens < 0
             THEN 'cache_creation_input_tokens=' || cache_creation_input_tokens || ' (negative); ' ELSE '' END
     || CASE WHEN ephemeral_5m_input_tokens < 0 OR ephemeral_1h_input_tokens < 0
             THEN 'cache_creation (negative); ' ELSE '' END, '; '),
    input_tokens = CASE WHEN input_tokens < 0 THEN NULL ELSE input_tokens END,
    output_tokens = CASE WHEN output_tokens < 0 THEN NULL ELSE output_tokens END,
    cache_read_input_tokens = CASE WHEN cache_read_input_tokens < 0 THEN NULL ELSE cache_read_input_tokens END,
    cache_creation_input_tokens = CASE WHEN cache_creation_input_tokens < 0 THEN NULL
                                       ELSE cache_creation_input_tokens END,
    ephemeral_5m_input_tokens = CASE WHEN ephemeral_5m_input_tokens < 0 THEN NULL ELSE ephemeral_5m_input_tokens END,
    ephemeral_1h_input_tokens = CASE WHEN ephemeral_1h_input_tokens < 0 THEN NULL ELSE ephemeral_1h_input_tokens END
WHERE input_tokens < 0 OR output_tokens < 0 OR cache_read_input_tokens < 0 OR cache_creation_input_tokens < 0
   OR ephemeral_5m_input_tokens < 0 OR ephemeral_1h_input_tokens < 0;
UPDATE usage SET rewritten = 2
WHERE rewritten = 0 AND (input_tokens IS NULL OR output_tokens IS NULL OR EXISTS (
    SELECT 1 FROM json_each(usage.iterations) e, json_each(e.value) j
    WHERE e.type = 'object' AND j.key LIKE '%\_tokens' ESCAPE '\'
      AND j.type <> 'null' AND (j.type <> 'integer' OR j.value < 0 OR j.value > 999999999999999)));
UPDATE files SET inode = NULL WHERE gone = 0 AND id IN (SELECT file_id FROM usage WHERE rewritten = 2);

-- prices.provider: the library's provider whose price a model takes
-- (Anthropic's first, else the one the library finds by the model's name:
-- a MiniMax or Kimi model behind Claude Code). prices.resembles: a model
-- the library would price as another one (a name that only starts like
-- it: claude-opus-4-5-evil), left unpriced and named. Emptied so the next
-- open prices every model again by these rules.
ALTER TABLE prices ADD COLUMN provider TEXT;
ALTER TABLE prices ADD COLUMN resembles TEXT;
DELETE FROM prices;
