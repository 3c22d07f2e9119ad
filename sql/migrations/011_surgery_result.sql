-- What each surgery left on disk: the size and sha256 of the file it wrote,
-- so `txdb undo` can tell that the session is still exactly that file.
ALTER TABLE surgeries ADD COLUMN result_size INTEGER;
ALTER TABLE surgeries ADD COLUMN result_sha256 TEXT;
