-- "The system prompt counts once": the latest record of each system-prompt
-- type in a file (policy 'system-prompt': prompt_snapshot,
-- deferred_tools_record), on the chain or not, since it goes with every
-- request. The one SQL statement of the rule (records.system_prompt_tokens
-- is the Python one); session_costs, analyze_by_type and the calibrated
-- estimate read it. Per-line tokens of these records are stored as 0.
CREATE VIEW system_prompt AS
SELECT a.file_id, a.session_id, a.type, a.offset, a.tokens
FROM attachments a
WHERE a.policy = 'system-prompt'
  AND a.offset = (SELECT max(m.offset) FROM attachments m WHERE m.file_id = a.file_id AND m.type = a.type);
