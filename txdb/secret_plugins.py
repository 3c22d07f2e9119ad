"""Detectors txdb adds to detect-secrets' own (loaded by it as a custom
plugin file, see txdb.secrets): secrets transcripts are known to hold that
its plugins do not name."""

from __future__ import annotations

import re

from detect_secrets.plugins.base import RegexBasedDetector


class GoogleApiKeyDetector(RegexBasedDetector):
    """Google API keys (Maps, Gemini, Firebase, ...): AIza and 35 more characters."""

    secret_type = "Google API Key"
    # The literal first (no look-behind before it), so the search skips ahead to each "AIza".
    denylist = [re.compile(r"AIza[0-9A-Za-z_-]{35}(?![0-9A-Za-z_-])")]
