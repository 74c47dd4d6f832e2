"""One place that masks secrets: in MCP tool results, alert data, runbooks and any other
text from outside (error messages quoting a server's output).

Whatever reaches the LLM provider, the database and every browser watching a session is
masked once, before any of them sees it, in these passes:

1. Kubernetes Secrets, by structure (``kubernetes.py``); a document that cannot be read
   as a structure (truncated, not JSON/YAML, absurdly deep) is masked as text instead.
2. JSON strings holding escaped text, unescaped and masked from 1, then private keys
   written as base64 without their armour (``encodings.py``).
3. Our patterns (``patterns.py``): key material and token shapes, credentials in URLs
   (``urls.py``) and on command lines (``commands.py``), and values whose name says
   secret in any syntax (``assignments.py``, judged by ``names.py``).
4. detect-secrets' maintained token detectors (``detectors.py``), then tokens known by
   their vendor's prefix or by a prefix before a long random tail.
5. base64 and percent-encoded pieces, decoded and masked from 1 (``encodings.py``): a
   piece that held a secret, or is key material, is replaced.

The text passes are linear regexes and scans over the string, and decoding is bounded in
depth; no input makes them fail. So the fail-closed and fail-open policies below only
decide what happens on a bug, never on a hostile input: a tool result is withheld, an
alert is kept as sent.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass

from masking import detectors, encodings, kubernetes, patterns
from masking.bounded import storable
from masking.kubernetes import SECRET_VALUE_MARKER
from masking.patterns import PATTERN_NAMES

__all__ = [
    "PATTERN_NAMES",
    "SECRET_VALUE_MARKER",
    "WITHHELD_NOTICE",
    "ExtraMasking",
    "mask_alert",
    "mask_text",
    "mask_tool_result",
]

logger = logging.getLogger(__name__)

WITHHELD_NOTICE = "[MASKED: the tool result could not be checked for secrets, so it was withheld]"


@dataclass(frozen=True)
class ExtraMasking:
    """What a server's ``data_masking`` adds to the default masking (which always runs)."""

    optional: tuple[str, ...] = ()  # names from patterns.OPTIONAL_PATTERNS
    custom: tuple[tuple[re.Pattern[str], str], ...] = ()  # (regex, replacement)

    @classmethod
    def from_config(cls, config) -> ExtraMasking | None:
        if config is None or not config.enabled:
            return None
        names = [n for group in config.pattern_groups for n in patterns.PATTERN_GROUPS[group]]
        names += [n for n in config.patterns if n in patterns.OPTIONAL_PATTERNS]
        custom = tuple((re.compile(c.pattern), c.replacement) for c in config.custom_patterns)
        return cls(tuple(dict.fromkeys(names)), custom)

    def apply(self, text: str) -> str:
        text = patterns.mask_optional(text, self.optional)
        for regex, replacement in self.custom:
            text = regex.sub(replacement, text)
        return text


def mask_tool_result(text: str, extra: ExtraMasking | None = None) -> str:
    """Fail closed: a tool result that could not be checked is withheld, never passed on.

    Like every entry point here, the text returned can be stored: NUL and lone surrogates
    (which PostgreSQL and UTF-8 cannot hold) become U+FFFD."""
    try:
        masked = _mask(storable(text))
        return extra.apply(masked) if extra is not None else masked
    except Exception as exc:
        # Only the type: exception messages (YAML errors, for one) quote the input.
        logger.error("Masking a tool result failed (%s); it was withheld.", type(exc).__name__)
        return WITHHELD_NOTICE


def mask_text(text: str) -> str:
    """Other outside text (an MCP server's stderr in an error, a provider's error message)
    is shown and stored like a tool result, so it is masked the same way."""
    return mask_tool_result(text)


def mask_alert(text: str) -> str:
    """Fail open: the alert is the reason the session exists; losing it loses the session.

    Only a bug in the text passes could make this fail; no input can.
    """
    text = storable(text)
    try:
        return _mask(text)
    except Exception as exc:
        logger.error("Masking alert data failed (%s); used it unmasked.", type(exc).__name__)
        return text


def _mask(text: str, depth: int = 0) -> str:
    try:
        text = kubernetes.mask_kubernetes_secrets(text)
    except Exception as exc:
        # A document the structural pass cannot handle is still masked, as text.
        logger.warning(
            "Masking a document's structure failed (%s); masked it as text.", type(exc).__name__
        )
        text = kubernetes.mask_secret_chunks(text)
    if depth < encodings.MAX_DEPTH:
        text = encodings.mask_escaped(text, lambda inner: _mask(inner, depth + 1))
    text = encodings.mask_key_material(text)
    text = detectors.mask_detected(patterns.mask_patterns(text))
    text = patterns.mask_prefixed_tokens(text)
    if depth < encodings.MAX_DEPTH:
        text = encodings.mask_encoded(text, lambda inner: _mask(inner, depth + 1))
    return text
