-- A covering index for the views that sum every session's blocks by kind
-- (analyze_by_type, under context_by_category, and analyze_by_tool): they
-- read a block's kind, tool, sizes and tokens without reading its row
-- (which holds the text). kind first: analyze_by_tool seeks its two kinds,
-- analyze_by_type groups by (file_id, kind) in index order, no sort.
-- tool_use_id third: a lookup of a tool call's result by (kind, file_id,
-- tool_use_id), as costliest_tool_calls and block_targets pair them, seeks
-- on all three here rather than on (kind, file_id) alone.
CREATE INDEX blocks_kind_sizes ON blocks(kind, file_id, tool_use_id, tool_name, offset, is_error, chars, signature_chars,
                                         tokens, session_id);
