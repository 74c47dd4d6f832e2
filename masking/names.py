"""Which names hold secrets, and which values look like one.

A name (``DB_PASSWORD_2``, ``clientSecret``, ``X-Api-Key``, ``storepass``) is split into
words and judged by its last word, after dropping words that only number or qualify a
value (``2``, ``v2``, ``old``, ``b64``, ``encrypted``):

- **strong**: the name says the value is a secret (``password``, ``secret``, ``token``,
  ``api_key``, ``signing_key``…). Every value is masked but placeholders and evidence.
- **weak**: the name might hold one (``key``, ``auth``, ``sig``, ``session``, ``pass``,
  ``sk``; or a secret word anywhere but last, as in ``token_hash``). The value is masked
  only when it looks random (:func:`looks_random`): ``key: password`` stays,
  ``key: 9hF2kQ0zT1bW7xLmPq3R`` does not.

Names that say something *about* a secret (``password_file``, ``token_url``,
``secret_name``, ``tokens``) are neither: their values are evidence.
"""

from __future__ import annotations

import enum
import functools
import math
import re
from collections import Counter


class Strength(enum.Enum):
    STRONG = "strong"
    WEAK = "weak"


# Last word → the marker's name.
_STRONG_WORDS = {
    "password": "password",
    "passwd": "password",
    "pwd": "password",
    "pw": "password",
    "pswd": "password",
    "psw": "password",
    "passw": "password",
    "pword": "password",
    "passcode": "password",
    "passphrase": "passphrase",
    "secret": "secret",
    "token": "token",
    "credential": "credentials",
    "credentials": "credentials",
    "creds": "credentials",
    "apikey": "api_key",
}
# One-word compounds, as flags and config keys write them (``storepass``, ``authtoken``,
# ``dbpassword``, ``secretkey``): their ending decides.
_STRONG_ENDINGS = (
    ("password", "password"),
    ("passwd", "password"),
    ("passphrase", "passphrase"),
    ("secret", "secret"),
    ("token", "token"),
    ("credentials", "credentials"),
    ("apikey", "api_key"),
    ("privatekey", "private_key"),
    ("secretkey", "secret"),
    ("accesskey", "key"),
    ("authkey", "key"),
    ("masterkey", "key"),
    ("signingkey", "key"),
    ("sessionkey", "key"),
    ("pass", "password"),  # storepass, keypass, requirepass; see _NOT_PASS
)
_NOT_PASS = frozenset(
    {"bypass", "compass", "surpass", "trespass", "overpass", "underpass", "multipass", "sass"}
)
# "<qualifier>_key" names a secret key; "sort_key", "primary_key", "routing_key" do not.
_KEY_QUALIFIERS = frozenset(
    {
        "access",
        "account",
        "app",
        "auth",
        "client",
        "consumer",
        "decryption",
        "encryption",
        "hmac",
        "license",
        "master",
        "private",
        "secret",
        "session",
        "shared",
        "signing",
        "ssh",
        "storage",
        "subscription",
        "tls",
        "webhook",
        "write",
    }
)
# Words that might name a secret: the value decides. Word → the marker's name.
_WEAK_WORDS = {
    "key": "key",
    "auth": "auth",
    "pass": "password",
    "sig": "signature",
    "signature": "signature",
    "sk": "secret",
    "jsessionid": "session",
    "phpsessid": "session",
    "cookie": "session",
    "cred": "credentials",
    "private": "secret",
    "seed": "secret",
    "salt": "secret",
    "otp": "secret",
    "hmac": "secret",
    "psk": "secret",
    "license": "secret",
    "community": "secret",
    "bearer": "token",
}
# Words after the one that matters that do not change what the value is.
_VALUE_WORDS = frozenset(
    {
        "old",
        "new",
        "prev",
        "previous",
        "current",
        "orig",
        "original",
        "primary",
        "secondary",
        "backup",
        "alt",
        "b64",
        "base64",
        "enc",
        "encoded",
        "encrypted",
        "raw",
        "plain",
        "plaintext",
        "value",
        "val",
        "str",
        "string",
        "override",
        "default",
        "hash",
        "hashed",
    }
)
_WORD_RE = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")
_VERSION_RE = re.compile(r"v?\d+")


def _words(name: str) -> list[str]:
    return [word.lower() for word in _WORD_RE.findall(name)]


@functools.lru_cache(maxsize=8192)
def classify(name: str) -> tuple[str, Strength] | None:
    """The marker name for a value assigned to ``name``, and how sure the name is."""
    words = _words(name)
    while len(words) > 1 and (_VERSION_RE.fullmatch(words[-1]) or words[-1] in _VALUE_WORDS):
        words.pop()
    if not words:
        return None
    strong = _strong(name, words)
    if strong is not None:
        return strong, Strength.STRONG
    last = words[-1]
    if last in _WEAK_WORDS:
        return _WEAK_WORDS[last], Strength.WEAK
    for word in words:
        if word in _STRONG_WORDS:
            return _STRONG_WORDS[word], Strength.WEAK  # token_hash, password_digest
    return None


def _strong(name: str, words: list[str]) -> str | None:
    last, before = words[-1], words[:-1]
    if last == "pass":
        return "password" if before else None  # DB_PASS, dbPass; not "pass: 12, fail: 0"
    if last in _STRONG_WORDS:
        return _STRONG_WORDS[last]
    if last == "key" and before:
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
    if last in _NOT_PASS or len(last) <= 4:
        return None
    for ending, pattern in _STRONG_ENDINGS:
        if last.endswith(ending):
            return pattern
    return None


# --- Values ----------------------------------------------------------------------------------

# Values that are already hidden or only refer to a secret: leaving them keeps idempotence
# and the evidence ("<set to the key 'password' in secret 'db'>", "${DB_PASSWORD}", "***").
_PLACEHOLDER_WORDS = frozenset({"", "null", "none", "nil", "true", "false", "~", "redacted"})
_PLACEHOLDER_PREFIXES = ("<", "[", "{", "${", "$(", "|", ">", "DATA+OMITTED")


def is_placeholder(value: str) -> bool:
    bare = value.strip("\\\"'` \t")
    return (
        bare.lower() in _PLACEHOLDER_WORDS
        or bare.startswith(_PLACEHOLDER_PREFIXES)
        or set(bare) == {"*"}
    )


_NOT_RANDOM_RE = re.compile(
    r"""
    \d{4}-\d\d-\d\d(?:[T ][\d:.]+)?(?:Z|[+-]\d\d:?\d\d)?   # a date or a timestamp
    | v?\d+(?:\.\d+)+(?:[-+][\w.-]*)?                     # a version
    | [\d.:_/-]+                                          # numbers, addresses, times, ids
    | [A-Za-z]+(?:[-_./][A-Za-z]+)*                       # words: my-db-secret, text/plain
    | (?:[a-z]+[-_])+[a-z0-9]{0,10}                       # names: payments-db-7d9c
    """,
    re.X,
)
_LOWER_RUN_RE = re.compile(r"[a-z]{7}")
_HEX_RE = re.compile(r"[0-9a-fA-F]+(?:-[0-9a-fA-F]+)*")
_PERCENT_RE = re.compile(r"%[0-9A-Fa-f]{2}")


def entropy(text: str) -> float:
    """Shannon entropy in bits per character."""
    counts = Counter(text)
    total = len(text)
    return -sum(n / total * math.log2(n / total) for n in counts.values())


def looks_random(value: str) -> bool:
    """Whether ``value`` reads like a generated credential rather than a word, a name, a
    number, a path or a URL: long enough, no spaces, and characters spread like random
    ones (hex ids and UUIDs count: API keys are often written so)."""
    bare = value.strip("\\\"'`")
    if "%" in bare:
        bare = _PERCENT_RE.sub("x", bare)  # a URL-encoded value: %2B is one character
    if not 12 <= len(bare) <= 4096 or any(c.isspace() for c in bare):
        return False
    if is_placeholder(bare) or bare.startswith(("/", "~", "./", "../")) or "://" in bare:
        return False
    if "=" in bare.rstrip("=") or "\\" in bare or "[MASKED_" in bare:
        return False  # assignments (a=1; b=2) or escaped text, not one value; or masked
    if _NOT_RANDOM_RE.fullmatch(bare):
        return False
    if not any(c.isdigit() for c in bare) or _LOWER_RUN_RE.search(bare):
        # Generated tokens hold digits and seldom seven lowercase letters in a row (under
        # 1% of 40 random characters); words, selectors and dotted names do.
        return False
    if _HEX_RE.fullmatch(bare):
        return len(bare.replace("-", "")) >= 16
    classes = (
        any(c.islower() for c in bare)
        + any(c.isupper() for c in bare)
        + any(c.isdigit() for c in bare)
        + any(not c.isalnum() for c in bare)
    )
    return classes >= 2 and entropy(bare) >= 3.0
