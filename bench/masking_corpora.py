"""Corpora for bench/masking.py, read from other projects' repositories (none of their
files is copied into this one). Each reader takes a git repository (a clone or a bare
mirror) and reads its ``HEAD``.

Secrets (recall):

- **trufflehog** — the pattern tests of its ~900 detectors
  (``pkg/detectors/**/*_test.go``): each case's input text and the secrets the detector
  must find in it. The Go literals are evaluated by a small interpreter of the few
  expression forms those tests use (string literals, constants, ``+``, ``fmt.Sprintf``).
- **detect-secrets** — the cases of its plugin tests (``tests/plugins/*_test.py``):
  ``(payload, should_flag)`` parametrizations and the keyword detector's
  ``(payload, secret)`` tables.

Ordinary SRE output (false positives):

- **loghub** — the 2,000-line samples of 16 systems' logs (logpai/loghub).
- **holmesgpt** — the tool outputs its LLM tests replay (``tests/llm/fixtures``):
  ``kubectl`` tables, describes and YAML, pod logs, events, Prometheus answers.
- **prometheus** — metrics in the exposition formats, from its parser's and promtool's
  test data.
- **tarsy** — TARSy's own end-to-end golden files (timelines, tool results, LLM
  conversations) and its masking test's ConfigMap.
"""

from __future__ import annotations

import ast
import contextlib
import importlib.util
import re
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class SecretCase:
    source: str  # where it comes from (file and case)
    text: str  # the input as the detector's test has it
    secrets: tuple[str, ...]  # what must not survive masking; () = "something must change"


@dataclass(frozen=True)
class Document:
    source: str
    text: str


def _git(repo: Path, *args: str) -> bytes:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True).stdout


def _files(repo: Path, pattern: str) -> list[str]:
    names = _git(repo, "ls-tree", "-r", "--name-only", "HEAD").decode().splitlines()
    return [name for name in names if re.search(pattern, name)]


def _read(repo: Path, name: str) -> str:
    return _git(repo, "show", f"HEAD:{name}").decode("utf-8", "replace")


# --- trufflehog: a tiny evaluator of Go string expressions -----------------------------------

_GO_TOKEN_RE = re.compile(
    r"""(?P<space>[ \t\r]+)|(?P<newline>\n)|(?P<comment>//[^\n]*|/\*.*?\*/)"""
    r"""|(?P<raw>`[^`]*`)|(?P<str>"(?:[^"\\\n]|\\.)*")|(?P<rune>'(?:[^'\\\n]|\\.)+')"""
    r"""|(?P<ident>[A-Za-z_][\w]*(?:\.[A-Za-z_]\w*)*)|(?P<number>\d[\w.]*)"""
    r"""|(?P<op>:=|\.\.\.|[-+*/%=<>!&|^:;,.(){}\[\]])""",
    re.S,
)


def _go_tokens(source: str) -> list[tuple[str, str]]:
    tokens = []
    for match in _GO_TOKEN_RE.finditer(source):
        kind = match.lastgroup
        if kind in ("space", "comment"):
            continue
        tokens.append((kind, match.group()))
    return tokens


def _go_string(literal: str) -> str | None:
    if literal.startswith("`"):
        return literal[1:-1]
    try:
        return ast.literal_eval(literal)  # Go's escapes are Python's, near enough
    except (ValueError, SyntaxError):
        return None


def _sprintf(fmt: str, args: list[str | None]) -> str | None:
    values = iter(args)
    out: list[str] = []
    position = 0
    for match in re.finditer(r"%(%|[-+# 0]*\d*(?:\.\d+)?[svqdx])", fmt):
        out.append(fmt[position : match.start()])
        position = match.end()
        if match.group(1) == "%":
            out.append("%")
            continue
        value = next(values, None)
        if value is None:
            return None
        out.append(f'"{value}"' if match.group(1).endswith("q") else value)
    out.append(fmt[position:])
    return "".join(out)


class _GoFile:
    def __init__(self, source: str) -> None:
        self.tokens = _go_tokens(source)
        self.names: dict[str, str] = {}
        self._bind()

    def _bind(self) -> None:
        """Every ``name = <string expr>`` / ``name := …`` the file holds (twice, for names
        defined from later names)."""
        for _ in range(2):
            for i, (kind, text) in enumerate(self.tokens[:-2]):
                if kind != "ident" or self.tokens[i + 1][1] not in ("=", ":="):
                    continue
                value, _ = self.expr(i + 2)
                if value is not None:
                    self.names[text] = value

    def expr(self, i: int) -> tuple[str | None, int]:
        value, i = self.term(i)
        while i < len(self.tokens) and self.tokens[i][1] == "+":
            i += 1
            while i < len(self.tokens) and self.tokens[i][0] == "newline":
                i += 1
            right, i = self.term(i)
            value = None if value is None or right is None else value + right
        return value, i

    def term(self, i: int) -> tuple[str | None, int]:
        if i >= len(self.tokens):
            return None, i
        kind, text = self.tokens[i]
        if kind in ("raw", "str"):
            return _go_string(text), i + 1
        if kind == "ident" and i + 1 < len(self.tokens) and self.tokens[i + 1][1] == "(":
            args, end = self.arguments(i + 2)
            if text == "fmt.Sprintf" and args and args[0] is not None:
                return _sprintf(args[0], args[1:]), end
            if text in ("string", "strings.TrimSpace") and len(args) == 1:
                return args[0], end
            if text == "strings.Repeat" and len(args) == 2 and args[0] is not None:
                count = self.tokens[end - 2][1]
                return (args[0] * int(count) if count.isdigit() else None), end
            return None, end
        if (
            kind == "op"
            and text == "["
            and self.tokens[i + 1 : i + 4]
            and ([t for _, t in self.tokens[i : i + 3]] == ["[", "]", "byte"])
        ):
            return self.term(i + 3)
        if kind == "ident":
            return self.names.get(text), i + 1
        if text == "(":
            value, end = self.expr(i + 1)
            return value, end + 1
        return None, i + 1

    def arguments(self, i: int) -> tuple[list[str | None], int]:
        args: list[str | None] = []
        while i < len(self.tokens) and self.tokens[i][1] != ")":
            if self.tokens[i][0] == "newline" or self.tokens[i][1] == ",":
                i += 1
                continue
            start = i
            value, i = self.expr(i)
            args.append(value)
            if i == start:
                i += 1
        return args, i + 1

    def cases(self) -> Iterator[tuple[str, tuple[str, ...]]]:
        """(input, wanted secrets) for each test case of the file."""
        tokens = self.tokens
        i = 0
        while i < len(tokens):
            kind, text = tokens[i]
            if (
                kind == "ident"
                and text.lower() in ("input", "data")
                and i + 1 < len(tokens)
                and tokens[i + 1][1] == ":"
            ):
                value, end = self.expr(i + 2)
                wanted, next_i = self._wanted(end)
                if value is not None and wanted is not None:
                    yield value, wanted
                i = max(next_i, i + 1)
                continue
            i += 1

    def _wanted(self, i: int) -> tuple[tuple[str, ...] | None, int]:
        """The ``want``/``Expected`` list after an input, before the next input."""
        depth = 0
        tokens = self.tokens
        while i < len(tokens):
            kind, text = tokens[i]
            if kind == "ident" and text.lower() in ("input", "data") and tokens[i + 1][1] == ":":
                return None, i
            if text in "{([":
                depth += 1
            elif text in "})]":
                depth -= 1
                if depth < -1:
                    return None, i
            if kind == "ident" and text.lower() in ("want", "expected") and tokens[i + 1][1] == ":":
                return self._literal_list(i + 2)
            i += 1
        return None, i

    def _literal_list(self, i: int) -> tuple[tuple[str, ...] | None, int]:
        tokens = self.tokens
        while i < len(tokens) and tokens[i][1] != "{":
            if tokens[i][1] in (",", "}") or tokens[i][0] == "newline":
                return None, i  # not a literal list (a helper's result, nil…)
            i += 1
        depth, values = 0, []
        while i < len(tokens):
            kind, text = tokens[i]
            if text == "{":
                depth += 1
            elif text == "}":
                depth -= 1
                if depth == 0:
                    return tuple(v for v in values if v), i + 1
            elif (
                depth >= 1
                and (kind in ("raw", "str", "ident"))
                and tokens[i - 1][1]
                in (
                    "{",
                    ",",
                    "(",
                )
            ):
                value, end = self.expr(i)
                if value is not None:
                    values.append(value)
                i = max(end, i + 1)
                continue
            i += 1
        return None, i


def _secret_parts(wanted: str, text: str) -> tuple[str, ...]:
    """What must not survive of one wanted result: the result itself when it occurs in
    the input, or else (a result made of several values, ``id:secret``) its longest part
    that does — the ids beside a secret are not secrets."""
    if wanted in text:
        return (wanted,)
    parts = [p for p in re.split(r"[:;|,\s]+", wanted) if len(p) >= 8 and p in text]
    return (max(parts, key=len),) if parts else ()


def trufflehog_cases(repo: Path) -> list[SecretCase]:
    cases = []
    for name in _files(repo, r"^pkg/detectors/.*_test\.go$"):
        if "integration" in name:
            continue
        go = _GoFile(_read(repo, name))
        for n, (text, wanted) in enumerate(go.cases()):
            secrets = tuple(part for w in wanted for part in _secret_parts(w, text))
            if secrets:
                cases.append(SecretCase(f"{name}#{n}", text, secrets))
    return cases


# --- detect-secrets: its plugin tests' parametrizations ----------------------------------------


@contextlib.contextmanager
def _checkout(repo: Path, *paths: str) -> Iterator[Path]:
    with tempfile.TemporaryDirectory() as tmp:
        archive = _git(repo, "archive", "--format=tar", "HEAD", *paths)
        with tarfile.open(fileobj=__import__("io").BytesIO(archive)) as tar:
            tar.extractall(tmp, filter="data")
        yield Path(tmp)


_PAYLOAD_ARGS = ("payload", "line", "token", "secret_string")
_FLAG_ARGS = ("should_flag", "expected", "expected_result")


def detect_secrets_cases(repo: Path) -> list[SecretCase]:
    cases: list[SecretCase] = []
    with _checkout(repo, "tests/plugins", "testing") as root:
        sys.path.insert(0, str(root))
        try:
            for path in sorted((root / "tests" / "plugins").glob("*_test.py")):
                module = _import(path)
                if module is None:
                    continue
                cases += _keyword_tables(path.name, module)
                cases += _parametrized(path.name, module)
        finally:
            sys.path.remove(str(root))
    return cases


def _import(path: Path):
    spec = importlib.util.spec_from_file_location(f"ds_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception:
        return None
    return module


def _keyword_tables(name: str, module) -> list[SecretCase]:
    out = []
    for attr, value in vars(module).items():
        if not (attr.endswith("_CASES") and isinstance(value, list)):
            continue
        for n, row in enumerate(value):
            if (
                isinstance(row, tuple)
                and len(row) == 2
                and isinstance(row[0], str)
                and isinstance(row[1], str)
                and row[1] in row[0]
            ):
                out.append(SecretCase(f"{name}:{attr}#{n}", row[0], (row[1],)))
    return out


def _parametrized(name: str, module) -> list[SecretCase]:
    out = []
    functions = list(vars(module).items())
    for owner, cls in list(functions):
        if isinstance(cls, type):
            functions += [(f"{owner}.{attr}", value) for attr, value in vars(cls).items()]
    for attr, value in functions:
        for mark in getattr(value, "pytestmark", []):
            if mark.name != "parametrize":
                continue
            argnames = [a.strip() for a in str(mark.args[0]).split(",")]
            payload = next((argnames.index(a) for a in _PAYLOAD_ARGS if a in argnames), None)
            flag = next((argnames.index(a) for a in _FLAG_ARGS if a in argnames), None)
            if payload is None or flag is None:
                continue
            for n, row in enumerate(mark.args[1]):
                row = row.values if hasattr(row, "values") else row
                if isinstance(row[payload], str) and row[flag] is True:
                    out.append(SecretCase(f"{name}:{attr}#{n}", row[payload], ()))
    return out


# --- ordinary SRE output -----------------------------------------------------------------------


def loghub_documents(repo: Path) -> list[Document]:
    return [Document(name, _read(repo, name)) for name in _files(repo, r"_2k\.log$")]


def holmesgpt_documents(repo: Path) -> list[Document]:
    documents = []
    for name in _files(repo, r"^tests/llm/fixtures/.*\.(txt|json|log)$"):
        with contextlib.suppress(subprocess.CalledProcessError):  # absent from a mirror
            documents.append(Document(name, _read(repo, name)))
    return documents


def prometheus_documents(repo: Path) -> list[Document]:
    names = _files(repo, r"^(model/textparse|cmd/promtool)/testdata/.*\.(prom|txt)$")
    return [Document(name, _read(repo, name)) for name in names]


def tarsy_documents(repo: Path) -> list[Document]:
    names = _files(repo, r"^test/e2e/testdata/golden/.*\.golden$")
    names.append("pkg/masking/testdata/configmap_yaml.txt")
    return [Document(name, _read(repo, name)) for name in names]
