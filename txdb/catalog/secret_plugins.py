"""Detectors txdb adds to detect-secrets' own (loaded by it as a custom
plugin file, see txdb.catalog.secrets): secrets transcripts are known to hold that
its plugins do not name."""

from __future__ import annotations

import re

from detect_secrets.plugins.base import RegexBasedDetector


class GoogleApiKeyDetector(RegexBasedDetector):
    """Google API keys (Maps, Gemini, Firebase, ...): AIza and 35 more characters."""

    secret_type = "Google API Key"
    # The literal first (no look-behind before it), so the search skips ahead to each "AIza".
    denylist = [re.compile(r"AIza[0-9A-Za-z_-]{35}(?![0-9A-Za-z_-])")]


class AnthropicApiKeyDetector(RegexBasedDetector):
    """Anthropic API keys and OAuth tokens (sk-ant-api03-..., sk-ant-oat01-...),
    the keys a Claude Code session is most likely to show."""

    secret_type = "Anthropic API Key"
    denylist = [re.compile(r"sk-ant-[a-z]{2,8}\d{2}-[A-Za-z0-9_-]{32,}")]


class AwsSecretAccessKeyDetector(RegexBasedDetector):
    """An AWS secret access key named as one anywhere in a line
    (``aws_secret_access_key = ...``, ``SecretAccessKey: ...``), quoted or
    not: detect-secrets finds it only quoted, or at a config line's start."""

    secret_type = "AWS Secret Access Key"
    # The name first (its literal start lets the scan search for it); the key is the group.
    denylist = [re.compile(r"secret_?access_?key[\"']?\s*[:=]\s*[\"']?([A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])",
                           re.IGNORECASE)]
