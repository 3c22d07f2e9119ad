-- records.json: the line's JSON where SQLite's JSON functions can read it
-- (they refuse JSON nested over 2,000 levels, which a stored record may
-- be: txdb reads up to ingest/deep.py's MAX_DEPTH), else NULL. Every view
-- reads a record's JSON through it, never through raw: a line SQLite
-- cannot read is left out of what needs its JSON, and the view answers.
ALTER TABLE records ADD COLUMN json TEXT GENERATED ALWAYS AS (CASE WHEN json_valid(raw) THEN raw END) VIRTUAL;
