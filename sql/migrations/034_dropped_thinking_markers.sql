-- A record's own markers (persistedThinking: the thinking the API dropped
-- after an edit, saved to sidecars by surgery/thinking.py; never sent) have
-- no block to hold their text: refresh stores it here (idx -1 - n), so the
-- persisted view lists them without reading JSON. A block's marker keeps
-- NULL (its text is the block's). No file before this holds such a field.
ALTER TABLE markers ADD COLUMN text TEXT;
