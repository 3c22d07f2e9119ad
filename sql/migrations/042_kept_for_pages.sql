-- Which row of an API message repeated in several files counts (1) and
-- which do not (0), kept by refresh (txdb/catalog/ingest/billed.py): the
-- billed_usage view ranked every usage row of the catalog for each page
-- that reads it (most of a second at 10 copies of the corpus). The
-- migration's Python step ranks the rows already catalogued and adds the
-- triggers that keep the flag when a counted row is deleted or a file
-- moves.
ALTER TABLE usage ADD COLUMN billed INTEGER NOT NULL DEFAULT 1;
-- Whether a file recorded a turn only a 1M window holds (context_gauge's
-- window rule; txdb/catalog/ingest/window.py), kept by refresh: the view
-- looked through every usage row of every session for each gauge it
-- showed. NULL until a refresh fills it (the view then looks itself).
ALTER TABLE sessions ADD COLUMN long_context INTEGER;
-- chain_health pairs each tool call with its results on the chain: this
-- index holds the two kinds in (file, id) order, so the pairing is one
-- pass without a sort (the sort was most of chain_problems' time).
CREATE INDEX blocks_tool_pairs ON blocks(file_id, tool_use_id, kind, offset, tool_name)
    WHERE kind IN ('tool_use', 'tool_result');
