"""Bounded parsing of outside text (masking.bounded): the depth bounds never
under-count, the loaders refuse what would crash or blow up a parser and accept what
parses normally, and unstorable characters are found and replaced. Pure Python, no
database."""

from __future__ import annotations

import itertools
import json
import time
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from masking import bounded
from masking.bounded import (
    UnsafeInput,
    deeper_than,
    json_depth,
    json_problem,
    json_text,
    load_json,
    load_yaml,
    load_yaml_all,
    storable,
    unstorable,
    yaml_depth_bound,
)
from tests import hostile_corpus, secrets_corpus

ROOT = Path(__file__).resolve().parents[2]
_COLLECTION_START = (yaml.SequenceStartEvent, yaml.MappingStartEvent)
_COLLECTION_END = (yaml.SequenceEndEvent, yaml.MappingEndEvent)


def parser_depth(text: str, loader) -> int:
    """How deep ``loader``'s parser nests before the end or its first error: the depth its
    composer recurses to."""
    depth = deepest = 0
    try:
        for event in yaml.parse(text, Loader=loader):
            if isinstance(event, _COLLECTION_START):
                depth += 1
                deepest = max(deepest, depth)
            elif isinstance(event, _COLLECTION_END):
                depth -= 1
    except yaml.YAMLError:
        pass
    return deepest


# Pieces of YAML that nest, quote, comment, tag and break lines in every way the scanner
# knows, so that random strings of them reach every branch of the bound.
_YAML_PIECES = [
    *"[]{},:-?\"'#!&*|>%\\\t ",
    *["\n", "\n", "\r\n", "\u2028", "\x85", "\n  ", "\n    ", "\n      ", "\n- ", "\n  - "],
    *["- ", "? ", ": ", "a: ", "b:", "x", "'q'", '"q"', "''", '\\"', "]]", "[[", "{a: "],
    *["&a ", "*a", "!t ", "!!str ", "<<: ", "---\n", "...\n", "? - ", "- - ", "- ? ", "# c"],
]


@settings(max_examples=3000, deadline=None)
@given(st.lists(st.sampled_from(_YAML_PIECES), max_size=50))
def test_the_yaml_bound_is_never_below_what_libyaml_or_pyyaml_reach(pieces):
    text = "".join(pieces)
    bound = yaml_depth_bound(text, 10**6)
    assert bound >= parser_depth(text, yaml.CSafeLoader)
    assert bound >= parser_depth(text, yaml.SafeLoader)


@pytest.mark.parametrize(
    "text",
    [
        "[" * 10_000,
        "{a: " * 10_000,
        "- " * 10_000 + "x",
        "? " * 10_000 + "x",
        "- ? " * 5_000 + "x",
        "".join(" " * n + "a:\n" for n in range(2_000)),
        "[\n" * 10_000,
        "x: '" + "]" * 100 + "' " + "[" * 10_000,  # closes in a quote do not count
        '[ "]]]]", ' * 2_000 + "[" * 10_000,
        "[a, #]]]]\n" * 2_000,
        "[!t]]]] a, " * 2_000,
    ],
)
def test_every_way_yaml_nests_is_counted(text):
    # Up to the limit and no further: a deep text costs no more than the limit.
    assert yaml_depth_bound(text, 256) > 256
    assert yaml_depth_bound(text, 256) >= min(parser_depth(text, yaml.CSafeLoader), 257)


def test_the_yaml_bound_is_close_for_ordinary_documents():
    config = (ROOT / "config" / "tarsy.yaml").read_text()
    for _, text in [*secrets_corpus.documents(), ("tarsy.yaml", config)]:
        exact = parser_depth(text, yaml.CSafeLoader)
        assert yaml_depth_bound(text, 10**6) <= 2 * exact + 16


@settings(max_examples=300, deadline=None)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(alphabet='[]{}"\\ a,:'),
        lambda children: (
            st.lists(children, max_size=4)
            | st.dictionaries(st.text(alphabet='[]{}"\\a'), children, max_size=4)
        ),
    )
)
def test_the_json_depth_is_exact(value):
    assert json_depth(json.dumps(value), 10**6) == _depth(value)
    assert json_depth(json.dumps(value, indent=1), 10**6) == _depth(value)


def _depth(value) -> int:
    children = value.values() if isinstance(value, dict) else value
    if not isinstance(value, dict | list):
        return 0
    return 1 + max((_depth(child) for child in children), default=0)


def test_json_past_the_depth_is_refused_before_it_is_parsed():
    with pytest.raises(UnsafeInput, match="request body is nested more than 32 levels deep"):
        load_json("[" * 1_000_000, what="request body", max_depth=32)
    assert load_json("[" * 32 + "]" * 32, max_depth=32) == _nested(32)
    with pytest.raises(UnsafeInput, match="the limit is 10"):
        load_json("[1, 2, 3, 4]", max_chars=10)


def _nested(depth: int) -> list:
    value: list = []
    for _ in range(depth - 1):
        value = [value]
    return value


def test_json_bytes_are_decoded_as_json_is_and_invalid_utf8_is_a_value_error():
    assert load_json('{"a": "é"}'.encode("utf-16")) == {"a": "é"}
    with pytest.raises(UnicodeDecodeError):
        load_json(b'{"a": "\xff\xfe\x80"}')


def test_an_unterminated_json_string_costs_one_pass():
    started = time.monotonic()
    assert json_depth('"' + '\\"' * 1_000_000, 64) == 0
    assert time.monotonic() - started < 2


@pytest.mark.parametrize(
    "text",
    [
        "x: " + "[" * 5_000 + "]" * 5_000,
        "- " * 5_000 + "x",
        "? " * 5_000 + "x",
        "".join(" " * n + "a:\n" for n in range(300)),
        "x: " + "[" * 100 + "]" * 100,  # small: the pure-Python parser composes it
    ],
)
def test_yaml_deeper_than_the_limit_is_refused(text):
    with pytest.raises(UnsafeInput, match="nested more than 64 levels deep"):
        load_yaml_all(text, max_chars=len(text))


def test_yaml_within_the_limits_loads_as_pyyaml_loads_it():
    config = (ROOT / "config" / "tarsy.yaml").read_text()
    for shape, text in [("tarsy.yaml", config), *secrets_corpus.documents()]:
        try:
            expected = list(yaml.safe_load_all(text))
        except yaml.YAMLError:
            continue  # plain text, an env file
        assert load_yaml_all(text, max_chars=len(text)) == expected, shape
    deep = "x: " + "[" * 60 + "]" * 60
    assert load_yaml(deep, max_chars=len(deep)) == {"x": _nested(60)}


def test_yaml_whose_bound_is_loose_is_composed_by_python_and_loads():
    # 60 quoted strings full of "[": far past the text bound, three levels deep.
    text = hostile_corpus.secret(
        **{f"note{i}": "'" + "[" * 200 + "'" for i in range(60)}, nested="{a: [1, {b: 2}]}"
    )
    assert yaml_depth_bound(text, 10**6) > bounded.YAML_BOUND_FACTOR * bounded.MAX_DEPTH
    assert load_yaml(text, max_chars=len(text)) == yaml.safe_load(text)
    # Past PURE_PYTHON_CHARS the text is refused rather than parsed slowly.
    big = text + "# " + "x" * bounded.PURE_PYTHON_CHARS + "\n"
    with pytest.raises(UnsafeInput, match="may be nested more than 64 levels"):
        load_yaml(big, max_chars=len(big))


def test_yaml_aliases_are_measured_expanded():
    billion_laughs = ['a: &a ["x","x","x","x","x","x","x","x","x"]']
    for previous, name in itertools.pairwise("abcdefghi"):
        billion_laughs.append(f"{name}: &{name} [" + ",".join([f"*{previous}"] * 9) + "]")
    refused = {
        "billion laughs": "\n".join(billion_laughs),
        "merge keys": hostile_corpus.CORPUS["yaml merge-key bomb"],
        "depth": hostile_corpus.CORPUS["yaml aliases deeper than the text"],
    }
    for what, text in refused.items():
        started = time.monotonic()
        with pytest.raises(UnsafeInput, match=r"expands to more than|nested more than"):
            load_yaml(text, max_chars=len(text), what=what)
        assert time.monotonic() - started < 2, what
    with pytest.raises(UnsafeInput, match="refers to itself"):
        load_yaml("a: &a [*a]", max_chars=100)
    shared = "base: &base {image: nginx, port: 80}\nweb: {<<: *base, port: 8080}\napi: *base\n"
    assert load_yaml(shared, max_chars=1000) == yaml.safe_load(shared)


def test_yaml_past_its_size_is_refused():
    with pytest.raises(UnsafeInput, match="is 11 characters; the limit is 10"):
        load_yaml("a: 12345678", max_chars=10)


def test_trees_are_measured_with_shared_parts_expanded_and_cycles_too_deep():
    value: list = []
    for _ in range(70):
        value = [value, value]  # 2^70 paths: measured once each
    assert deeper_than(value, 64)
    assert not deeper_than(value, 71)
    loop: list = []
    loop.append(loop)
    assert deeper_than(loop, 1000)
    assert not deeper_than({"a": [1, {"b": "c"}]}, 3)
    assert deeper_than({"a": [1, {"b": "c"}]}, 2)


def test_json_problems_name_depth_and_unstorable_text():
    assert json_problem({"a": _nested(70)}) == "is nested more than 64 levels deep"
    assert json_problem({"cmd": "ls\x00"}) == "contains a NUL character (at character 2)"
    assert "lone surrogate" in json_problem({"k\ud800": 1})
    assert json_problem({"namespace": "payments", "pods": ["a", "b"]}) == ""


def test_unstorable_characters_are_named_and_replaced():
    assert unstorable("fine, é and 😀") == ""
    assert unstorable("a\x00b") == "a NUL character (at character 1)"
    assert unstorable("ab\ud800") == "a lone surrogate ('\\ud800') at character 2"
    assert storable("a\x00b\udfffc 😀") == "a\ufffdb\ufffdc 😀"
    text = "nothing to replace"
    assert storable(text) is text


def test_json_text_keeps_unicode_and_escapes_only_a_lone_surrogate():
    assert json_text({"a": "é"}) == '{"a": "é"}'
    assert json_text({"a": "é\ud800"}) == '{"a": "\\u00e9\\ud800"}'
    assert json_text({"a": "\x00"}) == '{"a": "\\u0000"}'
