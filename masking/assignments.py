"""Values masked because of the name they are given, in whatever syntax gives it:

- ``name: x``, ``name=x``, ``"name": "x"``, ``name := "x"``, ``name => x``, ``$name = 'x'``
  (YAML, JSON, env files, INI, logfmt, code), ``?name=x&`` (query strings), header lines;
- ``--name x``, ``--name=x``, ``-storepass x`` (command lines);
- YAML values over several lines (``name: |`` blocks, folded scalars);
- a name and its value as two fields: ``{name: DB_PASSWORD, value: x}``,
  ``<add key="DbPassword" value="x"/>``, ``<entry key="password">x</entry>``;
- XML elements: ``<password>x</password>``;
- ``name x`` when x is quoted or random-looking (``password 'x'``, ``token 9hF2…``);
- cookies: every value of a ``Cookie:`` header, the value of a ``Set-Cookie:``.

How sure the name is (masking/names.py) decides which values go: after a strong
name every value but placeholders, after a weak one only random-looking ones.
Every scan here is linear: names are found by regexes that stop at delimiters, and each
value is read once, after the name has been judged.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from masking.names import Strength, classify, is_placeholder, looks_random


def marker(name: str) -> str:
    return f"[MASKED_{name.upper()}]"


# A value after a key: escaped-JSON string, JSON string, single-quoted, backquoted, or a
# bare word. The closing quote is optional so a value cut off by truncation is still
# masked. A quoted YAML scalar may go on over indented continuation lines.
_VALUE = (
    r"""(?P<value>\\"[^"\n]*?\\"|"(?:[^"\\\n]|\\.|\n[ \t]+)*"?|'(?:[^'\n]|\n[ \t]+)*'?"""
    r"""|`[^`\n]*`?|[^\s"'`\\][^\s"'`]*)"""
)
# ":" (YAML, JSON, headers), "=", and the assignment operators of code and build files.
_SEP = r"""\\*["'`]?[ \t]*(?:=>|[:?+.]{1,3}=|!={1,2}|={1,3}|->|:)[ \t]*"""
_NAME = r"[A-Za-z_][\w.-]*"
_VALUE_RE = re.compile(_VALUE)
_SIZE_RE = re.compile(r"\d+[ \t]+bytes\b")  # `kubectl describe secret`: "password:  16 bytes"


# An object's printed form, not a value: Token{a64f992 …}, android.os.BinderProxy@2bd79ce.
# A space may come before "{" or "(" only: "password=Zq7x… [MASKED_…]" (a token masked
# after it) or "password=Secret1 [prod]" is a value and a bracket, not a repr.
_REPR_RE = re.compile(r"[A-Z][\w$]{2,}(?:[{(\[]| [{(])")
_OBJECT_REF_RE = re.compile(r"[a-z_]\w*(?:\.[\w$]+)+@[0-9a-f]+")
# A version or a version range (a package's, after a name such as "jsonwebtoken").
_VERSION_RE = re.compile(r"""\\?["']?[~^<>=]{0,2}v?\d+(?:\.[\dx*]+)+(?:-[\w.]+)?\\?["',]*\Z""")


def _keeps(name: str, value: str, rest: str, strength: Strength) -> bool:
    """True when ``value`` (followed in the text by ``rest``) is evidence, not a secret."""
    if is_placeholder(value) or _VERSION_RE.match(value) or _OBJECT_REF_RE.fullmatch(value):
        return True
    if _REPR_RE.match(value + rest[:2]):
        return True
    if strength is Strength.WEAK:
        return not looks_random(value)
    if value.isdigit() and _SIZE_RE.match(value + rest[:12]):
        return True
    # $PWD is the working directory, not a password.
    return name.lower().endswith("pwd") and value.startswith(("/", "~"))


def _quoted(key: str, value: str, name: str) -> str:
    """``key`` followed by the marker, in the value's own quoting."""
    quote = next((q for q in ('\\"', '"', "'", "`") if value.startswith(q)), "")
    suffix = ""
    if not quote and key.rstrip(" \t:=").endswith('"'):
        # "password": 1234, -> a JSON scalar ends at , } or ]; keep the JSON valid.
        quote, suffix = '"', value[len(re.split(r"[,}\]]", value, maxsplit=1)[0]) :]
    return f"{key}{quote}{marker(name)}{quote}{suffix}"


# --- key: value, key=value, --flag value ---------------------------------------------------

# Only the name and its separator are matched; the value is read after deciding, so a key
# that is not secret ("a" in "a: {password: x}") does not swallow the one inside its value.
# The name must start a word: "/etc/passwd: permission denied" is a path, not a password.
_ASSIGNMENT_KEY_RE = re.compile(rf"(?P<key>(?<![\w./-])(?P<name>{_NAME}){_SEP})")
# --token x, --db-password=x, -storepass x (a single dash only before a long name)
_FLAG_KEY_RE = re.compile(
    r"(?P<key>(?<![\w-])(?:--(?P<name>[A-Za-z][\w-]*)|-(?P<short>[A-Za-z][\w-]{3,}))(?:=|[ \t]+))"
)
# After "name: " a bare value is a phrase ("passphrase: correct horse battery staple"),
# in a log line or a string: it runs to the end of the line, a quote, an escape or a ",".
_PHRASE_RE = re.compile(r"""[^\r\n"'\\,;]*""")
# In a query string or a cookie a bare value ends at the next parameter.
_QUERY_END_RE = re.compile(r"[&#;]")


def _assignments(key_re: re.Pattern[str], *, flags: bool) -> Callable[[str], str]:
    def mask(text: str) -> str:
        out: list[str] = []
        position = 0
        for key in key_re.finditer(text):
            name = (key.group("name") or key.group("short")) if flags else key.group("name")
            verdict = classify(name)
            if verdict is None or key.start() < position:
                continue
            value = _VALUE_RE.match(text, key.end())
            if value is None:
                continue
            end = value.end()
            raw = value.group("value")
            if key.start() and text[key.start() - 1] in "?&#;" and not raw.startswith(("'", '"')):
                cut = _QUERY_END_RE.search(raw)
                if cut:
                    raw, end = raw[: cut.start()], value.start() + cut.start()
            masked = _masked_value(key.group("key"), name, raw, text[end : end + 12], verdict)
            if masked is None or (flags and raw.startswith("-")):
                continue  # "--password --other-flag": no value given
            out += [text[position : key.start()], masked]
            position = end
            if verdict[1] is Strength.STRONG and _is_phrase(key.group("key"), raw):
                phrase = _PHRASE_RE.match(text, position)
                assert phrase is not None  # "[...]*" matches everywhere
                position = phrase.end()
        return "".join(out) + text[position:] if out else text

    return mask


def _masked_value(
    key: str, name: str, value: str, rest: str, verdict: tuple[str, Strength]
) -> str | None:
    pattern, strength = verdict
    if _keeps(name, value, rest, strength):
        return None
    return _quoted(key, value, pattern)


def _is_phrase(key: str, value: str) -> bool:
    bare = not value.startswith(("'", '"', "\\", "`"))
    json_key = key.rstrip(" \t:=").endswith('"')
    return bare and ":" in key and not json_key


# --- name x (no separator) ------------------------------------------------------------------

# "password 'hunter2'", "using token 9hF2kQ0zT1bW7xLmPq3R": only words with a secret word
# in them are looked at, and only a quoted value (after a strong name) or a random-looking
# one is masked, so "password authentication failed" stays. The words are found from the
# secret words in them, each word once.
_STEMS = r"pass|pw|secret|token|key|auth|cred|sig|session|cookie|otp|salt|seed|bearer"
# A word holding a secret word, then blanks: the look-ahead finds the secret word within
# the word, and the possessive word cannot be re-scanned, so each word costs one pass.
_SPACED_KEY_RE = re.compile(
    rf"(?<![\w./-])(?=[\w.-]*?(?:{_STEMS}))(?P<name>[\w.-]++)(?P<gap>[ \t]+)", re.I
)
_SPACED_VALUE_RE = re.compile(r"""(?P<value>"[^"\n]*"|'[^'\n]*'|[^\s"'`,;]+)""")


def _spaced(text: str) -> str:
    out: list[str] = []
    done = 0  # text[:done] is in out
    for key in _SPACED_KEY_RE.finditer(text):
        if key.start() < done:
            continue
        verdict = classify(key.group("name"))
        value = _SPACED_VALUE_RE.match(text, key.end()) if verdict else None
        if verdict is None or value is None:
            continue
        raw = value.group("value")
        quoted = raw[:1] in ("'", '"') and len(raw) > 2
        inner = raw[1:-1] if quoted else raw
        if is_placeholder(inner) or classify(inner.strip(":=")) is not None:
            continue  # "token [MASKED_TOKEN]", "api key secret"
        # A quoted word after "secret" or "token" is often a name (secret "db-tls" not
        # found); after "password" it is the password.
        says_password = verdict == ("password", Strength.STRONG) or verdict[0] == "passphrase"
        if not (looks_random(inner) or (quoted and says_password)):
            continue
        out += [text[done : key.end()], _quoted("", raw, verdict[0])]
        done = value.end()
    return "".join(out) + text[done:] if out else text


# --- YAML values over several lines ---------------------------------------------------------

# password: |        (a YAML block scalar: the value is the more-indented lines below)
#   hunter2
_YAML_BLOCK_RE = re.compile(
    rf"^(?P<head>(?P<indent>[ \t]*)(?:-[ \t]+)?(?P<name>{_NAME})[ \t]*:[ \t]*[|>][-+0-9]*[ \t]*\r?\n)"
    r"(?P<body>(?:(?P=indent)[ \t]+[^\n]*(?:\n|\Z)|[ \t]*\r?\n)*)",
    re.M,
)


def _yaml_block(m: re.Match[str]) -> str:
    verdict = classify(m.group("name"))
    body = m.group("body")
    if verdict is None or not body.strip():
        return m.group(0)
    if verdict[1] is Strength.WEAK and not looks_random("".join(body.split())):
        return m.group(0)
    body_indent = m.group("indent") + "  "
    trailing = "\n" if body.endswith("\n") else ""
    return f"{m.group('head')}{body_indent}{marker(verdict[0])}{trailing}"


# password: my secret phrase   (a plain YAML scalar runs to the end of its line and on
#   which goes on here          over more-indented lines that are not keys themselves)
_YAML_LINE_RE = re.compile(
    rf"^(?P<key>(?P<indent>[ \t]*)(?:-[ \t]+)?(?P<name>{_NAME})[ \t]*:[ \t]+)"
    r"""(?P<value>[^\s"'#{\[|>&*!][^\r\n]*"""
    r"""(?:\r?\n(?P=indent)[ \t]+(?![^\r\n]*:(?:[ \t]|$))[^\s#-][^\r\n]*)*)""",
    re.M,
)


def _yaml_line(m: re.Match[str]) -> str:
    name, value = m.group("name"), m.group("value").rstrip(" \t")
    verdict = classify(name)
    if verdict is None or verdict[1] is Strength.WEAK:
        return m.group(0)  # one word at most: the key=value pass judges it
    if _keeps(name, value, "", Strength.STRONG) or _SIZE_RE.fullmatch(value):
        return m.group(0)
    return m.group("key") + marker(verdict[0])


# --- a name and its value as two fields -----------------------------------------------------

# A pod spec's env entry ({name: API_TOKEN, value: x}, or value on the next line), a
# .NET/Java config entry (<add key="DbPassword" value="x"/>, <property name=… value=…>).
_PAIR_RE = re.compile(
    rf"""(?P<key>(?<![\w-])(?:name|key){_SEP}\\?["']?(?P<name>[\w.-]+)\\?["']?[ \t]*"""
    rf"""(?:,[ \t]*|\r?\n[ \t]*|[ \t]+)\\?["']?value{_SEP}){_VALUE}"""
)
# <entry key="password">x</entry>
_PAIR_ELEMENT_RE = re.compile(
    r"""(?P<key><(?P<tag>[A-Za-z][\w.:-]*)[ \t]+(?:name|key)[ \t]*=[ \t]*["'](?P<name>[\w.-]+)["']"""
    r"""[^<>]*>)(?P<value>[^<]*)(?=</(?P=tag)>)"""
)
# <password>x</password>
_ELEMENT_RE = re.compile(
    r"""(?P<key><(?P<name>[A-Za-z_][\w.:-]*)(?:[ \t][^<>]*)?>)(?P<value>[^<]*)(?=</(?P=name)>)"""
)


def _pair(m: re.Match[str]) -> str:
    name, value = m.group("name"), m.group("value")
    verdict = classify(name)
    rest = m.string[m.end() : m.end() + 12]
    if verdict is None or _keeps(name, value, rest, verdict[1]):
        return m.group(0)
    return _quoted(m.group("key"), value, "env_secret_value")


def _element(m: re.Match[str]) -> str:
    name, value = m.group("name").rpartition(":")[2], m.group("value")
    verdict = classify(name)
    if verdict is None or not value.strip() or _keeps(name, value.strip(), "", verdict[1]):
        return m.group(0)
    lead = value[: len(value) - len(value.lstrip())]
    trail = value[len(value.rstrip()) :]
    return f"{m.group('key')}{lead}{marker(verdict[0])}{trail}"


# --- cookies --------------------------------------------------------------------------------

# Cookie: a=1; b=2 (every value is a credential or may be) and Set-Cookie: a=1; Path=/
# (its first pair; the rest are attributes), as headers, JSON fields or curl's -b.
_COOKIE_RE = re.compile(
    r"""(?P<key>(?:(?<![\w-])(?P<set>set-)?cookie\\*["']?[ \t]*[:=][ \t]*\\*["']?"""
    r"""|(?<![\w-])(?P<flag>-b|--cookie)[ \t]+["']?))(?P<value>[^\r\n"'\\]*)""",
    re.I,
)
_COOKIE_PAIR_RE = re.compile(r"(?P<name>[^=;,\s]+)=(?P<value>[^;,\s]*)")


def _cookie(m: re.Match[str]) -> str:
    value = m.group("value")
    if "=" not in value:
        return m.group(0)  # "cookie: expired", curl -b cookies.txt
    window = max(0, m.start() - 1000)  # bounded: a line of a thousand "-b"s stays linear
    line_start = m.string.rfind("\n", window, m.start()) + 1
    if m.group("flag") == "-b" and "curl" not in m.string[max(line_start, window) : m.start()]:
        return m.group(0)  # ldapsearch -b dc=example: a base DN, not curl's cookies

    def pair(p: re.Match[str]) -> str:
        if p.start() and m.group("set"):
            return p.group(0)  # Path=/, Expires=…
        if is_placeholder(p.group("value")) or not p.group("value"):
            return p.group(0)
        return f"{p.group('name')}={marker('session')}"

    return m.group("key") + _COOKIE_PAIR_RE.sub(pair, value)


# --- all of it ------------------------------------------------------------------------------

_RULES: tuple[tuple[re.Pattern[str], Callable[[re.Match[str]], str]], ...] = (
    (_COOKIE_RE, _cookie),
    (_PAIR_RE, _pair),
    (_PAIR_ELEMENT_RE, _pair),
    (_ELEMENT_RE, _element),
    (_YAML_BLOCK_RE, _yaml_block),
    (_YAML_LINE_RE, _yaml_line),
)
_PASSES = (
    _assignments(_ASSIGNMENT_KEY_RE, flags=False),
    _assignments(_FLAG_KEY_RE, flags=True),
    _spaced,
)


# Literal words without which a rule cannot match: skipping the rule costs a scan in C.
_NEEDS = {_COOKIE_RE: ("ookie", "OOKIE", "-b"), _PAIR_RE: ("alue",), _PAIR_ELEMENT_RE: ("</",)}


def mask_assignments(text: str) -> str:
    for pattern, replace in _RULES:
        needs = _NEEDS.get(pattern)
        if needs is None or any(word in text for word in needs):
            text = pattern.sub(replace, text)
    for mask in _PASSES:
        text = mask(text)
    return text
