-- One title rule (records.pick_title): custom-title > agent-name > the first
-- summary > ai-title > the first human prompt (title_source 'prompt'), so a
-- session with a prompt is never untitled. Stored titles follow it once
-- their file is read again: the re-derive idiom of docs/architecture.md.
UPDATE files SET inode = NULL WHERE gone = 0;
