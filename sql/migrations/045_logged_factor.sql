-- The factor a session's stored estimate was priced at when it came from
-- its swap journal (the newest swap's logged fit, while the file is what
-- that swap wrote: estimate.at_factor); NULL when priced from the file's
-- own figures. The journal can change (removed, edited, a restore writes
-- the session but not its journal) while the session file does not, so a
-- refresh looks again at the sessions priced so and those with a journal
-- (estimate.recheck_logged). Filled by the estimates the open re-derives
-- (rules bump 1).
ALTER TABLE sessions ADD COLUMN est_factor_logged REAL;
