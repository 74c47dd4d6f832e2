"""The fingerprint of an alert, for the duplicate-alert cooldown (``defaults.dedup``).

An alert storm (one failing dependency firing the same alert from 40 pods) should start
one investigation, not 40. Two alerts are the same when their fingerprints are: made of
the fields named in config (``alertname``, ``namespace``…), found in the alert's JSON
(anywhere in it: Alertmanager's webhook keeps them under ``alerts[].labels``) or in its
``key: value`` lines; or, when no field is configured or none is found, of the whole
alert normalised (JSON key order and whitespace, blank lines and spacing of text). A
fingerprint the client sends wins over both.

Only a keyed hash is kept: the values may hold secrets (sessions/services/dedup.py).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from collections import deque
from typing import Any

from django.conf import settings

from masking.bounded import UnsafeInput, load_json

# The client's own fingerprint, at most (longer is refused by intake).
CLIENT_FINGERPRINT_LIMIT = 500
_LINE_RE = re.compile(r"""^\s*(?:-\s+)?["']?([^"':=]+?)["']?\s*[:=]\s*(.*?)\s*$""")
_SPACES_RE = re.compile(r"\s+")


def alert_fingerprint(
    *, alert_type: str, data: str, fields: tuple[str, ...], submitted: str = ""
) -> str:
    """The hash of what makes this alert the same as another one of ``alert_type``."""
    basis: dict[str, Any]
    if submitted.strip():
        basis = {"fingerprint": submitted.strip()}
    else:
        parsed = _parse(data)
        found = _fields(parsed, data, fields) if fields else {}
        basis = {"fields": found} if found else {"payload": _normalised(parsed, data)}
    text = json.dumps([alert_type, basis], sort_keys=True, ensure_ascii=False)
    return hmac.new(
        settings.SECRET_KEY.encode(), text.encode("utf-8", "surrogatepass"), hashlib.sha256
    ).hexdigest()


def _parse(data: str) -> Any:
    try:
        return load_json(data.encode("utf-8", "surrogatepass"), what="alert", max_depth=64)
    except (UnsafeInput, ValueError):
        return None


def _fields(parsed: Any, data: str, fields: tuple[str, ...]) -> dict[str, str]:
    """Each named field's first value: breadth first in JSON (the top level before
    nested labels), else the first ``key: value`` line."""
    found: dict[str, str] = {}
    if isinstance(parsed, dict | list):
        for name in fields:
            value = _find(parsed, name)
            if value is not None:
                found[name] = value
        return found
    lines: dict[str, str] = {}
    for line in data.splitlines():
        match = _LINE_RE.match(line)
        if match and match.group(2):
            lines.setdefault(match.group(1).strip(), _unquote(match.group(2)))
    return {name: lines[name] for name in fields if name in lines}


def _find(root: Any, name: str) -> str | None:
    queue: deque[Any] = deque([root])
    while queue:
        node = queue.popleft()
        if isinstance(node, dict):
            if name in node and not isinstance(node[name], dict | list):
                return str(node[name]).strip()
            queue.extend(node.values())
        elif isinstance(node, list):
            queue.extend(node)
    return None


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return value[1:-1].strip()
    return value


def _normalised(parsed: Any, data: str) -> str:
    if parsed is not None:
        return json.dumps(parsed, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    lines = (_SPACES_RE.sub(" ", line).strip() for line in data.splitlines())
    return "\n".join(line for line in lines if line)
