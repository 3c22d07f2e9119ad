-- A content block's envelope is its kind's as the CLI sends it
-- (tokens.envelope_chars: a text block's 26 characters, a tool call's or
-- result's about 80, a string prompt none) where it was a fixed 20 tokens,
-- and each message of the request costs its role wrapper once
-- (tokens.MESSAGE_TOKENS, records.message_link). Every stored
-- records.tokens of a conversation line changes, so the next refresh reads
-- each file that holds one again (and stores its estimate again as it does).
UPDATE files SET inode = NULL WHERE gone = 0 AND id IN (
    SELECT DISTINCT file_id FROM records WHERE type IN ('user', 'assistant'));
