"""The session-file model: parsing lines, records, chains, transcripts and their
safe writes. No SQLite catalog: everything above builds on this floor."""
