"""LLM providers in Django admin: validation, key-variable status and the Test action.

Tests hit real HTTP fakes of the OpenAI and Gemini APIs through the real registry
backends; nothing in the SDKs, the backends or the admin is patched. Only the
environment is: key variables are set and unset with ``monkeypatch``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.messages import constants as message_levels
from django.core.exceptions import ValidationError
from django.test import Client
from django.urls import reverse

from llm import provider_probe
from llm.models import LLMProvider, ProviderType
from tests.llm.fakes import gemini as g
from tests.llm.fakes.fixtures import openai_server
from tests.llm.fakes.gemini import FakeGemini
from tests.llm.fakes.openai_chat import ChatCompletionStream, FakeOpenAIChat, openai_error

# The fake server's fixture, imported by name; listing it marks it as used.
__all__ = ["openai_server"]

pytestmark = pytest.mark.django_db

OPENAI_KEY_ENV = "TARSY_ADMIN_TEST_OPENAI_KEY"
OPENAI_KEY = "sk-admin-test-0123456789abcdef"
GEMINI_KEY_ENV = "TARSY_ADMIN_TEST_GEMINI_KEY"
GEMINI_KEY = "gemini-admin-test-fedcba9876543210"
MISSING_KEY_ENV = "TARSY_ADMIN_TEST_UNSET_KEY"
KEYS = (OPENAI_KEY, GEMINI_KEY)

CHANGELIST = "admin:llm_llmprovider_changelist"
ADD = "admin:llm_llmprovider_add"


@pytest.fixture(autouse=True)
def _environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(OPENAI_KEY_ENV, OPENAI_KEY)
    monkeypatch.setenv(GEMINI_KEY_ENV, GEMINI_KEY)
    monkeypatch.delenv(MISSING_KEY_ENV, raising=False)
    # A developer's own settings must not redirect the SDKs away from the fakes.
    for name in ("OPENAI_API_BASE", "OPENAI_BASE_URL", "GOOGLE_GENAI_USE_VERTEXAI"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def admin_user(db: None) -> Any:
    # No password: hashing one costs more than the rest of a test, and force_login needs none.
    return get_user_model().objects.create_superuser("root", "root@example.com", None)


@pytest.fixture
def admin_client(admin_user: Any) -> Client:
    client = Client()
    client.force_login(admin_user)
    return client


@pytest.fixture
def csrf_admin_client(admin_user: Any) -> Client:
    """A logged-in browser that enforces CSRF like a real one."""
    client = Client(enforce_csrf_checks=True)
    client.force_login(admin_user)
    return client


def make_provider(**fields: Any) -> LLMProvider:
    values: dict[str, Any] = {"name": "p", "type": ProviderType.OPENAI, "model": "gpt-fake"}
    return LLMProvider.objects.create(**(values | fields))


def openai_provider(server: FakeOpenAIChat, **fields: Any) -> LLMProvider:
    values = {"name": "openai-fake", "api_key_env": OPENAI_KEY_ENV, "base_url": server.base_url}
    return make_provider(**(values | fields))


def gemini_provider(server: FakeGemini, **fields: Any) -> LLMProvider:
    values = {
        "name": "gemini-fake",
        "type": ProviderType.GOOGLE,
        "model": "gemini-2.5-flash",
        "api_key_env": GEMINI_KEY_ENV,
        "base_url": server.base_url,
    }
    return make_provider(**(values | fields))


def run_action(client: Client, *providers: LLMProvider) -> Any:
    return client.post(
        reverse(CHANGELIST),
        {"action": "test_selected", "_selected_action": [p.pk for p in providers]},
        follow=True,
    )


def shown_messages(response: Any) -> list[tuple[int, str]]:
    return [(message.level, str(message)) for message in response.context["messages"]]


def assert_no_key(response: Any) -> None:
    content = response.content.decode()
    for key in KEYS:
        assert key not in content


def key_set_cell(html: str, name: str) -> str:
    """The "key variable set" cell of the changelist row for provider ``name``."""
    for row in html.split("<tr")[1:]:
        if f">{name}</a>" in row:
            match = re.search(r'<td class="field-key_set">(.*?)</td>', row, re.DOTALL)
            assert match, row
            return match.group(1)
    raise AssertionError(f"no changelist row for {name}")


def button_url(provider: LLMProvider) -> str:
    return reverse("admin:llm_llmprovider_test", args=[provider.pk])


def ok_stream(text: str = "ok") -> Any:
    return ChatCompletionStream().text(text).finish("stop").usage(12, 1).reply()


# -- key variable status ------------------------------------------------------------------


def test_changelist_shows_whether_each_key_variable_is_set(admin_client: Client) -> None:
    make_provider(name="has-key", api_key_env=OPENAI_KEY_ENV)
    make_provider(name="no-key", api_key_env=MISSING_KEY_ENV)

    response = admin_client.get(reverse(CHANGELIST))

    assert response.status_code == 200
    html = response.content.decode()
    assert 'alt="True"' in key_set_cell(html, "has-key")
    assert 'alt="False"' in key_set_cell(html, "no-key")
    assert_no_key(response)


def test_change_page_says_set_or_how_to_set_the_variable_never_its_value(
    admin_client: Client,
) -> None:
    has_key = make_provider(name="has-key", api_key_env=OPENAI_KEY_ENV)
    no_key = make_provider(name="no-key", api_key_env=MISSING_KEY_ENV)

    set_page = admin_client.get(reverse("admin:llm_llmprovider_change", args=[has_key.pk]))
    unset_page = admin_client.get(reverse("admin:llm_llmprovider_change", args=[no_key.pk]))

    set_html, unset_html = set_page.content.decode(), unset_page.content.decode()
    assert re.search(r'<div class="readonly">set</div>', set_html)
    assert (
        f"not set: export {MISSING_KEY_ENV}=… for both the web and worker processes" in unset_html
    )
    assert "not set" not in set_html
    assert_no_key(set_page)
    assert_no_key(unset_page)


def test_change_page_groups_fields(admin_client: Client) -> None:
    provider = make_provider(api_key_env=OPENAI_KEY_ENV)

    response = admin_client.get(reverse("admin:llm_llmprovider_change", args=[provider.pk]))

    fieldsets = {fieldset.name: list(fieldset.fields) for fieldset in response.context["adminform"]}
    assert fieldsets["Connection"] == ["type", "model", "base_url"]
    assert fieldsets["Credentials"] == ["api_key_env", "key_status", "project_env", "location_env"]
    assert fieldsets["Behaviour"] == ["native_tools", "options", "enabled", "is_default"]


# -- validation ---------------------------------------------------------------------------

VALID_BASE: dict[str, Any] = {
    "name": "new-provider",
    "type": ProviderType.OPENAI,
    "model": "gpt-fake",
    "api_key_env": "OPENAI_API_KEY",
}

# (case id, fields on top of VALID_BASE, field that must carry the error, words in it)
IMPOSSIBLE: list[tuple[str, dict[str, Any], str, str]] = [
    (
        "unknown native tool",
        {"type": ProviderType.GOOGLE, "native_tools": ["google_search", "web_browse"]},
        "native_tools",
        "'web_browse'; choose among google_search, code_execution, url_context",
    ),
    (
        "native tools on a non-Gemini type",
        {"native_tools": ["google_search"]},
        "native_tools",
        "only Google Gemini and Vertex AI",
    ),
    (
        "native tools not a list",
        {"type": ProviderType.GOOGLE, "native_tools": {"google_search": True}},
        "native_tools",
        "JSON list",
    ),
    (
        "base URL on scripted",
        {"type": ProviderType.SCRIPTED, "api_key_env": "", "base_url": "http://127.0.0.1:1/"},
        "base_url",
        "clear the base URL",
    ),
    (
        "vertex without location",
        {"type": ProviderType.VERTEXAI, "api_key_env": "", "project_env": "GCP_PROJECT"},
        "location_env",
        "location variable",
    ),
    (
        "vertex without project",
        {"type": ProviderType.VERTEXAI, "api_key_env": "", "location_env": "GCP_LOCATION"},
        "project_env",
        "project",
    ),
    (
        "anthropic without key variable",
        {"type": ProviderType.ANTHROPIC, "api_key_env": ""},
        "api_key_env",
        "ANTHROPIC_API_KEY",
    ),
    (
        "google without key variable",
        {"type": ProviderType.GOOGLE, "api_key_env": ""},
        "api_key_env",
        "GEMINI_API_KEY",
    ),
    (
        "openai without key variable or base URL",
        {"api_key_env": ""},
        "api_key_env",
        "only an OpenAI-compatible server with a base URL",
    ),
    (
        "xai with a base URL still needs a key",
        {"type": ProviderType.XAI, "api_key_env": "", "base_url": "http://127.0.0.1:1/v1"},
        "api_key_env",
        "XAI_API_KEY",
    ),
    ("options not an object", {"options": ["demo"]}, "options", "JSON object"),
    (
        "scripted script file missing",
        {"type": ProviderType.SCRIPTED, "api_key_env": "", "options": {"script": "/nope.yaml"}},
        "options",
        "no file at '/nope.yaml'",
    ),
    (
        "scripted script not a string",
        {"type": ProviderType.SCRIPTED, "api_key_env": "", "options": {"script": 3}},
        "options",
        'must be "demo" or the path of a script file',
    ),
    (
        "a key pasted instead of a variable name",
        {"api_key_env": "sk-live-abc"},
        "api_key_env",
        "never the key itself",
    ),
]
IMPOSSIBLE_IDS = [case[0] for case in IMPOSSIBLE]


def form_data(fields: dict[str, Any]) -> dict[str, str]:
    """The add form's POST body: JSON fields as text, booleans as checkboxes."""
    data: dict[str, str] = {}
    for name, value in fields.items():
        if name in ("native_tools", "options"):
            data[name] = json.dumps(value)
        elif isinstance(value, bool):
            if value:
                data[name] = "on"
        else:
            data[name] = str(value)
    data.setdefault("native_tools", "[]")
    data.setdefault("options", "{}")
    data.setdefault("enabled", "on")
    return data


def post_add(client: Client, fields: dict[str, Any]) -> Any:
    return client.post(reverse(ADD), form_data(fields))


@pytest.mark.parametrize(("case", "fields", "field", "words"), IMPOSSIBLE, ids=IMPOSSIBLE_IDS)
def test_full_clean_rejects_impossible_combinations(
    case: str, fields: dict[str, Any], field: str, words: str
) -> None:
    provider = LLMProvider(**(VALID_BASE | fields))

    with pytest.raises(ValidationError) as raised:
        provider.full_clean()

    errors = raised.value.message_dict
    assert field in errors, errors
    assert any(words in message for message in errors[field]), errors[field]


@pytest.mark.parametrize(("case", "fields", "field", "words"), IMPOSSIBLE, ids=IMPOSSIBLE_IDS)
def test_admin_add_form_rejects_impossible_combinations(
    admin_client: Client, case: str, fields: dict[str, Any], field: str, words: str
) -> None:
    response = post_add(admin_client, VALID_BASE | fields)

    assert response.status_code == 200  # the form again, not a redirect
    errors = response.context["adminform"].form.errors
    assert field in errors, errors
    assert any(words in message for message in errors[field]), errors[field]
    assert not LLMProvider.objects.exists()


@pytest.mark.parametrize(
    "fields",
    [
        pytest.param({}, id="openai with key variable"),
        pytest.param(
            {"api_key_env": "", "base_url": "http://127.0.0.1:8000/v1"},
            id="keyless openai-compatible server",
        ),
        pytest.param(
            {"type": ProviderType.GOOGLE, "native_tools": ["google_search", "url_context"]},
            id="gemini with native tools",
        ),
        pytest.param(
            {
                "type": ProviderType.VERTEXAI,
                "api_key_env": "",
                "project_env": "GCP_PROJECT",
                "location_env": "GCP_LOCATION",
                "native_tools": ["code_execution"],
            },
            id="vertex with project and location",
        ),
        pytest.param(
            {"type": ProviderType.SCRIPTED, "api_key_env": "", "options": {"script": "demo"}},
            id="scripted demo",
        ),
        pytest.param(
            {"type": ProviderType.SCRIPTED, "model": "", "api_key_env": "", "options": {}},
            id="scripted without script plays the demo",
        ),
    ],
)
def test_admin_add_form_accepts_possible_combinations(
    admin_client: Client, fields: dict[str, Any]
) -> None:
    response = post_add(admin_client, VALID_BASE | fields)

    assert response.status_code == 302, response.context["adminform"].form.errors
    assert LLMProvider.objects.get(name="new-provider").type == (VALID_BASE | fields)["type"]


def test_scripted_provider_accepts_an_existing_script_file(tmp_path: Path) -> None:
    script = tmp_path / "script.yaml"
    script.write_text("turns: [{text: hello}]\n")
    provider = LLMProvider(
        name="scripted-file", type=ProviderType.SCRIPTED, options={"script": str(script)}
    )

    provider.full_clean()  # no error


def test_second_default_is_a_form_error_not_an_integrity_error(admin_client: Client) -> None:
    make_provider(name="current-default", api_key_env=OPENAI_KEY_ENV, is_default=True)

    response = post_add(admin_client, VALID_BASE | {"is_default": True})

    assert response.status_code == 200
    form = response.context["adminform"].form
    assert form.errors == {
        "is_default": [
            "'current-default' is already the default provider; untick “is default” on "
            "'current-default' first, then save this one."
        ]
    }
    assert LLMProvider.objects.count() == 1


def test_the_default_provider_can_be_saved_again(admin_client: Client) -> None:
    current = make_provider(name="current-default", api_key_env=OPENAI_KEY_ENV, is_default=True)

    current.full_clean()  # its own default flag is no conflict
    response = admin_client.post(
        reverse("admin:llm_llmprovider_change", args=[current.pk]),
        form_data(
            {"name": "current-default", "type": "openai", "model": "gpt-4o"}
            | {"api_key_env": OPENAI_KEY_ENV, "is_default": True}
        ),
    )

    assert response.status_code == 302
    current.refresh_from_db()
    assert (current.model, current.is_default) == ("gpt-4o", True)


# -- the Test action ----------------------------------------------------------------------


def test_action_calls_the_openai_fake_and_reports_the_reply(
    admin_client: Client, openai_server: FakeOpenAIChat
) -> None:
    provider = openai_provider(openai_server)
    openai_server.enqueue(ok_stream("ok"))

    response = run_action(admin_client, provider)

    [(level, text)] = shown_messages(response)
    assert level == message_levels.SUCCESS
    assert text.startswith("openai-fake via langchain: OK, replied “ok” in ")
    assert text.endswith(" ms")
    [sent] = openai_server.requests
    assert sent.headers["authorization"] == f"Bearer {OPENAI_KEY}"
    assert [(m["role"], m["content"]) for m in sent.body["messages"]] == [
        ("system", "Reply with the single word: ok"),
        ("user", "ping"),
    ]
    assert "tools" not in sent.body
    assert_no_key(response)


def test_action_tests_gemini_on_both_backends_against_the_gemini_fake(
    admin_client: Client, fake_gemini: FakeGemini
) -> None:
    provider = gemini_provider(fake_gemini)
    fake_gemini.enqueue(g.text_reply("pong"), g.text_reply("pong"))

    response = run_action(admin_client, provider)

    messages = shown_messages(response)
    assert [level for level, _ in messages] == [message_levels.SUCCESS] * 2
    backends = set()
    for _, text in messages:
        match = re.fullmatch(r"gemini-fake via (\S+): OK, replied “pong” in \d+ ms", text)
        assert match, text
        backends.add(match.group(1))
    assert backends == {"langchain", "google-native"}
    assert len(fake_gemini.requests) == 2
    assert all(r.headers["x-goog-api-key"] == GEMINI_KEY for r in fake_gemini.requests)
    assert_no_key(response)


def test_test_providers_runs_each_pair_with_its_own_timeout_and_keeps_order(
    openai_server: FakeOpenAIChat, demo_provider: LLMProvider
) -> None:
    provider = openai_provider(openai_server)
    openai_server.enqueue(*[openai_error(503, "overloaded, try later")] * 4)

    # The 503 is retried after 1 s of backoff; the 0.5 s timeout ends that provider's
    # test while the demo answers at once.
    results = provider_probe.probe_providers(
        [(provider, "langchain"), (demo_provider, "scripted")], timeout=0.5
    )

    assert [(r.ok, r.backend, r.code) for r in results] == [
        (False, "langchain", "timeout"),
        (True, "scripted", ""),
    ]


def test_action_on_the_scripted_demo_quotes_what_the_demo_says(
    admin_client: Client, demo_provider: LLMProvider
) -> None:
    response = run_action(admin_client, demo_provider)

    # The demo script does not answer "ok": asked no tools, it writes its closing
    # analysis, and the message quotes the start of it.
    [(level, text)] = shown_messages(response)
    assert level == message_levels.SUCCESS
    assert text.startswith(
        "demo via scripted: OK, replied “## Summary No failing pod was found in namespace"
    )


def test_action_reports_a_401_from_the_fake_as_auth_error_and_masks_an_echoed_key(
    admin_client: Client, openai_server: FakeOpenAIChat
) -> None:
    provider = openai_provider(openai_server)
    # Some APIs echo the key they rejected; what the admin shows must not.
    openai_server.enqueue(openai_error(401, f"Incorrect API key provided: {OPENAI_KEY}."))

    response = run_action(admin_client, provider)

    [(level, text)] = shown_messages(response)
    assert level == message_levels.ERROR
    assert text.startswith("openai-fake via langchain: auth_error after ")
    assert "Incorrect API key provided: ***" in text
    assert len(openai_server.requests) == 1  # an auth error is not retried
    assert_no_key(response)


def test_action_names_a_missing_key_variable_and_calls_nothing(
    admin_client: Client, fake_gemini: FakeGemini
) -> None:
    provider = gemini_provider(fake_gemini, api_key_env=MISSING_KEY_ENV)

    response = run_action(admin_client, provider)

    messages = shown_messages(response)
    assert len(messages) == 2  # langchain and google-native
    for level, text in messages:
        assert level == message_levels.ERROR
        assert ": auth_error after " in text
        assert f"environment variable {MISSING_KEY_ENV} (named by api_key_env) is not set" in text
    assert fake_gemini.requests == []
    assert_no_key(response)


@pytest.fixture
def viewer_client(db: None) -> Client:
    """A staff user who may view providers but not change them."""
    from django.contrib.auth.models import Permission

    viewer = get_user_model().objects.create_user("viewer", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_llmprovider"))
    client = Client()
    client.force_login(viewer)
    return client


def test_action_needs_change_permission(
    viewer_client: Client, openai_server: FakeOpenAIChat
) -> None:
    provider = openai_provider(openai_server)

    response = run_action(viewer_client, provider)

    # Without change permission the action is not offered, so the POST runs nothing.
    assert response.status_code == 200
    assert "test_selected" not in response.content.decode()
    assert shown_messages(response) == []
    assert openai_server.requests == []


def test_button_needs_change_permission(
    viewer_client: Client, openai_server: FakeOpenAIChat
) -> None:
    provider = openai_provider(openai_server)

    page = viewer_client.get(reverse("admin:llm_llmprovider_change", args=[provider.pk]))
    response = viewer_client.post(button_url(provider))

    assert page.status_code == 200
    assert button_url(provider) not in page.content.decode()
    assert response.status_code == 403
    assert openai_server.requests == []


# -- the per-provider Test button ---------------------------------------------------------


def test_change_page_has_one_test_button_per_backend(
    admin_client: Client, fake_gemini: FakeGemini
) -> None:
    provider = gemini_provider(fake_gemini)

    response = admin_client.get(reverse("admin:llm_llmprovider_change", args=[provider.pk]))

    html = response.content.decode()
    assert f'action="{button_url(provider)}"' in html
    assert re.search(r'name="backend" value="langchain"[^>]*>\s*Test \(langchain\)', html)
    assert re.search(r'name="backend" value="google-native"[^>]*>\s*Test \(google-native\)', html)


def test_button_tests_gemini_on_the_google_native_backend(
    admin_client: Client, fake_gemini: FakeGemini
) -> None:
    provider = gemini_provider(fake_gemini)
    fake_gemini.enqueue(g.text_reply("ok from gemini"))

    response = admin_client.post(button_url(provider), {"backend": "google-native"})

    change_url = reverse("admin:llm_llmprovider_change", args=[provider.pk])
    assert response.status_code == 302
    assert response["Location"] == change_url
    page = admin_client.get(change_url)
    [(level, text)] = shown_messages(page)
    assert level == message_levels.SUCCESS
    assert text.startswith("gemini-fake via google-native: OK, replied “ok from gemini” in ")
    [sent] = fake_gemini.requests
    assert sent.path == "/v1beta/models/gemini-2.5-flash:streamGenerateContent"
    assert sent.body["contents"] == [{"role": "user", "parts": [{"text": "ping"}]}]
    assert_no_key(page)


def test_button_rejects_a_backend_the_type_cannot_use(
    admin_client: Client, openai_server: FakeOpenAIChat
) -> None:
    provider = openai_provider(openai_server)

    response = admin_client.post(button_url(provider), {"backend": "google-native"}, follow=True)

    [(level, text)] = shown_messages(response)
    assert level == message_levels.ERROR
    assert "invalid_request" in text
    assert "allowed: langchain" in text
    assert openai_server.requests == []


def test_button_is_post_only(admin_client: Client, openai_server: FakeOpenAIChat) -> None:
    provider = openai_provider(openai_server)

    response = admin_client.get(button_url(provider))

    assert response.status_code == 405
    assert openai_server.requests == []


def test_button_enforces_csrf(csrf_admin_client: Client, openai_server: FakeOpenAIChat) -> None:
    provider = openai_provider(openai_server)
    openai_server.enqueue(ok_stream("ok"))

    forged = csrf_admin_client.post(button_url(provider))
    assert forged.status_code == 403
    assert openai_server.requests == []

    # The change page's form carries the token; posting it works.
    page = csrf_admin_client.get(reverse("admin:llm_llmprovider_change", args=[provider.pk]))
    token = re.search(
        rf'action="{re.escape(button_url(provider))}">\s*'
        r'<input type="hidden" name="csrfmiddlewaretoken" value="([^"]+)"',
        page.content.decode(),
    )
    assert token, "no CSRF token in the Test form"
    response = csrf_admin_client.post(
        button_url(provider), {"csrfmiddlewaretoken": token.group(1), "backend": "langchain"}
    )
    assert response.status_code == 302
    assert len(openai_server.requests) == 1


def test_button_for_a_missing_provider_redirects_with_a_warning(admin_client: Client) -> None:
    response = admin_client.post(reverse("admin:llm_llmprovider_test", args=[999]), follow=True)

    assert response.redirect_chain[-1][0] == reverse("admin:index")
    assert [level for level, _ in shown_messages(response)] == [message_levels.WARNING]


# -- probe_provider itself -----------------------------------------------------------------


def test_test_provider_reports_a_timeout(write_script: Any) -> None:
    provider = LLMProvider.objects.create(
        name="slow",
        type=ProviderType.SCRIPTED,
        options={"script": write_script([{"text": "one two three"}], chunk_delay=5)},
    )

    result = provider_probe.probe_provider(provider, timeout=0.05)

    assert (result.ok, result.backend, result.code) == (False, "scripted", "timeout")
    assert result.message == "no complete reply within 0.05 s"
    assert result.duration_ms < 2000


def test_test_provider_reports_a_script_error_turn(write_script: Any) -> None:
    provider = LLMProvider.objects.create(
        name="failing",
        type=ProviderType.SCRIPTED,
        options={
            "script": write_script([{"error": {"code": "rate_limit", "message": "slow down"}}])
        },
    )

    result = provider_probe.probe_provider(provider)

    assert result == provider_probe.ProviderTestResult(
        ok=False,
        backend="scripted",
        message="slow down",
        duration_ms=result.duration_ms,
        code="rate_limit",
    )


def test_test_provider_reports_an_empty_reply(write_script: Any) -> None:
    provider = LLMProvider.objects.create(
        name="silent", type=ProviderType.SCRIPTED, options={"script": write_script([{}])}
    )

    result = provider_probe.probe_provider(provider)

    assert (result.ok, result.code) == (False, "empty_response")


def test_test_provider_accepts_a_thinking_only_reply(write_script: Any) -> None:
    provider = LLMProvider.objects.create(
        name="thinker",
        type=ProviderType.SCRIPTED,
        options={"script": write_script([{"thinking": "hmm " * 40}])},
    )

    result = provider_probe.probe_provider(provider)

    assert result.ok
    assert result.message.startswith("replied with thinking only, “hmm hmm")
    # Quoted, not dumped: at most ~80 characters of it.
    assert "…”" in result.message
    assert len(result.message) < 140
