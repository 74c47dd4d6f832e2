"""Secrets inside encodings, to any depth: each encoded piece is decoded, masked like any
text (which decodes what it holds in turn), and put back.

- **JSON strings that hold escaped text** (``"{\\"password\\": \\"x\\"}"``, and that
  inside another such string): unescaped, masked, escaped again.
- **base64** (``auth: dXNlcjpodW50ZXIy``, a ``.dockerconfigjson``, a Secret's value
  outside a Secret, a private key's body without its ``-----BEGIN`` lines): a blob whose
  decoded form holds a secret, is ``user:password``, or is key material (DER private keys,
  OpenSSH keys) becomes ``[MASKED_ENCODED_SECRET]`` or ``[MASKED_PRIVATE_KEY]``.
- **percent-encoding** (``redirect=https%3A%2F%2Fu%3Apw%40host``, ``%22password%22``).

Work stays linear in the input: each decoding shrinks its text (base64 by a quarter,
escapes and percent-encoding by at least a character each), the depth is capped, and
only pieces that can hold something are decoded (a JSON string with an escaped quote or
backslash, a base64 run whose bytes are mostly text or start like a key).
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable
from urllib.parse import quote, unquote

MAX_DEPTH = 8
Mask = Callable[[str], str]

ENCODED = "[MASKED_ENCODED_SECRET]"
PRIVATE_KEY = "[MASKED_PRIVATE_KEY]"


# --- JSON strings holding escaped text -------------------------------------------------------

# The closing quote is optional and the loop possessive: a string left open runs to the end
# of its line once, instead of every quote in the line starting a scan to its end.
_JSON_STRING_RE = re.compile(r'"(?P<body>(?:[^"\\\n]|\\.)*+)(?P<close>"?)')
# A surrogate pair is one character; a lone surrogate cannot be written as UTF-8, so it
# becomes U+FFFD if the string has to be written again.
_ESCAPE_RE = re.compile(
    r"\\u([dD][89abAB][0-9a-fA-F]{2})\\u([dD][c-fC-F][0-9a-fA-F]{2})|\\u([0-9a-fA-F]{4})|\\(.)",
    re.S,
)
_UNESCAPES = {'"': '"', "\\": "\\", "/": "/", "n": "\n", "r": "\r", "t": "\t", "b": "\b", "f": "\f"}
_TO_ESCAPE_RE = re.compile(r'["\\\x00-\x1f]')
_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _unescape(body: str) -> str:
    def one(m: re.Match[str]) -> str:
        high, low, code, char = m.groups()
        if high:
            return (
                (chr(int(high, 16)) + chr(int(low, 16)))
                .encode("utf-16", "surrogatepass")
                .decode("utf-16")
            )
        if code:
            value = int(code, 16)
            return "\ufffd" if 0xD800 <= value <= 0xDFFF else chr(value)
        return _UNESCAPES.get(char, m.group())  # \x41, \' … kept as written

    return _ESCAPE_RE.sub(one, body)


def _escape(text: str) -> str:
    return _TO_ESCAPE_RE.sub(lambda m: _ESCAPES.get(m.group(), f"\\u{ord(m.group()):04x}"), text)


def _json_strings(text: str, mask: Mask) -> str:
    def replace(m: re.Match[str]) -> str:
        literal = m.group()
        if "\\" not in literal:
            return literal  # nothing escaped: the outer text's own passes see it whole
        inner = _unescape(m.group("body"))
        masked = mask(inner)
        return literal if masked == inner else f'"{_escape(masked)}{m.group("close")}'

    return _JSON_STRING_RE.sub(replace, text)


# --- base64 ----------------------------------------------------------------------------------

# One run of base64 or base64url, or several lines of it (a key body wrapped at 64).
_BASE64_RE = re.compile(
    r"(?<![A-Za-z0-9+/_-])"
    r"(?:[A-Za-z0-9+/_-]{16,}={0,2}(?:[ \t]*\r?\n[ \t]*(?=[A-Za-z0-9+/]{4})(?![A-Za-z0-9_-]*:)))*"
    r"[A-Za-z0-9+/_-]{12,}={0,2}"
    r"(?![A-Za-z0-9+/_=-])"
)
_WHITESPACE_RE = re.compile(r"\s+")
# DER: SEQUENCE { INTEGER 0|1, … } (PKCS#1 RSA/DSA, SEC1 EC, PKCS#8), or an encrypted
# PKCS#8 key (SEQUENCE { SEQUENCE { OID pbes2 … } }); OpenSSH's own format.
_DER_KEY_RE = re.compile(rb"\A0(?:[\x00-\x7f]|\x81.|\x82..)\x02\x01[\x00\x01]", re.S)
_PBES2 = b"\x06\x09\x2a\x86\x48\x86\xf7\x0d\x01\x05\x0d"
_OPENSSH = b"openssh-key-v1\x00"
_USER_PASSWORD_RE = re.compile(r"[^\s:/@]{1,128}:[^\s]{3,}")
_TEXT_BYTES = frozenset(range(0x20, 0x7F)) | {0x09, 0x0A, 0x0D}


def _decode(blob: str) -> bytes | None:
    compact = _WHITESPACE_RE.sub("", blob)
    alphabet = b"-_" if ("-" in compact or "_" in compact) else None
    if alphabet and ("+" in compact or "/" in compact):
        return None
    padded = compact.rstrip("=")
    padded += "=" * (-len(padded) % 4)
    try:
        if alphabet:
            return base64.urlsafe_b64decode(padded)
        return base64.b64decode(padded, validate=True)
    except (binascii.Error, ValueError):
        return None


def _is_key_material(data: bytes) -> bool:
    return (
        data.startswith(_OPENSSH)
        or bool(_DER_KEY_RE.match(data))
        or (data[:1] == b"0" and _PBES2 in data[:32])
    )


def _as_text(data: bytes) -> str | None:
    """The decoded bytes as text, when they are text (not a hash, an image, a key)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    printable = sum(c.isprintable() or c in "\t\r\n" for c in text)
    return text if printable >= 0.95 * len(text) else None


def _base64(text: str, mask: Mask) -> str:
    def replace(m: re.Match[str]) -> str:
        blob = m.group()
        if blob.islower() or blob.isupper():
            return blob  # words, names, paths, hex: base64 of anything mixes cases
        data = _decode(blob)
        if data is None:
            return blob
        if _is_key_material(data):
            return PRIVATE_KEY
        inner = _as_text(data)
        if inner is None or not any(c.isalpha() for c in inner):
            return blob
        if "://" not in inner and _USER_PASSWORD_RE.fullmatch(inner.strip()):
            return ENCODED  # user:password, as Basic auth and registry "auth" fields hold it
        return ENCODED if mask(inner) != inner else blob

    return _BASE64_RE.sub(replace, text)


# --- percent-encoding ------------------------------------------------------------------------

_PERCENT_RE = re.compile(r"%[0-9A-Fa-f]{2}")
_URL_CHARS_RE = re.compile(r"""[^\s"'<>`]*""")


def _percent(text: str, mask: Mask) -> str:
    """Each run of URL characters holding a %XX escape, once."""
    out: list[str] = []
    done = 0
    for escape in _PERCENT_RE.finditer(text):
        if escape.start() < done:
            continue
        start = escape.start()
        while start > done and text[start - 1] not in " \t\r\n\"'<>`":
            start -= 1
        run = _URL_CHARS_RE.match(text, escape.end())
        assert run is not None  # "[...]*" matches everywhere
        end = run.end()
        token = text[start:end]
        inner = unquote(token)
        masked = mask(inner) if inner != token else inner
        if masked != inner:
            # Encoded again as it was: what the token wrote plainly stays plain, the marker
            # stays readable.
            plain = "".join(set(_PERCENT_RE.sub("", token))) + "[]_"
            token = quote(masked, safe=plain)
        out += [text[done:start], token]
        done = end
    return "".join(out) + text[done:] if out else text


def mask_escaped(text: str, mask: Mask) -> str:
    """Mask what the JSON strings of ``text`` hold escaped; ``mask`` masks an unescaped
    string (and recurses). Runs before the text's own passes, which would misread a
    deeper level's escaped quotes."""
    return _json_strings(text, mask) if "\\" in text else text


def _key_material(m: re.Match[str]) -> str:
    blob = m.group()
    if blob.islower() or blob.isupper():
        return blob
    data = _decode(blob)
    return PRIVATE_KEY if data is not None and _is_key_material(data) else blob


def mask_key_material(text: str) -> str:
    """Replace base64 runs that are private keys, before any other pass: a token shape
    found inside a key's body would cut it in two, and neither half would decode as a
    key."""
    return _BASE64_RE.sub(_key_material, text)


def mask_encoded(text: str, mask: Mask) -> str:
    """Mask what ``text`` holds in base64 or percent-encoding; ``mask`` masks a decoded
    piece (and recurses)."""
    text = _base64(text, mask)
    return _percent(text, mask) if "%" in text else text
