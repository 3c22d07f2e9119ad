-- The calibration a logged pass estimated with (recorded ~= fit_overhead +
-- fit_factor x chars/4, the anchor folded into the overhead), fitted on the
-- session before the surgery. Until a turn is recorded after the latest
-- surgery, the catalog's estimate is this fit applied to the new chain
-- (estimate.session_estimate): the figure the plan showed. NULL on older
-- rows and on rows that are not a strip (undo, restore).
ALTER TABLE surgeries ADD COLUMN fit_overhead REAL;
ALTER TABLE surgeries ADD COLUMN fit_factor REAL;
