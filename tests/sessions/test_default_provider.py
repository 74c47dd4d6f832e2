"""One rule decides which LLM provider is "the default" (config/providers.py), and every
part of TARSy that needs to know follows it: the resolver (what agents run on),
``manage.py check``, the System page and the demo banner."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from django.contrib.auth.models import AnonymousUser
from django.test import RequestFactory

from agents.checks import check_configuration
from agents.resolver import ResolutionError, provider_choice
from config.loader import get_config
from config.providers import default_provider
from llm.models import LLMProvider, ProviderType
from sessions.selectors.system import default_provider_warnings
from web.context_processors import demo_provider


@dataclass(frozen=True)
class Row:
    name: str
    is_default: bool = False


ROWS = [Row("demo", is_default=True), Row("gemini"), Row("claude")]


@pytest.mark.parametrize(
    ("named", "expected"),
    [
        (None, "demo"),  # nothing named: the one marked default
        ("", "demo"),  # an empty name is no name
        ("gemini", "gemini"),  # tarsy.yaml's defaults.llm_provider wins over the mark
        ("gpt", None),  # named but missing: no default (a reference problem)
    ],
)
def test_the_rule(named, expected):
    chosen = default_provider(named, ROWS)
    assert (chosen.name if chosen else None) == expected


def test_nothing_marked_and_nothing_named_is_no_default():
    assert default_provider(None, [Row("gemini"), Row("claude")]) is None


# --- every caller follows it ------------------------------------------------------------


@pytest.fixture
def providers(db):
    """A scripted demo marked default, and a real provider that is not."""
    demo = LLMProvider.objects.create(
        name="demo", type=ProviderType.SCRIPTED, model="demo", is_default=True
    )
    gemini = LLMProvider.objects.create(name="gemini", type=ProviderType.GOOGLE, model="flash")
    return demo, gemini


def callers_say(user) -> dict[str, object]:
    """What each caller takes the default provider to be, or says about it."""
    config = get_config()
    named = config.defaults.llm_provider
    try:
        resolved: object = provider_choice(named, None, "KubernetesAgent").config.name
    except ResolutionError as problem:
        resolved = f"error: {problem}"
    request = RequestFactory().get("/")
    request.user = user
    warnings = default_provider_warnings(config, list(LLMProvider.objects.all()))
    return {
        "resolver": resolved,
        "banner": demo_provider(request)["demo_provider_default"],
        "system page": [w.category for w in warnings],
        "check": [e.msg for e in check_configuration(None, databases=["default"])],
    }


def test_the_row_marked_default_when_tarsy_yaml_names_none(providers, user):
    assert callers_say(user) == {
        "resolver": "demo",
        "banner": True,
        "system page": ["demo"],
        "check": [],
    }


def test_the_provider_tarsy_yaml_names_beats_the_mark(providers, user, tarsy_config):
    # Before the one rule, the demo banner looked only at the mark and said "demo mode"
    # while every investigation ran on gemini.
    tarsy_config(lambda config: config["defaults"].update(llm_provider="gemini"))
    assert callers_say(user) == {
        "resolver": "gemini",
        "banner": False,
        "system page": [],
        "check": [],
    }


def test_a_scripted_provider_tarsy_yaml_names_is_demo_mode(providers, user, tarsy_config):
    demo, gemini = providers
    demo.is_default, gemini.is_default = False, True
    demo.save()
    gemini.save()
    tarsy_config(lambda config: config["defaults"].update(llm_provider="demo"))
    assert callers_say(user) == {
        "resolver": "demo",
        "banner": True,
        "system page": ["demo"],
        "check": [],
    }


def test_a_disabled_default_is_no_demo_and_fails_to_resolve(providers, user):
    demo, _ = providers
    demo.enabled = False
    demo.save()
    said = callers_say(user)
    assert said["resolver"].startswith("error: The default LLM provider 'demo' is disabled")
    assert said["banner"] is False
    assert said["system page"] == ["llm_provider"]
    assert "The default LLM provider 'demo' is disabled" in said["check"][0]


def test_no_default_at_all(providers, user):
    demo, _ = providers
    demo.is_default = False
    demo.save()
    said = callers_say(user)
    assert said["resolver"].startswith("error: No LLM provider is configured")
    assert (said["banner"], said["system page"]) == (False, ["llm_provider"])
    assert "No LLM provider is configured" in said["check"][0]


def test_the_banner_is_for_people_who_logged_in(providers):
    request = RequestFactory().get("/")
    request.user = AnonymousUser()
    assert demo_provider(request) == {}
