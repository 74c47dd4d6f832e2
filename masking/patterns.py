"""Secrets in text, masked by pattern: each value becomes ``[MASKED_<NAME>]`` while the key
or label before it stays, so the text still reads as evidence.

- **Key material and token shapes** that are secrets wherever they appear (here): PEM
  blocks, kubeconfig ``*-data``, AWS access keys, GitHub, Slack, Stripe and Google API
  keys, ``sk-`` API keys, JWTs, vendor tokens with well-known prefixes and any
  ``prefix_`` + random-looking token, Bearer and Basic credentials, ``Authorization``.
- **Credentials in URLs** (``urls.py``) and on **command lines** (``commands.py``).
- **Values whose name says secret**, in any syntax (``assignments.py``, judged by
  ``names.py``).

Evidence stays readable: "password authentication failed", "DATABASE_PASSWORD is not set"
and "token expired" have no value after ``:``/``=``, and placeholders (``<none>``,
``${DB_PASSWORD}``, ``***``, ``16 bytes``) are left alone.

Every regex is linear-time on any input: no nested quantifiers over overlapping classes,
and each scan stops at a delimiter (tests/agents/test_masking.py feeds each one a
mebibyte of its worst case).
"""

from __future__ import annotations

import base64
import binascii
import itertools
import re
from collections.abc import Callable

from masking import assignments, commands, urls
from masking.names import is_placeholder, looks_random

# fmt: off
PATTERN_NAMES: tuple[str, ...] = (
    "private_key", "ssh_private_key", "certificate", "kubeconfig_data", "aws_access_key",
    "github_token", "slack_token", "stripe_key", "google_api_key", "api_key", "jwt", "token",
    "basic_auth", "authorization", "password", "url_credential", "env_secret_value",
    "aws_secret_key", "secret", "passphrase", "credentials", "key", "session", "signature",
    "webhook", "encoded_secret",
)
# fmt: on
# Every name a server's data_masking.patterns may list: the default ones (always on) and
# the optional ones below.
KNOWN_PATTERNS = (*PATTERN_NAMES, "email", "ip_address", "base64_secret")
_SEP = assignments._SEP
_VALUE = assignments._VALUE
marker = assignments.marker
_quoted = assignments._quoted


_PEM_RE = re.compile(
    r"-----BEGIN (?P<label>[A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?|(?:TRUSTED )?CERTIFICATE)-----"
    # The body stops at the next "-----" or quote, so an unterminated block (a truncated
    # result) is still masked and a block inside a JSON string does not eat the rest.
    r"""(?:[^-"']|-(?!----))*(?:-----END [A-Z0-9 ]{0,40}-----)?"""
)


def _pem(m: re.Match[str]) -> str:
    label = m.group("label")
    if "OPENSSH" in label:
        return marker("ssh_private_key")
    return marker("private_key" if "PRIVATE" in label else "certificate")


_KUBECONFIG_RE = re.compile(
    rf"(?P<key>(?:certificate-authority|client-key|client-certificate)-data{_SEP}){_VALUE}"
)


def _kubeconfig(m: re.Match[str]) -> str:
    if is_placeholder(m.group("value")):
        return m.group(0)
    return _quoted(m.group("key"), m.group("value"), "kubeconfig_data")


_SHAPES: tuple[tuple[str, str], ...] = (
    ("aws_access_key", r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),
    ("github_token", r"\b(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{22,})"),
    ("slack_token", r"\bxox[baprs]-[A-Za-z0-9-]{10,}"),
    ("slack_token", r"hooks\.slack\.com/services/[A-Za-z0-9/]{20,}"),
    ("stripe_key", r"\b(?:sk|rk|pk)_(?:live|test)_[0-9A-Za-z]{10,}|\bwhsec_[0-9A-Za-z]{20,}"),
    ("google_api_key", r"\bAIza[0-9A-Za-z_-]{30,45}(?![0-9A-Za-z_-])"),
    # OpenAI (sk-, sk-proj-…) and Anthropic (sk-ant-…) keys.
    ("api_key", r"\bsk-[A-Za-z0-9][A-Za-z0-9_-]{30,}"),
    ("jwt", r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*"),
)

# Tokens whose vendors give them a recognisable prefix (the tail only has to be long and
# not a word). Written from the vendors' documentation, for services SREs meet.
# fmt: off
_TOKEN_PREFIXES = (
    # GitLab
    "glpat-", "glptt-", "gldt-", "glrt-", "glcbt-", "gloas-", "glsoat-", "glffct-",
    # npm, Hugging Face, DigitalOcean, Shopify, Slack, Linear, PlanetScale, Square
    "npm_", "hf_", "dop_v1_", "doo_v1_", "dor_v1_", "shpat_", "shpss_", "shppa_", "shpca_",
    "xoxe-", "xoxe.", "xapp-", "lin_api_", "pscale_tkn_", "pscale_pw_", "pscale_oauth_",
    "sq0atp-", "sq0csp-",
    # RubyGems, Pulumi, Docker Hub, Dynatrace, New Relic, Grafana, Sentry, Figma, Notion,
    # Atlassian, Vault, Doppler, 1Password, age, Google OAuth, Flutterwave, Stripe,
    # Terraform Cloud, Vercel, PostHog, Mailgun, HubSpot, GitHub
    "rubygems_", "pul-", "dckr_pat_", "dt0c01.", "NRAK-", "NRII-", "glsa_", "glc_",
    "sntrys_", "sntryu_", "figd_", "ntn_", "ATATT3", "ATCTT3", "hvs.", "hvb.", "hvr.",
    "dp.st.", "dp.pt.", "dp.ct.", "ops_ey", "AGE-SECRET-KEY-1", "ya29.", "1//0",
    "FLWSECK-", "sk_live_", "rk_live_", "tfp_", "vercel_", "phc_", "key-", "pat-na1-",
    "pat-eu1-", "github_pat_",
)
# fmt: on
_PREFIXED_RE = re.compile(
    r"(?<![\w.-])(?:"
    + "|".join(re.escape(prefix) for prefix in sorted(_TOKEN_PREFIXES, key=len, reverse=True))
    + r")[A-Za-z0-9_.+/=-]{16,}"
)
# Any other short prefix and a separator before a long random-looking tail: the shape of
# most vendors' tokens (glpat-…, lin_api_…) without knowing the vendor. The tail must mix
# upper and lower case and digits, so names (nginx-7d9c7d8f6b-x2k4p), hex ids and words
# stay.
_GENERIC_PREFIXED_RE = re.compile(
    r"(?<![\w.-])[A-Za-z][A-Za-z0-9]{1,9}(?:[_-][A-Za-z0-9]{1,8})?[_-](?P<tail>[A-Za-z0-9_-]{32,})"
    r"(?![\w.-])"
)


def _prefixed(m: re.Match[str]) -> str:
    token = m.group()
    tail = token[len(token.rstrip("=")) - 16 :]
    return marker("token") if not tail.isalpha() and not tail.isdigit() else token


def _generic_prefixed(m: re.Match[str]) -> str:
    tail = m.group("tail")
    mixed = any(c.isupper() for c in tail) and any(c.islower() for c in tail)
    if not (mixed and any(c.isdigit() for c in tail) and looks_random(tail)):
        return m.group()
    # Random characters change class often; CamelCase names (GetUserProfile2Handler) do
    # not. Half of neighbours differ in a random mix of cases and digits.
    changes = sum(_class(a) != _class(b) for a, b in itertools.pairwise(tail))
    return marker("token") if changes >= 0.4 * (len(tail) - 1) else m.group()


def _class(char: str) -> int:
    return 0 if char.islower() else 1 if char.isupper() else 2 if char.isdigit() else 3


_BEARER_RE = re.compile(r"(?P<key>\bBearer[ \t]+)(?P<value>[A-Za-z0-9._~+/-]+=*)", re.I)


def _bearer(m: re.Match[str]) -> str:
    core = m.group("value").rstrip("=")
    if core.isalpha() and len(core) < 24:
        return m.group(0)  # prose ("Bearer token expired") or a header parameter ("realm=")
    return m.group("key") + marker("token")


_BASIC_RE = re.compile(r"(?P<key>\bBasic[ \t]+)(?P<value>[A-Za-z0-9+/]{4,}={0,2})(?![\w+/=])", re.I)


def _basic(m: re.Match[str]) -> str:
    """Masked when it decodes to ``user:password``, so "Basic authentication" survives."""
    value = m.group("value")
    try:
        decoded = base64.b64decode(value + "=" * (-len(value) % 4), validate=True)
    except (binascii.Error, ValueError):
        return m.group(0)
    return m.group("key") + marker("basic_auth") if b":" in decoded else m.group(0)


# "Authorization: <scheme> <credential>", or a bare credential; Bearer and Basic have run.
_AUTHORIZATION_RE = re.compile(
    r"""(?P<key>\b(?:proxy-)?authorization\\?["']?[ \t]*[:=][ \t]*\\?["']?"""
    r"""(?:[A-Za-z][\w-]*[ \t]+)?)(?P<value>[^\s"'\\,;]+)""",
    re.I,
)


def _authorization(m: re.Match[str]) -> str:
    value = m.group("value")
    has_scheme = m.group("key").rstrip()[-1:].isalnum()
    # "authorization: server message: …" is prose: a credential is not one word.
    word = value.rstrip(":;,.").isalpha()
    credential = len(value) >= 6 and not word if has_scheme else len(value) >= 16 and not word
    if is_placeholder(value) or not credential:
        return m.group(0)  # "Authorization: denied for user", "authorization: [MASKED_TOKEN]"
    return m.group("key") + marker("authorization")


def _shape(name: str) -> Callable[[re.Match[str]], str]:
    masked = marker(name)
    return lambda m: masked


_RULES: tuple[tuple[re.Pattern[str], Callable[[re.Match[str]], str]], ...] = (
    (_PEM_RE, _pem),  # first: key material must go whole, before any key: value rule
    (_KUBECONFIG_RE, _kubeconfig),
    *((re.compile(regex), _shape(name)) for name, regex in _SHAPES),
    (_BEARER_RE, _bearer),
    (_BASIC_RE, _basic),
    (_AUTHORIZATION_RE, _authorization),
)


def mask_prefixed_tokens(text: str) -> str:
    """After detect-secrets' detectors, which name the vendor of the tokens they know."""
    return _GENERIC_PREFIXED_RE.sub(_generic_prefixed, _PREFIXED_RE.sub(_prefixed, text))


def mask_patterns(text: str) -> str:
    for pattern, replace in _RULES:
        text = pattern.sub(replace, text)
    text = urls.mask_urls(text)
    text = commands.mask_commands(text)
    return assignments.mask_assignments(text)


# --- Optional patterns, for a server's ``data_masking`` --------------------------------------

# Off by default because they hide evidence an investigation usually needs; a server whose
# results should not show them turns them on by name or by group.
OPTIONAL_PATTERNS: dict[str, re.Pattern[str]] = {
    "email": re.compile(r"\b[A-Za-z0-9._%+-]{1,64}@[A-Za-z0-9-]{1,63}(?:\.[A-Za-z0-9-]{1,63})+\b"),
    "ip_address": re.compile(
        r"\b(?:(?:25[0-5]|2[0-4]\d|1?\d?\d)\.){3}(?:25[0-5]|2[0-4]\d|1?\d?\d)\b"
    ),
    # A long base64 run standing alone (an encoded key, a certificate without its header).
    "base64_secret": re.compile(r"(?<![A-Za-z0-9+/=])[A-Za-z0-9+/]{40,}={0,2}(?![A-Za-z0-9+/=])"),
}
# TARSy's group names; the default patterns already cover what the others name.
PATTERN_GROUPS: dict[str, tuple[str, ...]] = {
    "basic": (),
    "secrets": ("base64_secret",),
    "security": ("email", "base64_secret"),
    "kubernetes": (),
    "cloud": (),
    "all": tuple(OPTIONAL_PATTERNS),
}


def mask_optional(text: str, names: tuple[str, ...]) -> str:
    for name in names:
        text = OPTIONAL_PATTERNS[name].sub(marker(name), text)
    return text
