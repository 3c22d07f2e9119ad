"""The attachment policy of strip-attachments, and what an attachment costs.

Claude Code re-expands every attachment line into a ``<system-reminder>`` on
every request, so attachments are real context. The policy says, per type,
what ``strip-attachments`` may drop; the catalog stores the class and the
rendered cost of each attachment line so SQL, ``analyze`` and the surgery
plan agree.
"""

from __future__ import annotations

import re

from txdb.model import tokens

# Kept whole, whatever the run: dropping them loses user input, makes the CLI
# re-announce every tool, or silences hooks.
KEEP_ALL = frozenset(
    {
        "queued_command",
        "deferred_tools_delta",
        "agent_listing_delta",
        "mcp_instructions_delta",
        "skill_listing",
        "hook_additional_context",
        "hook_blocking_error",
    }
)

# Records that build the system prompt; kept and not messages.
SYSTEM_PROMPT = frozenset({"prompt_snapshot", "deferred_tools_record"})

# What the CLI has announced to the model (tools, agents, MCP servers,
# skills): it computes the next announcement from these, so they are state,
# not conversation. compact-range leaves them, and SYSTEM_PROMPT records,
# in place; compact --before keeps them (``is_state``).
ANNOUNCEMENTS = frozenset(
    {"deferred_tools_delta", "agent_listing_delta", "mcp_instructions_delta", "skill_listing"}
)


# Snapshots of the CLI's own state (working directory and platform, model,
# date, permission mode, commit attribution): on resume it announces only
# what changed since the latest of each type in the history, and the whole
# of it again when none is there (CLI 2.1.328: a full "# Environment" and the
# attribution reminder instead of a two-line "Environment update"). State
# too, so a cut that drops them saves less than their cost.
SNAPSHOTS = frozenset({"environment", "model", "date", "auto_mode", "remote_session_change", "session_context"})


def is_state(record_type: str | None, att_type: str | None) -> bool:
    """A record that is state, not conversation (an announcement, a snapshot
    of the CLI's state, the system prompt): compact-range leaves it in place,
    compact --before carries it over from the summarised part. The one
    statement of that rule."""
    return record_type == "attachment" and att_type in ANNOUNCEMENTS | SNAPSHOTS | SYSTEM_PROMPT

# Known reminders that each newer copy supersedes: keep the newest.
SUPERSEDED = frozenset(
    {
        "task_reminder",
        "todo_reminder",
        "total_tokens_reminder",
        "token_usage",
        "budget_usd",
        "output_token_usage",
        "date_change",
        "date",
        "hook_success",
        "hook_non_blocking_error",
        "hook_cancelled",
        "hook_system_message",
        "command_permissions",
        "auto_mode",
        "auto_mode_exit",
        "plan_mode",
        "plan_mode_exit",
        "plan_mode_reentry",
        "critical_system_reminder",
        "edited_text_file",
        "read_truncation_notice",
        "environment",
        "model",
        "remote_session_change",
        "session_context",
        "diagnostics",
    }
)

# Hook events whose hook_success output is sent to the model; the rest
# render to nothing.
SENT_HOOK_EVENTS = frozenset({"SessionStart", "UserPromptSubmit"})

POLICY_CLASSES = ("keep-all", "system-prompt", "superseded", "unknown")


def policy_class(att_type: str | None) -> str:
    if att_type in KEEP_ALL:
        return "keep-all"
    if att_type in SYSTEM_PROMPT:
        return "system-prompt"
    if att_type in SUPERSEDED:
        return "superseded"
    return "unknown"


# strip-attachments keeps this many of each superseded type by default.
DEFAULT_KEEP_RECENT = 1


def attachment_decision(pclass: str, newest_rank: int, free: bool, keep_recent: int = DEFAULT_KEEP_RECENT,
                        include_free: bool = False) -> tuple[str, str]:
    """("keep" | "drop", why) for one attachment line under the policy:
    keep-all, system-prompt and unknown types are kept; of each superseded
    type the newest ``keep_recent`` (``newest_rank`` 1 = the newest line of
    its type in the file) are kept; a free line (renders to nothing) is
    kept unless ``include_free``. The one statement of "keep the newest N
    of each kind": ``strip-attachments`` plans with it, and the
    ``attachment_targets`` view's ``policy_keeps`` is its SQL form for the
    default (N = 1, free kept), held to it by tests/test_rules.py."""
    if pclass != "superseded":
        return "keep", pclass
    if newest_rank <= keep_recent:
        return "keep", f"newest {keep_recent}"
    if free and not include_free:
        return "keep", "free (renders to nothing)"
    return "drop", "superseded"


def _rendered_chars(rendered) -> int:
    if isinstance(rendered, str):
        return len(rendered)
    if isinstance(rendered, list):
        n = 0
        for item in rendered:
            if isinstance(item, str):
                n += len(item)
            elif isinstance(item, dict):
                c = item.get("content", item.get("text"))
                if isinstance(c, str):
                    n += len(c)
                elif isinstance(c, list):
                    n += _rendered_chars(c)
        return n
    return 0


def _json_chars(value) -> int:
    # Size of the attachment body as the CLI would render it, conservatively:
    # the length of its string leaves.
    if isinstance(value, str):
        return len(value)
    if isinstance(value, dict):
        return sum(_json_chars(v) + len(k) for k, v in value.items())
    if isinstance(value, list):
        return sum(_json_chars(v) for v in value)
    if value is None or isinstance(value, bool):
        return 0
    return len(str(value))


# How Claude Code renders an attachment line into the request it sends, per
# type: measured by resuming real sessions with and without every line of a
# type (CLI 2.1.328, tests/test_realcli_attachments.py), and read off the
# CLI's renderer where a field decides. ``RENDER_CLI`` names the release.
# A type not listed here sends its stored ``rendered`` text when the CLI
# wrote one, else is sized by its whole body plus a reminder wrapper.
RENDER_CLI = "2.1.328"

# Rendered to nothing, whatever the line holds.
RENDERS_NOTHING = frozenset(
    {
        "command_permissions",
        "edited_image_file",
        "hook_cancelled",
        "hook_error_during_execution",
        "hook_non_blocking_error",
        "hook_system_message",
        "hook_permission_decision",
        "hook_deferred_tool",
        "attention_budget",
        "context_efficiency",
        "session_context",
    }
)

# Re-rendered from the body by a template: (fixed chars of the template and
# wrapper, the body's string fields the CLI puts in it). A stored
# ``rendered`` is not what these send.
RENDER_TEMPLATES: dict[str, tuple[int, tuple[str, ...]]] = {
    "task_reminder": (457, ()),  # + one line per task, below
    "auto_mode": (1004, ()),  # the same guidance, whatever reminderType says
    "auto_mode_exit": (240, ()),
    "date_change": (118, ("newDate",)),
    "total_tokens_reminder": (30, ("text",)),
    "edited_text_file": (520, ("filename", "snippet")),
    "read_truncation_notice": (40, ("banner",)),
}

# What CLI 2.1.328 sends for a truncated Read whose read_truncation_notice
# line is gone (measured: a resume with every such line dropped sent the
# same number of notices, each this short form, 208 characters where the
# banner was 462), read off the banner's path and line counts.
_BANNER_RE = re.compile(r"PARTIAL view — (?P<path>.*?): showing lines (?P<a>\d+)-(?P<b>\d+) of (?P<total>\d+) total")
_SHORT_NOTICE = ("[Truncated: PARTIAL view — {path}: showing {n} of {total} lines. Call Read with offset/limit to page "
                 "through. Do NOT answer from this page alone if the answer may be further in the file.]")


def reemitted_truncation_notice(banner) -> str | None:
    """The short notice the CLI sends in place of a dropped
    read_truncation_notice with this ``banner``; None when the banner is not
    of the form it was measured on."""
    m = _BANNER_RE.search(banner) if isinstance(banner, str) else None
    if m is None:
        return None
    return _SHORT_NOTICE.format(path=m["path"], n=int(m["b"]) - int(m["a"]) + 1, total=m["total"])


# The models the CLI gives the task tools (TaskCreate, TaskUpdate) to: a
# task_reminder renders to nothing when the session resumes on another.
TASK_TOOL_MODELS = frozenset(
    {
        "claude-3-opus", "claude-3-sonnet", "claude-3-haiku", "claude-3-5-sonnet", "claude-3-5-haiku",
        "claude-3-7-sonnet", "claude-opus-4-0", "claude-opus-4-1", "claude-opus-4-5", "claude-opus-4-6",
        "claude-opus-4-7", "claude-sonnet-4-0", "claude-sonnet-4-5", "claude-sonnet-4-6", "claude-haiku-4-5",
    }
)


def has_task_tools(model: str | None) -> bool:
    """Whether the CLI resuming on ``model`` sends task_reminders (the model
    id without its date or context suffix is one of ``TASK_TOOL_MODELS``);
    an unknown model (None) is assumed to have them."""
    if not model:
        return True
    base = model.split("[", 1)[0]
    return any(base == m or base.startswith(m + "-") for m in TASK_TOOL_MODELS)


def attachment_cost(record: dict, model: str | None = None) -> tuple[int, bool, bool]:
    """(rendered tokens, came from `rendered`, renders to nothing) for an
    attachment line, as the CLI renders it (``RENDERS_NOTHING``,
    ``RENDER_TEMPLATES``, else its stored ``rendered``); ``model``: the
    model the session resumes on (its last assistant turn's), which decides
    whether a task_reminder is sent at all."""
    att = record.get("attachment")
    if not isinstance(att, dict):
        att = {}
    att_type = att.get("type")
    if att_type in RENDERS_NOTHING:
        return 0, False, True
    if att_type == "hook_success" and att.get("hookEvent") not in SENT_HOOK_EVENTS:
        return 0, False, True
    if att_type == "task_reminder" and not has_task_tools(model):
        return 0, False, True
    if att_type == "read_truncation_notice" and (short := reemitted_truncation_notice(att.get("banner"))):
        # The CLI sends this notice's banner; without the line it still sends
        # its own short notice for the truncated Read: the line costs the difference.
        return tokens.text_tokens(max(0, tokens.escaped_chars(att["banner"]) - tokens.escaped_chars(short))), False, False
    template = RENDER_TEMPLATES.get(att_type)
    if template is not None:
        chars, fields = template
        for name in fields:
            value = att.get(name)
            chars += tokens.escaped_chars(value) if isinstance(value, str) else 0
        if att_type == "task_reminder":
            # "#{id}. [{status}] {subject}" per task; descriptions are never sent.
            for task in att.get("content") or []:
                if isinstance(task, dict):
                    chars += 8 + len(str(task.get("id", ""))) + len(str(task.get("status", "")))
                    chars += len(str(task.get("subject", "")))
        return tokens.text_tokens(chars), False, False
    if "rendered" in record and record["rendered"] is not None:
        chars = _rendered_chars(record["rendered"])
        return tokens.text_tokens(chars), True, chars == 0
    if att_type in SYSTEM_PROMPT:
        # The system prompt is counted once per session (the latest
        # snapshot), by the session-level views, not per line.
        return tokens.text_tokens(_json_chars(att)), False, False
    # Unknown or older types: sized conservatively by their whole body plus
    # the reminder wrapper.
    return tokens.text_tokens(_json_chars(att) + 40), False, False
