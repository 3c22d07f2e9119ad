-- The API turns after each waste item whose message counts in its file
-- (usage.billed, the rule cost counts each message once by): a fork, a
-- resumed copy or a restored copy repeats another file's messages and pays
-- for none of them, so waste_items prices an item by these turns, not by
-- every turn that re-sent it. Filled by the migration's Python step (every
-- file's waste found again) and kept, when a message moves to another
-- file, by its trigger (txdb/catalog/ingest/waste_found.py).
ALTER TABLE waste_found ADD COLUMN paid_turns INTEGER NOT NULL DEFAULT 0;
