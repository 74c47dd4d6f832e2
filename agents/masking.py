"""One place that masks secrets in MCP tool results and alert data.

Whatever an MCP server returns goes to the LLM provider, the database and every browser
watching the session, so it is masked once, before any of them sees it. Two passes:

1. Kubernetes Secrets, structurally: a JSON or YAML document with ``kind: Secret`` objects
   keeps its keys (the LLM may need to know that ``password`` exists) but every value under
   ``data``/``stringData`` becomes ``[MASKED_SECRET_VALUE]``. ConfigMaps are not touched.
2. Regex patterns (``PATTERN_NAMES``), each value replaced by ``[MASKED_<NAME>]`` while the
   key or label before it stays, so the text still reads as evidence.

The patterns are deliberately narrow: log lines such as "password authentication failed",
"DATABASE_PASSWORD is not set" or "token expired" are how an investigation finds the cause,
so only a value after ``:``/``=`` (or a token with a recognisable shape) is masked.
Every regex is linear-time: no nested quantifiers, and each scan stops at a delimiter.
"""

from __future__ import annotations

import itertools
import json
import logging
import re
from collections.abc import Callable
from typing import Any

import yaml

logger = logging.getLogger(__name__)

SECRET_VALUE_MARKER = "[MASKED_SECRET_VALUE]"
WITHHELD_NOTICE = "[MASKED: the tool result could not be checked for secrets, so it was withheld]"

# Each masks a value as "[MASKED_<NAME>]"; "password" also covers URL userinfo, "token" also
# "Bearer <token>" and "--token <token>", "env_secret_value" a pod spec's {name: DB_PASSWORD,
# value: ...} env entry.
# fmt: off
PATTERN_NAMES: tuple[str, ...] = (
    "private_key", "ssh_private_key", "certificate", "kubeconfig_data", "aws_access_key",
    "github_token", "slack_token", "jwt", "token", "password", "env_secret_value", "api_key",
    "aws_secret_key", "secret",
)
# fmt: on


def mask_tool_result(text: str) -> str:
    """Fail closed: a tool result that could not be checked is withheld, never passed on."""
    try:
        return _mask(text)
    except Exception as exc:
        # Only the type: exception messages (YAML errors, for one) quote the input.
        logger.error("Masking a tool result failed (%s); it was withheld.", type(exc).__name__)
        return WITHHELD_NOTICE


def mask_alert(text: str) -> str:
    """Fail open: the alert is the reason the session exists; losing it loses the session."""
    try:
        return _mask(text)
    except Exception as exc:
        logger.warning("Masking alert data failed (%s); used it unmasked.", type(exc).__name__)
        return text


def _mask(text: str) -> str:
    return _mask_patterns(_mask_k8s_secrets(text))


# --- Pass 1: Kubernetes Secrets -------------------------------------------------------------

_SECRET_KIND_RE = re.compile(r"""kind\\?["']?[ \t]*:[ \t]*\\?["']?Secret(?:List)?\b""")
# Only a text that starts like a YAML document is worth handing to the YAML parser.
_LOOKS_LIKE_YAML_RE = re.compile(r"""\A\s*(?:---|-[ \t]|[\w"'./-][^\n:]*:(?:\s|\Z))""")
# Above these sizes the linear text fallback masks instead. YAML objects are built in Python
# even with libyaml (~20 µs a node): 128 KiB of tiny nodes still parses in under 0.5 s.
_YAML_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_YAML_DUMPER: Any = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
_MAX_JSON_CHARS = 8 * 1024 * 1024
_MAX_YAML_CHARS = 128 * 1024 if _YAML_LOADER is not yaml.SafeLoader else 32 * 1024
_YAML_STYLE: dict[str, Any] = {"sort_keys": False, "allow_unicode": True}
_MAX_DEPTH = 4  # Secrets inside strings inside documents (last-applied-configuration)


def _mask_k8s_secrets(text: str, depth: int = 0) -> str:
    if not _SECRET_KIND_RE.search(text):
        return text  # the common case: nothing is parsed or re-serialized
    parsed = _parse(text) if depth <= _MAX_DEPTH else None
    if parsed is None:
        return _mask_secret_chunks(text)
    fmt, docs = parsed
    if not _mask_tree(docs, depth, set()):
        # "kind: Secret" was seen but no Secret object was found: mask textually anyway.
        return _mask_secret_chunks(text)
    if fmt == "json":  # an embedded JSON string (depth > 0) stays on one line, like kubectl's
        layout: dict[str, Any] = {"separators": (",", ":")} if depth else {"indent": 2}
        out = json.dumps(docs[0], ensure_ascii=False, **layout)
    else:
        out = yaml.dump_all(docs, Dumper=_YAML_DUMPER, explicit_start=len(docs) > 1, **_YAML_STYLE)
    return out + "\n" if text.endswith("\n") and not out.endswith("\n") else out


def _parse(text: str) -> tuple[str, list[Any]] | None:
    try:
        if text.lstrip()[:1] in ("{", "[") and len(text) <= _MAX_JSON_CHARS:
            return "json", [json.loads(text)]
        if len(text) <= _MAX_YAML_CHARS and _LOOKS_LIKE_YAML_RE.match(text):
            docs = list(yaml.load_all(text, Loader=_YAML_LOADER))
            # A plain-text scalar is not a document; the textual fallback handles it.
            if all(doc is None or isinstance(doc, dict | list) for doc in docs):
                return "yaml", docs
    except (ValueError, yaml.YAMLError, RecursionError):
        pass  # truncated or not a document: the textual fallback still masks it
    return None


def _mask_tree(node: Any, depth: int, seen: set[int]) -> bool:
    """Mask Secret objects anywhere in the tree in place; True if anything changed."""
    if not isinstance(node, dict | list) or id(node) in seen:
        return False
    seen.add(id(node))  # YAML aliases can make a small document a huge graph
    changed = False
    if isinstance(node, dict) and node.get("kind") == "Secret":
        for field in ("data", "stringData"):
            values = node.get(field)
            if isinstance(values, dict):
                for key, value in values.items():
                    changed |= value != SECRET_VALUE_MARKER
                    values[key] = SECRET_VALUE_MARKER
            elif values is not None and values != SECRET_VALUE_MARKER:
                node[field], changed = SECRET_VALUE_MARKER, True
    items = node.items() if isinstance(node, dict) else enumerate(node)
    for key, value in list(items):
        if isinstance(value, str) and _SECRET_KIND_RE.search(value):
            masked = _mask_k8s_secrets(value, depth + 1)
            if masked != value:
                node[key], changed = masked, True
        else:
            changed |= _mask_tree(value, depth, seen)
    return changed


# Textual fallback for Secrets that do not parse (truncated output, text around the
# document): each object starts at an apiVersion key; only chunks with kind Secret change.
_CHUNK_START_RE = re.compile(r"""^---[ \t]*$|\\?"apiVersion\\?"|^[ \t-]*apiVersion[ \t]*:""", re.M)
_FLOW_DATA_RE = re.compile(
    r"""(?<![\w:])(\\?["']?(?:data|stringData)\\?["']?[ \t]*:[ \t]*\{)([^{}]*)"""
)
_FLOW_ITEM_RE = re.compile(
    r"""((?:\A|,)\s*(\\?["']?)[\w.-]+\2[ \t]*:[ \t]*)"""
    r"""(\\"[^"\n]*?\\"|"(?:[^"\\\n]|\\.)*"?|'[^'\n]*'?|[^,}\s]+)"""
)
_BLOCK_DATA_RE = re.compile(r"""^([ \t]*(?:-[ \t]+)?)(?:data|stringData):[ \t]*(?:#.*)?$""")


def _mask_secret_chunks(text: str) -> str:
    bounds = [0, *(m.start() for m in _CHUNK_START_RE.finditer(text)), len(text)]
    parts = []
    for start, end in itertools.pairwise(bounds):
        chunk = text[start:end]
        if _SECRET_KIND_RE.search(chunk):
            chunk = _mask_yaml_data_blocks(_FLOW_DATA_RE.sub(_mask_flow_data, chunk))
        parts.append(chunk)
    return "".join(parts)


def _mask_flow_data(match: re.Match[str]) -> str:
    def item(m: re.Match[str]) -> str:
        value = m.group(3)
        quote = next((q for q in ('\\"', '"', "'") if value.startswith(q)), '"')
        return f"{m.group(1)}{quote}{SECRET_VALUE_MARKER}{quote}"

    return match.group(1) + _FLOW_ITEM_RE.sub(item, match.group(2))


def _mask_yaml_data_blocks(chunk: str) -> str:
    out: list[str] = []
    block_indent: int | None = None  # indent of the current data:/stringData: key
    child_indent: int | None = None
    for line in chunk.splitlines(keepends=True):
        body = line.rstrip("\r\n")
        if block_indent is not None and body.strip():
            indent = len(body) - len(body.lstrip(" \t"))
            if indent > block_indent:
                child_indent = indent if child_indent is None else child_indent
                if indent > child_indent:
                    continue  # a line of a multi-line value: dropped with the value
                key = body.strip().partition(":")[0]
                out.append(f"{body[:indent]}{key}: '{SECRET_VALUE_MARKER}'{line[len(body) :]}")
                continue
            block_indent = None
        if block_indent is None and (m := _BLOCK_DATA_RE.match(body)):
            block_indent, child_indent = len(m.group(1)), None
        out.append(line)
    return "".join(out)


# --- Pass 2: regex patterns -----------------------------------------------------------------

# A value after a key: escaped-JSON string, JSON string, single-quoted, or a bare word. The
# closing quote is optional so a value cut off by truncation is still masked.
_VALUE = r"""(?P<value>\\"[^"\n]*?\\"|"(?:[^"\\\n]|\\.)*"?|'[^'\n]*'?|[^\s"']+)"""
_SEP = r"""\\?["']?[ \t]*[:=][ \t]*"""
_SECRET_WORDS = r"PASSWORD|PASSWD|PWD|TOKEN|SECRET|API_?KEY|PRIVATE_?KEY"

_PEM_RE = re.compile(
    r"-----BEGIN (?P<label>[A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?|(?:TRUSTED )?CERTIFICATE)-----"
    # The body stops at the next "-----" or quote, so an unterminated block (a truncated
    # result) is still masked and a block inside a JSON string does not eat the rest.
    r"""(?:[^-"']|-(?!----))*(?:-----END [A-Z0-9 ]{0,40}-----)?"""
)
_KUBECONFIG_RE = re.compile(
    rf"(?P<key>(?:certificate-authority|client-key|client-certificate)-data{_SEP}){_VALUE}"
)
_AWS_ACCESS_KEY_RE = re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b")
_GITHUB_TOKEN_RE = re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{22,})")
_SLACK_TOKEN_RE = re.compile(r"\bxox[baprs]-[A-Za-z0-9-]{10,}")
_JWT_RE = re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*")
_BEARER_RE = re.compile(r"(?P<key>\bBearer[ \t]+)(?P<value>[A-Za-z0-9._~+/-]+=*)", re.I)
# Anchored on "://" (not on the scheme) so a long run of word characters is scanned once.
_URL_PASSWORD_RE = re.compile(r"(?P<key>://[^\s:/@]*:)(?P<value>[^\s/?#]*)(?=@)")
# A pod spec's env entry: the name says secret, the value is on the next line or after ", ".
_ENV_VALUE_RE = re.compile(
    rf"""(?P<key>name{_SEP}\\?["']?[\w.-]*(?:{_SECRET_WORDS})[\w.-]*\\?["']?[ \t]*"""
    rf"""(?:,[ \t]*|\r?\n[ \t]*)\\?["']?value{_SEP}){_VALUE}""",
    re.I,
)
_KEYED_RE = re.compile(
    r"(?P<key>(?<!/)(?P<name>aws_secret_access_key|api[_-]?key|private[_-]?key"
    rf"|secret(?:[_-]?key)?|password|passwd|pwd|token){_SEP}"
    r"|--(?P<flag>token|password|api-key|secret)[ \t]+)" + _VALUE,
    re.I,
)
_SIZE_SUFFIX_RE = re.compile(r"[ \t]+bytes\b")  # `kubectl describe secret`: "password:  16 bytes"
# Values that are already hidden or only refer to a secret: leaving them keeps idempotence
# and the evidence ("<set to the key 'password' in secret 'db'>", "${DB_PASSWORD}", "***").
_PLACEHOLDER_WORDS = frozenset({"", "null", "none", "nil", "true", "false", "~", "redacted"})
_PLACEHOLDER_PREFIXES = ("<", "[", "{", "${", "$(", "|", ">", "DATA+OMITTED")


def _marker(name: str) -> str:
    return f"[MASKED_{name.upper()}]"


def _is_placeholder(value: str) -> bool:
    bare = value.strip("\\\"' \t")
    words, prefixes = _PLACEHOLDER_WORDS, _PLACEHOLDER_PREFIXES
    return bare.lower() in words or bare.startswith(prefixes) or set(bare) == {"*"}


def _keyed(name: str | None = None) -> Callable[[re.Match[str]], str]:
    def replace(m: re.Match[str]) -> str:
        value, key = m.group("value"), m.group("key")
        if _is_placeholder(value) or (value.isdigit() and _SIZE_SUFFIX_RE.match(m.string, m.end())):
            return m.group(0)
        word = (name or m.group("name") or m.group("flag")).lower()
        if word == "pwd" and value.startswith(("/", "~")):
            return m.group(0)  # $PWD is the working directory, not a password
        if m.groupdict().get("flag") and value.startswith("-"):
            return m.group(0)  # "--password --other-flag": no value given
        marker = _marker(name or _KEYED_NAMES.get(word[:3], "secret"))
        quote = next((q for q in ('\\"', '"', "'") if value.startswith(q)), "")
        suffix = ""
        if not quote and key.rstrip(" \t:=").endswith('"'):
            # "password": 1234, -> a JSON scalar ends at , } or ]; keep the JSON valid.
            quote, suffix = '"', value[len(re.split(r"[,}\]]", value, maxsplit=1)[0]) :]
        return f"{key}{quote}{marker}{quote}{suffix}"

    return replace


# _KEYED_RE's key words by their first three letters -> pattern name.
_KEYED_NAMES = {"aws": "aws_secret_key", "api": "api_key", "pri": "private_key", "pwd": "password"}
_KEYED_NAMES |= {"pas": "password", "tok": "token", "sec": "secret"}


def _pem(m: re.Match[str]) -> str:
    label = m.group("label")
    if "OPENSSH" in label:
        return _marker("ssh_private_key")
    return _marker("private_key" if "PRIVATE" in label else "certificate")


def _bearer(m: re.Match[str]) -> str:
    core = m.group("value").rstrip("=")
    if core.isalpha() and len(core) < 24:
        return m.group(0)  # prose ("Bearer token expired") or a header parameter ("realm=")
    return m.group("key") + _marker("token")


def _url_password(m: re.Match[str]) -> str:
    if _is_placeholder(m.group("value")):
        return m.group(0)
    return m.group("key") + _marker("password")


_PATTERNS: tuple[tuple[re.Pattern[str], Callable[[re.Match[str]], str]], ...] = (
    (_PEM_RE, _pem),  # first: key material must go whole, before any key: value rule
    (_KUBECONFIG_RE, _keyed("kubeconfig_data")),
    (_AWS_ACCESS_KEY_RE, lambda m: _marker("aws_access_key")),
    (_GITHUB_TOKEN_RE, lambda m: _marker("github_token")),
    (_SLACK_TOKEN_RE, lambda m: _marker("slack_token")),
    (_JWT_RE, lambda m: _marker("jwt")),  # before "token:", so the marker names the shape
    (_BEARER_RE, _bearer),
    (_URL_PASSWORD_RE, _url_password),
    (_ENV_VALUE_RE, _keyed("env_secret_value")),
    (_KEYED_RE, _keyed()),
)


def _mask_patterns(text: str) -> str:
    for pattern, replace in _PATTERNS:
        text = pattern.sub(replace, text)
    return text
