-- The timestamp of each chain position, kept by refresh: chain health
-- compares each with its predecessor's without reading two records per
-- position (on a 1 GB catalog that was ~300 ms of every chain_health page).
ALTER TABLE chain ADD COLUMN timestamp TEXT;

UPDATE chain SET timestamp = (
    SELECT r.timestamp FROM records r WHERE r.file_id = chain.file_id AND r.offset = chain.offset
);
