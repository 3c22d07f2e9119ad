-- The secrets scan reads more than it did: every string a raw line holds
-- (toolUseResult, summaries, custom titles, cwd, gitBranch, keys), each
-- file's own path and project folder name, and a private key over its
-- whole extent instead of its BEGIN line. Every file is scanned again
-- (by the next `txdb secrets scan` or `txdb export --redact`); until then
-- `txdb sessions` says it is not scanned.
DELETE FROM secret_findings;
DELETE FROM secret_scans;
