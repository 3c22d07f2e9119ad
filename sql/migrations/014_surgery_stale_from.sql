-- The first assistant turn (its uuid) whose recorded usage a logged pass
-- made stale: the strip shrank the history before it, the figures it keeps
-- (the API's: only the last turn's are lowered) measured the history before
-- the strip. The catalog's calibration (estimate.catalog_pairs) leaves out
-- the turns from it on that were recorded before the pass was applied.
-- NULL on older rows: their usage reset lowered every stale turn, which the
-- calibration already leaves out (usage.gauge_* below usage's own).
ALTER TABLE surgeries ADD COLUMN stale_from TEXT;
