"""The system page: LLM providers and their key variables, warnings, and the effective
configuration with its secrets masked."""

from __future__ import annotations

import html
import re
from datetime import timedelta

import pytest
from django.utils import timezone

from llm.models import LLMProvider, ProviderType
from sessions import services
from sessions.models import WorkerCluster
from sessions.selectors import cluster_silence_limit
from sessions.selectors.system import MASKED, looks_secret

pytestmark = pytest.mark.django_db

KEY_ENV = "TARSY_TEST_GEMINI_KEY"
KEY_VALUE = "AIzaSyD-planted-key-value-0123456789abcd"
WARNING_RE = re.compile(r'<li class="warning" data-category="([a-z_]+)">(.*?)</li>', re.S)


@pytest.fixture
def ready(db, monkeypatch):
    """A system with nothing to warn about: a real default provider whose key is set, a
    live worker cluster and every MCP server healthy."""
    monkeypatch.setenv(KEY_ENV, KEY_VALUE)
    provider = LLMProvider.objects.create(
        name="gemini",
        type=ProviderType.GOOGLE,
        model="gemini-2.5-flash",
        api_key_env=KEY_ENV,
        is_default=True,
    )
    WorkerCluster.objects.create(host="worker-1", pid=42, workers=2, heartbeat_at=timezone.now())
    for server_id in ("kubernetes", "workloads", "changes"):
        services.mcp_server_health_record(server_id=server_id, healthy=True, tools=[])
    return provider


def page_of(client) -> str:
    response = client.get("/system/")
    assert response.status_code == 200
    return response.content.decode()


def warnings_of(page: str) -> list[tuple[str, str]]:
    return [(category, html.unescape(text)) for category, text in WARNING_RE.findall(page)]


def provider_row(page: str, name: str) -> str:
    match = re.search(rf'<tr id="provider-{name}">(.*?)</tr>', page, re.S)
    assert match, f"no row for provider {name!r}"
    return match.group(1)


def test_a_ready_system_has_no_warnings(browser_client, ready):
    page = page_of(browser_client)
    assert warnings_of(page) == []
    assert 'id="no-warnings"' in page


def test_the_providers_table_says_whether_each_key_variable_is_set(
    browser_client, ready, monkeypatch
):
    LLMProvider.objects.create(
        name="claude",
        type=ProviderType.ANTHROPIC,
        model="claude-sonnet-4",
        api_key_env="TARSY_TEST_ANTHROPIC_KEY",
        enabled=False,
    )
    LLMProvider.objects.create(name="demo", type=ProviderType.SCRIPTED, model="demo")
    monkeypatch.delenv("TARSY_TEST_ANTHROPIC_KEY", raising=False)
    page = page_of(browser_client)

    gemini = provider_row(page, "gemini")
    assert "Google Gemini" in gemini
    assert "gemini-2.5-flash" in gemini
    assert f"<code>{KEY_ENV}</code>" in gemini
    assert 'data-key="set"' in gemini
    assert "default" in gemini
    claude = provider_row(page, "claude")
    assert "<code>TARSY_TEST_ANTHROPIC_KEY</code>" in claude
    assert 'data-key="not-set"' in claude
    assert "disabled" in claude
    assert "none needed" in provider_row(page, "demo")
    # The key itself never reaches the page, whole or in part.
    assert KEY_VALUE not in page
    assert KEY_VALUE[:12] not in page


def test_a_key_variable_that_is_not_set_is_a_warning(browser_client, ready, monkeypatch):
    monkeypatch.delenv(KEY_ENV)
    page = page_of(browser_client)
    assert 'data-key="not-set"' in provider_row(page, "gemini")
    [(category, message)] = warnings_of(page)
    assert category == "llm_provider"
    assert f"'gemini' reads its API key from {KEY_ENV}, which is not set" in message


def test_a_disabled_provider_without_its_key_is_not_a_warning(browser_client, ready):
    LLMProvider.objects.create(
        name="claude",
        type=ProviderType.ANTHROPIC,
        model="claude-sonnet-4",
        api_key_env="TARSY_TEST_UNSET_KEY",
        enabled=False,
    )
    assert warnings_of(page_of(browser_client)) == []


def test_demo_mode_is_a_warning_shown_once(browser_client, ready):
    ready.is_default = False
    ready.save()
    LLMProvider.objects.create(
        name="demo", type=ProviderType.SCRIPTED, model="demo", is_default=True
    )
    page = page_of(browser_client)
    [(category, message)] = warnings_of(page)
    assert category == "demo"
    assert message.startswith("Demo mode: the default LLM provider 'demo' is the scripted")
    # The list says it; the banner every other page has would say it twice.
    assert 'id="demo-banner"' not in page


def test_demo_mode_follows_the_default_tarsy_yaml_names(browser_client, ready, tarsy_config):
    LLMProvider.objects.create(name="demo", type=ProviderType.SCRIPTED, model="demo")
    tarsy_config(lambda config: config["defaults"].update(llm_provider="demo"))
    assert [c for c, _ in warnings_of(page_of(browser_client))] == ["demo"]


def test_no_default_provider_is_a_warning(browser_client, ready):
    ready.is_default = False
    ready.save()
    [(category, message)] = warnings_of(page_of(browser_client))
    assert category == "llm_provider"
    assert message.startswith("No default LLM provider")


def test_a_provider_tarsy_yaml_names_that_does_not_exist_is_a_warning(
    browser_client, ready, tarsy_config
):
    def change(config: dict) -> None:
        config["agents"]["KubernetesAgent"]["llm_provider"] = "claude"
        config["agent_chains"]["deep-investigation"]["fallback_providers"] = ["claude"]

    tarsy_config(change)
    [(category, message)] = warnings_of(page_of(browser_client))
    assert category == "llm_provider"
    assert message == (
        "tarsy.yaml names LLM provider 'claude' (agents.KubernetesAgent.llm_provider, "
        "agent_chains.deep-investigation.fallback_providers[0]), which does not exist; add it "
        "in Admin → LLM providers or llm-providers.yaml or change tarsy.yaml."
    )


def test_a_disabled_provider_tarsy_yaml_names_is_a_warning(browser_client, ready, tarsy_config):
    LLMProvider.objects.create(name="summaries", type=ProviderType.SCRIPTED, enabled=False)

    def change(config: dict) -> None:
        config["defaults"]["summarization"] = {"llm_provider": "summaries"}
        config["agent_chains"]["kubernetes-investigation"]["executive_summary_provider"] = (
            "summaries"
        )

    tarsy_config(change)
    [(category, message)] = warnings_of(page_of(browser_client))
    assert category == "llm_provider"
    assert "'summaries' (defaults.summarization.llm_provider, " in message
    assert "agent_chains.kubernetes-investigation.executive_summary_provider)" in message
    assert "which is disabled; enable it in Admin → LLM providers" in message


def test_no_live_worker_cluster_is_a_warning(browser_client, ready):
    limit = cluster_silence_limit()
    # Silent for just longer than /health tolerates.
    WorkerCluster.objects.update(heartbeat_at=timezone.now() - timedelta(seconds=limit + 1))
    [(category, message)] = warnings_of(page_of(browser_client))
    assert category == "worker"
    assert f"No worker cluster has reported in the last {limit:g} s" in message
    assert "manage.py qcluster" in message


def test_an_unhealthy_or_unchecked_mcp_server_is_a_warning(browser_client, ready):
    services.mcp_server_health_record(
        server_id="changes", healthy=False, tools=[], error="MCP server 'changes' exited"
    )
    from sessions.models import MCPServerHealth

    MCPServerHealth.objects.filter(server_id="workloads").delete()
    assert warnings_of(page_of(browser_client)) == [
        ("mcp_server", "MCP server 'changes' is unhealthy: MCP server 'changes' exited."),
        (
            "mcp_server",
            "MCP server 'workloads' has not been checked yet: no worker has started it.",
        ),
    ]


BEARER = "sk-live-abc123def456ghi789jkl012mno345pqr"
GITHUB_TOKEN = "ghp_" + "a1B2c3D4e5F6g7H8i9J0" * 2
DSN_PASSWORD = "hunter2-planted-dsn"
URL_PASSWORD = "url-planted-pw"
ORG_ID = "org-planted-7731"


def test_the_effective_configuration_masks_planted_secrets(
    browser_client, ready, tarsy_config, monkeypatch
):
    monkeypatch.setenv("PLANTED_DSN", f"postgres://tarsy:{DSN_PASSWORD}@db:5432/tarsy")

    def change(config: dict) -> None:
        config["mcp_servers"]["remote"] = {
            "transport": {
                "type": "http",
                "url": f"https://robot:{URL_PASSWORD}@mcp.example.com/mcp",
                "bearer_token_env": "REMOTE_MCP_TOKEN",
                "headers": {"Authorization": f"Bearer {BEARER}", "X-Org": ORG_ID},
            }
        }
        config["mcp_servers"]["kubernetes"]["transport"]["env"] = {
            "DB_DSN": "{{.PLANTED_DSN}}",
            "GITHUB_TOKEN": GITHUB_TOKEN,
        }

    tarsy_config(change)
    page = page_of(browser_client)
    config = html.unescape(re.search(r'id="effective-config".*?<pre>(.*?)</pre>', page, re.S)[1])

    for secret in (BEARER, GITHUB_TOKEN, DSN_PASSWORD, URL_PASSWORD, ORG_ID, KEY_VALUE):
        assert secret not in page
    assert "sk-live" not in page
    # What is left says where each secret comes from, not what it is.
    assert "bearer_token_env: REMOTE_MCP_TOKEN" in config
    assert f"Authorization: '{MASKED}'" in config
    assert f"DB_DSN: '{MASKED}'" in config
    # Masked by name first; the masking of tool results may then relabel what it recognises.
    any_mask = rf"({re.escape(MASKED)}|\[MASKED_\w+\])"
    assert re.search(rf"https://robot:{any_mask}@mcp\.example\.com/mcp", config)
    assert re.search(rf"GITHUB_TOKEN: '{any_mask}'", config)
    assert "KubernetesAgent" in config
    assert "summary_max_token_limit: 1000" in config


@pytest.mark.parametrize(
    ("key", "secret"),
    [
        ("Authorization", True),
        ("X-Api-Key", True),
        ("GITHUB_TOKEN", True),
        ("clientSecret", True),
        ("password", True),
        ("bearer_token_env", False),  # the variable's name
        ("summary_max_token_limit", False),
        ("size_threshold_tokens", False),
        ("custom_instructions", False),
    ],
)
def test_which_keys_hold_secrets(key, secret):
    assert looks_secret(key) is secret


def test_the_skills_are_listed_with_their_text(browser_client, ready, tarsy_config, tmp_path):
    assert "None: put <code>SKILL.md</code> files" in page_of(browser_client)
    (tmp_path / "skills" / "dns").mkdir(parents=True)
    (tmp_path / "skills" / "dns" / "SKILL.md").write_text(
        "---\nname: dns\ndescription: Resolving names.\n---\n# DNS\n\nUse `dig`.\n"
    )
    tarsy_config(lambda config: None)
    page = page_of(browser_client)
    assert "<code>dns</code> — Resolving names." in page
    assert "<code>dig</code>" in page  # the body, as markdown
