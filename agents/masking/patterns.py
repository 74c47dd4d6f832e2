"""Secrets in text, masked by pattern: each value becomes ``[MASKED_<NAME>]`` while the key
or label before it stays, so the text still reads as evidence.

Two kinds of rules:

- **Shapes** that are secrets wherever they appear: PEM blocks, AWS access keys, GitHub,
  Slack, Stripe and Google API keys, ``sk-`` API keys, JWTs, Bearer and Basic credentials,
  passwords and tokens inside URLs.
- **Assignments** whose *name* says secret: ``password: x``, ``DB_PASS=x``,
  ``"clientSecret": "x"``, ``--token x``, a pod spec's ``{name: API_TOKEN, value: x}``. A
  name is split into words (``DB_PASS`` → db pass, ``clientSecret`` → client secret) and its
  last word decides; ``key`` alone is not enough (``secretKeyRef: {key: password}`` is
  evidence), an env-style ``MY_SERVICE_KEY`` or a qualified ``signing_key`` is.

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
import functools
import re
from collections.abc import Callable

# fmt: off
PATTERN_NAMES: tuple[str, ...] = (
    "private_key", "ssh_private_key", "certificate", "kubeconfig_data", "aws_access_key",
    "github_token", "slack_token", "stripe_key", "google_api_key", "api_key", "jwt", "token",
    "basic_auth", "authorization", "password", "url_credential", "env_secret_value",
    "aws_secret_key", "secret", "passphrase", "credentials", "key",
)
# fmt: on
# Every name a server's data_masking.patterns may list: the default ones (always on) and
# the optional ones below.
KNOWN_PATTERNS = (*PATTERN_NAMES, "email", "ip_address", "base64_secret")

# A value after a key: escaped-JSON string, JSON string, single-quoted, or a bare word. The
# closing quote is optional so a value cut off by truncation is still masked.
# A quoted YAML scalar may go on over indented continuation lines.
_VALUE = (
    r"""(?P<value>\\"[^"\n]*?\\"|"(?:[^"\\\n]|\\.|\n[ \t]+)*"?|'(?:[^'\n]|\n[ \t]+)*'?"""
    r"""|[^\s"']+)"""
)
_SEP = r"""\\?["']?[ \t]*[:=][ \t]*"""
_NAME = r"[A-Za-z_][\w.-]*"


def marker(name: str) -> str:
    return f"[MASKED_{name.upper()}]"


# --- Which names hold secrets ---------------------------------------------------------------

_WORD_RE = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")
_LAST_WORD = {
    "password": "password",
    "passwd": "password",
    "pwd": "password",
    "passphrase": "passphrase",
    "secret": "secret",
    "token": "token",
    "credential": "credentials",
    "credentials": "credentials",
    "creds": "credentials",
    "apikey": "api_key",
}
# "<qualifier>_key" names a secret key; "sort_key", "primary_key", "routing_key" do not.
_KEY_QUALIFIERS = frozenset(
    [
        "access",
        "account",
        "app",
        "auth",
        "client",
        "encryption",
        "license",
        "master",
        "private",
        "secret",
        "service",
        "session",
        "shared",
        "signing",
        "ssh",
        "storage",
        "subscription",
        "tls",
        "webhook",
    ]
)


@functools.lru_cache(maxsize=4096)
def secret_name(name: str) -> str | None:
    """The pattern name under which a value assigned to ``name`` is masked, or None."""
    words = [word.lower() for word in _WORD_RE.findall(name)]
    if not words:
        return None
    last, before = words[-1], words[:-1]
    if last == "pass":
        return "password" if before else None  # DB_PASS, dbPass; not "pass: 12, fail: 0"
    if last in _LAST_WORD:
        return _LAST_WORD[last]
    if last != "key" or not before:
        return None
    if before[-1] == "api":
        return "api_key"
    if before[-1] == "private":
        return "private_key"
    if before[-2:] == ["secret", "access"] and "aws" in before:
        return "aws_secret_key"
    if before[-1] == "secret":
        return "secret"
    env_style = name.isupper() and "_" in name
    return "key" if env_style or before[-1] in _KEY_QUALIFIERS else None


# --- Placeholders -------------------------------------------------------------------------

# Values that are already hidden or only refer to a secret: leaving them keeps idempotence
# and the evidence ("<set to the key 'password' in secret 'db'>", "${DB_PASSWORD}", "***").
_PLACEHOLDER_WORDS = frozenset({"", "null", "none", "nil", "true", "false", "~", "redacted"})
_PLACEHOLDER_PREFIXES = ("<", "[", "{", "${", "$(", "|", ">", "DATA+OMITTED")
_SIZE_RE = re.compile(r"\d+[ \t]+bytes\b")  # `kubectl describe secret`: "password:  16 bytes"


def is_placeholder(value: str) -> bool:
    bare = value.strip("\\\"' \t")
    return (
        bare.lower() in _PLACEHOLDER_WORDS
        or bare.startswith(_PLACEHOLDER_PREFIXES)
        or set(bare) == {"*"}
    )


def _quoted(key: str, value: str, name: str) -> str:
    """``key`` followed by the marker, in the value's own quoting."""
    quote = next((q for q in ('\\"', '"', "'") if value.startswith(q)), "")
    suffix = ""
    if not quote and key.rstrip(" \t:=").endswith('"'):
        # "password": 1234, -> a JSON scalar ends at , } or ]; keep the JSON valid.
        quote, suffix = '"', value[len(re.split(r"[,}\]]", value, maxsplit=1)[0]) :]
    return f"{key}{quote}{marker(name)}{quote}{suffix}"


def _keeps(name: str, value: str, rest: str) -> bool:
    """True when ``value`` (followed in the text by ``rest``) is evidence, not a secret."""
    if is_placeholder(value):
        return True
    if value.isdigit() and _SIZE_RE.match(value + rest[:12]):
        return True
    # $PWD is the working directory, not a password.
    return name.lower().endswith("pwd") and value.startswith(("/", "~"))


# --- Rules ----------------------------------------------------------------------------------

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
    credential = len(value) >= 6 if has_scheme else len(value) >= 16 and not value.isalpha()
    if is_placeholder(value) or not credential:
        return m.group(0)  # "Authorization: denied for user", "authorization: [MASKED_TOKEN]"
    return m.group("key") + marker("authorization")


# Anchored on "://" (not on the scheme) so a long run of word characters is scanned once.
_URL_PASSWORD_RE = re.compile(r"(?P<key>://[^\s:/@]*:)(?P<value>[^\s/?#]*)(?=@)")
# A key alone in the userinfo: a Sentry DSN (https://<key>@o1.ingest.sentry.io/1), a token
# used as a git user (https://<token>@github.com/…).
_URL_CREDENTIAL_RE = re.compile(r"(?P<key>://)(?P<value>[A-Za-z0-9_-]{16,})(?=@)")


def _url(name: str) -> Callable[[re.Match[str]], str]:
    def replace(m: re.Match[str]) -> str:
        if is_placeholder(m.group("value")):
            return m.group(0)
        return m.group("key") + marker(name)

    return replace


# curl -u user:password / --user user:password
_CURL_USER_RE = re.compile(r"(?P<key>(?<!\S)(?:-u|--user)[ \t]+[^\s:'\"]+:)(?P<value>[^\s'\"]+)")

# A pod spec's env entry: the name says secret, the value is on the next line or after ", ".
_ENV_ENTRY_RE = re.compile(
    rf"""(?P<key>name{_SEP}\\?["']?(?P<name>[\w.-]+)\\?["']?[ \t]*"""
    rf"""(?:,[ \t]*|\r?\n[ \t]*)\\?["']?value{_SEP}){_VALUE}"""
)


def _env_entry(m: re.Match[str]) -> str:
    name, value = m.group("name"), m.group("value")
    if secret_name(name) is None or _keeps(name, value, m.string[m.end() : m.end() + 12]):
        return m.group(0)
    return _quoted(m.group("key"), value, "env_secret_value")


# password: |        (a YAML block scalar: the value is the more-indented lines below)
#   hunter2
_YAML_BLOCK_RE = re.compile(
    rf"^(?P<head>(?P<indent>[ \t]*)(?:-[ \t]+)?(?P<name>{_NAME})[ \t]*:[ \t]*[|>][-+0-9]*[ \t]*\r?\n)"
    r"(?P<body>(?:(?P=indent)[ \t]+[^\n]*(?:\n|\Z)|[ \t]*\r?\n)*)",
    re.M,
)


def _yaml_block(m: re.Match[str]) -> str:
    name = secret_name(m.group("name"))
    if name is None or not m.group("body").strip():
        return m.group(0)
    body_indent = m.group("indent") + "  "
    trailing = "\n" if m.group("body").endswith("\n") else ""
    return f"{m.group('head')}{body_indent}{marker(name)}{trailing}"


# password: my secret phrase   (a plain YAML scalar runs to the end of its line and on
#   which goes on here          over more-indented lines that are not keys themselves)
_YAML_LINE_RE = re.compile(
    rf"^(?P<key>(?P<indent>[ \t]*)(?:-[ \t]+)?(?P<name>{_NAME})[ \t]*:[ \t]+)"
    r"""(?P<value>[^\s"'#{\[|>&*!][^\r\n]*"""
    r"""(?:\r?\n(?P=indent)[ \t]+(?![^\r\n]*:(?:[ \t]|$))[^\s#-][^\r\n]*)*)""",
    re.M,
)
# DB_PASS=x, "clientSecret": "x", password: x (anywhere in a line). Only the name and its
# separator are matched; the value is read after deciding, so a key that is not secret
# ("a" in "a: {password: x}") does not swallow the one inside its value. The name must
# start a word: "/etc/passwd: permission denied" is a path, not a password.
_ASSIGNMENT_KEY_RE = re.compile(rf"(?P<key>(?<![\w./-])(?P<name>{_NAME}){_SEP})")
# --token x, --db-password=x
_FLAG_KEY_RE = re.compile(r"(?P<key>(?<![\w-])--(?P<name>[A-Za-z][\w-]*)(?:=|[ \t]+))")
_VALUE_RE = re.compile(_VALUE)


# After "name: " a bare value is a phrase ("passphrase: correct horse battery staple"),
# in a log line or a string: it runs to the end of the line, a quote, an escape or a ",".
_PHRASE_RE = re.compile(r"""[^\r\n"'\\,;]*""")


def _assignments(key_re: re.Pattern[str]) -> Callable[[str], str]:
    def mask(text: str) -> str:
        out: list[str] = []
        position = 0
        for key in key_re.finditer(text):
            name = key.group("name")
            pattern = secret_name(name)
            if pattern is None or key.start() < position:
                continue
            value = _VALUE_RE.match(text, key.end())
            if value is None:
                continue
            masked = _masked_assignment(
                key.group("key"), name, value, pattern, flag=key_re is _FLAG_KEY_RE
            )
            if masked is not None:
                out += [text[position : key.start()], masked]
                position = value.end()
                if _is_phrase(key.group("key"), value.group("value")):
                    position = _PHRASE_RE.match(text, position).end()
        return "".join(out) + text[position:] if out else text

    return mask


def _is_phrase(key: str, value: str) -> bool:
    bare = not value.startswith(("'", '"', '\\"'))
    json_key = key.rstrip(" \t:=").endswith('"')
    return bare and ":" in key and not json_key


def _masked_assignment(
    key: str, name: str, value_match: re.Match[str], pattern: str, *, flag: bool
) -> str | None:
    value = value_match.group("value")
    if _keeps(name, value, value_match.string[value_match.end() : value_match.end() + 12]):
        return None
    if flag and value.startswith("-"):
        return None  # "--password --other-flag": no value given
    return _quoted(key, value, pattern)


def _yaml_line(m: re.Match[str]) -> str:
    name, value = m.group("name"), m.group("value").rstrip(" \t")
    pattern = secret_name(name)
    if pattern is None or _keeps(name, value, "") or _SIZE_RE.fullmatch(value):
        return m.group(0)
    return m.group("key") + marker(pattern)


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
    (_URL_PASSWORD_RE, _url("password")),
    (_URL_CREDENTIAL_RE, _url("url_credential")),
    (_CURL_USER_RE, _url("password")),
    (_ENV_ENTRY_RE, _env_entry),
    (_YAML_BLOCK_RE, _yaml_block),
    (_YAML_LINE_RE, _yaml_line),
)
_ASSIGNMENT_PASSES = (_assignments(_ASSIGNMENT_KEY_RE), _assignments(_FLAG_KEY_RE))


def mask_patterns(text: str) -> str:
    for pattern, replace in _RULES:
        text = pattern.sub(replace, text)
    for mask in _ASSIGNMENT_PASSES:
        text = mask(text)
    return text


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
