-- The estimate's rules changed where the catalog already holds what they
-- read (thinking not counted on a model whose API does not count it:
-- estimate.counts_thinking), so every session's stored estimate is computed
-- again from the catalog, no file read, by the open that runs this
-- migration (db.connect, `rederive_estimates` below; docs/architecture.md,
-- "Re-deriving stored figures"). A later rule change of that kind repeats
-- these two statements in its own migration.
CREATE TABLE IF NOT EXISTS _txdb_meta (key TEXT PRIMARY KEY, value TEXT);
INSERT OR REPLACE INTO _txdb_meta (key, value) VALUES ('rederive_estimates', '026');
