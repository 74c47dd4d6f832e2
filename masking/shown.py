"""What of a URL or a command may be shown: TARSy's config viewer rules (a secret-looking
value hidden whole, a URL without its user, password, query and fragment)."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

HIDDEN = "***"
_SECRET_PREFIXES = ("ghp_", "gho_", "github_pat_", "xoxb-", "xoxp-", "sk-", "AKIA", "Bearer ")
_JWT_RE = re.compile(r"eyJ[\w-]+\.[\w-]+\.")
_LONG_RUN_RE = re.compile(r"[A-Za-z0-9_\-+/=]{32,}")


def looks_secret(text: str) -> bool:
    return (
        any(prefix in text for prefix in _SECRET_PREFIXES)
        or bool(_JWT_RE.search(text))
        or bool(_LONG_RUN_RE.search(text))
    )


def safe_url(url: str) -> str:
    """Scheme, host, port and path: no user, password, query or fragment."""
    if not url:
        return ""
    try:
        parts = urlsplit(url)
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return HIDDEN if looks_secret(url) else ""
    if not parts.scheme or not parts.hostname:
        return HIDDEN if looks_secret(url) else ""
    path = parts.path.replace("%7B%7B", "{{").replace("%7D%7D", "}}")
    return f"{parts.scheme}://{parts.hostname}{port}{path}"
