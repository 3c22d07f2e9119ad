-- Attachments cost what the CLI renders for their type (policy.py
-- RENDER_TEMPLATES, RENDERS_NOTHING, TASK_TOOL_MODELS) and a thinking block's
-- envelope is 12 tokens (tokens.THINKING_BLOCK_TOKENS): the stored
-- attachments.tokens and records.tokens change, so the next refresh reads
-- each file again.
UPDATE files SET inode = NULL WHERE gone = 0;
