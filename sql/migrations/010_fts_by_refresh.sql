-- The full-text index is kept by the refresh itself (txdb/ingest/store.py),
-- in each file's transaction: it indexes a file's new blocks once they are
-- written and unindexes blocks before deleting them. The triggers of
-- 003_fts and their queue go.
--
-- Nothing ever indexes a row that SQL outside the refresh writes into
-- blocks: the catalog is a mirror, and its rows come from the refresh.
-- After a VACUUM (which may renumber blocks' implicit rowids), rebuild:
--   INSERT INTO blocks_fts(blocks_fts) VALUES ('rebuild');

-- Anything still queued is indexed first. (The queue is created if absent,
-- so that this migration is harmless on a catalog that no longer has it.)
CREATE TABLE IF NOT EXISTS _blocks_fts_pending (block_rowid INTEGER PRIMARY KEY);
INSERT INTO blocks_fts (rowid, text)
SELECT b.rowid, b.text FROM _blocks_fts_pending p CROSS JOIN blocks b ON b.rowid = p.block_rowid
WHERE b.text IS NOT NULL AND b.text <> '';

DROP TRIGGER IF EXISTS blocks_fts_ai;
DROP TRIGGER IF EXISTS blocks_fts_bi;
DROP TRIGGER IF EXISTS blocks_fts_ad;
DROP TRIGGER IF EXISTS blocks_fts_au;
DROP TRIGGER IF EXISTS blocks_fts_flush;
DROP TABLE _blocks_fts_pending;

-- A first build interrupted by an older txdb had dropped those triggers
-- (its index was to be filled at the end, saved under this key): its
-- blocks so far are indexed now, since the refresh resuming it indexes
-- only the files it reads.
CREATE TABLE IF NOT EXISTS _txdb_meta (key TEXT PRIMARY KEY, value TEXT);
INSERT INTO blocks_fts (blocks_fts) SELECT 'rebuild'
WHERE EXISTS (SELECT 1 FROM _txdb_meta WHERE key = 'bulk_deferred_triggers');
DELETE FROM _txdb_meta WHERE key = 'bulk_deferred_triggers';
