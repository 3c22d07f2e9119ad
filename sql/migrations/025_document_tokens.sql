-- A document block is sized as the API bills it (tokens.document_info): a
-- PDF per page, a text document as its text, where it was sized as its
-- base64. The stored blocks.tokens and records.tokens of a file holding
-- one change, so the next refresh reads each such file again.
UPDATE files SET inode = NULL WHERE gone = 0 AND id IN (
    SELECT file_id FROM blocks
    WHERE type = 'document' OR (kind = 'tool_result' AND instr(text, '"document"') > 0));
