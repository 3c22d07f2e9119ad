-- What a token costs, per model named in `usage` (as the API named it), in
-- USD per million tokens, copied from the price library (txdb.cost,
-- genai-prices) by db.connect whenever the installed library's version is
-- not the one recorded here, or a model is new. Views compute each
-- message's cost from its stored tokens and these rows (billed_cost), so
-- upgrading the library re-prices every figure without a re-ingest.
-- A model runs from valid_from (inclusive, '' = always) to valid_until
-- (exclusive, NULL = still); above_tokens is the long-context tier: its
-- prices apply to a message whose input (uncached + cache read + cache
-- write) is above it (0: the base tier). priced_as NULL: the library does
-- not know the model; its messages are unpriced (cost NULL, never 0).
CREATE TABLE IF NOT EXISTS prices (
    model TEXT NOT NULL,
    valid_from TEXT NOT NULL DEFAULT '',
    valid_until TEXT,
    above_tokens INTEGER NOT NULL DEFAULT 0,
    priced_as TEXT,
    input_mtok REAL,
    output_mtok REAL,
    cache_read_mtok REAL,
    cache_write_5m_mtok REAL,
    cache_write_1h_mtok REAL,
    library TEXT NOT NULL,
    library_version TEXT NOT NULL,
    data_date TEXT,                   -- the newest change of Anthropic's prices the library's data holds
    PRIMARY KEY (model, valid_from, above_tokens)
);
CREATE INDEX IF NOT EXISTS usage_model ON usage(model);
CREATE INDEX IF NOT EXISTS usage_timestamp ON usage(timestamp);
