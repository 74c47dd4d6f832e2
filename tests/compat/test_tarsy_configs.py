"""A TARSy config directory works here as it is (issue 20).

Every configuration of TARSy's own end-to-end tests, and its deploy example, loads and
passes ``manage.py check`` unchanged (tests/compat/tarsy_configs/README.md says where they
come from); a misspelled key fails the check, naming the file and the key.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.checks import ERROR

from agents.checks import configuration_messages
from agents.resolver import exec_summary_settings, pick_provider, stage_settings
from config.loader import ConfigError, load_config
from config.providers import provider_rows
from config.queue import queue_settings

CONFIGS = Path(__file__).parent / "tarsy_configs"
ROOT = Path(__file__).parents[2]
E2E = sorted(
    path.name for path in CONFIGS.iterdir() if path.is_dir() and path.name != "deploy-example"
)
# What the deploy example reads from the environment ({{.VAR}}).
EXAMPLE_ENV = {
    "KUBECONFIG": "/etc/kubeconfig",
    "ARGOCD_SERVER": "argocd.example.com",
    "ARGOCD_TOKEN": "argocd-token-from-env",
    "CLI_MCP_BEARER_TOKEN": "cli-token-from-env",
    "MONITORING_MCP_URL": "https://monitoring.example.com/mcp",
    "MONITORING_TOKEN": "monitoring-token-from-env",
}


def test_all_of_tarsys_e2e_configurations_are_here():
    assert len(E2E) == 23


@pytest.mark.django_db
@pytest.mark.parametrize("name", E2E)
def test_each_loads_and_passes_the_check_unchanged(name):
    config = load_config(CONFIGS / name)
    errors = [m for m in configuration_messages(config) if m.level >= ERROR]
    assert errors == []
    # What is accepted but not built yet is said, never silently dropped.
    assert not [w for w in config.warnings if "is not built in this version yet" in w]
    if name.startswith("memory"):
        assert config.defaults.memory.enabled
    # Skills are: each configuration's skills/ loads, and its names resolve.
    if name.startswith("skills") or name == "concurrency":
        assert config.skills


@pytest.mark.django_db
def test_the_deploy_example_loads_and_passes(monkeypatch):
    for key, value in EXAMPLE_ENV.items():
        monkeypatch.setenv(key, value)
    config = load_config(CONFIGS / "deploy-example")
    assert [m.msg for m in configuration_messages(config) if m.level >= ERROR] == []
    cli = config.mcp_servers["cli-mcp-server"].transport
    assert cli.bearer_token == "cli-token-from-env"
    assert cli.headers == {"X-Session-ID": "{{.SESSION_ID}}"}
    assert cli.session_cleanup_url == "https://cli-mcp-server:8443/sessions/{{.SESSION_ID}}"
    assert "cli-token-from-env" not in repr(cli)
    assert set(config.llm_providers) >= {"gemini-2.5-flash", "openai-gemini-proxy", "grok-4"}
    advanced = config.chains["investigation-with-subagents-advanced"].stages[0].agents[0]
    assert advanced.orchestrator.agent_timeout == 420
    assert [ref.name for ref in advanced.sub_agents] == [
        "KubernetesAgent",
        "WebResearcher",
        "CodeExecutor",
        "GeneralWorker",
    ]
    # The file's KubernetesAgent has no description: TARSy leaves it out of the
    # sub-agents offered; here the check says so.
    assert any("agent 'KubernetesAgent' has no description" in w for w in config.warnings)


@pytest.mark.django_db
def test_the_pipeline_resolves_as_tarsy_resolves_it():
    config = load_config(CONFIGS / "pipeline")
    rows = provider_rows(config)
    chain = config.chains["test-chain"]
    # defaults.alert_type is unset: TARSy's default, handled by its built-in chain.
    assert config.defaults.alert_type == "kubernetes"
    assert config.chain_for_alert_type("kubernetes").id == "kubernetes"
    remediator = stage_settings(config, chain, chain.stages[1])[0]
    assert pick_provider(rows, remediator.llm_provider, remediator.llm_backend, "x")[1] == (
        "langchain"
    )
    # The summary's provider is OpenAI while the chain says google-native: the backend
    # the chain chose for its Gemini provider gives way to the one OpenAI needs, so the
    # session gets its executive summary.
    summary = exec_summary_settings(config, chain)
    row, backend = pick_provider(
        rows, summary.llm_provider, summary.llm_backend, "x", pinned=summary.backend_pinned
    )
    assert (row.name, row.source, backend) == (
        "test-provider-fast",
        "llm-providers.yaml",
        "langchain",
    )
    replicas = stage_settings(config, chain, chain.stages[3])
    assert [agent.name for agent in replicas] == ["ScalingReviewer", "ScalingReviewer"]
    assert rows[[r.name for r in rows].index("test-provider")].native_tools == ["google_search"]


@pytest.mark.django_db
def test_a_backend_chosen_with_its_provider_that_cannot_drive_it_is_refused(tmp_path):
    shutil.copytree(CONFIGS / "pipeline", tmp_path / "cfg")
    path = tmp_path / "cfg" / "tarsy.yaml"
    path.write_text(
        path.read_text()
        .replace(
            'executive_summary_provider: "test-provider-fast"',
            'executive_summary_provider: "test-provider-fast"\n    chat:\n      enabled: false',
            1,
        )
        .replace(
            '          llm_provider: "test-provider-fast"\n          llm_backend: "langchain"',
            '          llm_provider: "test-provider-fast"\n          llm_backend: "google-native"',
        )
    )
    messages = [m.msg for m in configuration_messages(load_config(tmp_path / "cfg"))]
    assert messages == [
        f"{path}: agent_chains.test-chain.stages[3].synthesis: llm_backend 'google-native' "
        "cannot drive provider 'test-provider-fast' of type 'openai' (used by SynthesisAgent); "
        "allowed: langchain"
    ]


def test_a_misspelled_provider_key_names_the_file_and_the_key(tmp_path):
    shutil.copytree(CONFIGS / "pipeline", tmp_path / "cfg")
    path = tmp_path / "cfg" / "llm-providers.yaml"
    path.write_text(path.read_text().replace("model: test-model-fast", "modle: test-model-fast"))
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path / "cfg")
    assert str(info.value) == (
        f"{path}: llm_providers.test-provider-fast.modle: unknown key; allowed: api_key_env, "
        "base_url, credentials_env, location_env, model, native_tools, project_env, type"
    )


def manage_check(config: Path, data_dir: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TARSY_CONFIG": str(config), "TARSY_DATA_DIR": str(data_dir)}
    return subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_manage_py_check_passes_a_tarsy_directory_and_names_a_misspelled_key(tmp_path):
    assert manage_check(CONFIGS / "pipeline", tmp_path / "data").returncode == 0
    shutil.copytree(CONFIGS / "pipeline", tmp_path / "cfg")
    path = tmp_path / "cfg" / "tarsy.yaml"
    path.write_text(path.read_text().replace("max_iterations: 1 ", "max_iteration: 1 "))
    result = manage_check(tmp_path / "cfg", tmp_path / "data")
    assert result.returncode == 1
    assert f"(tarsy.E010) {path}: agents.MetricsValidator.max_iteration: unknown key" in (
        result.stderr
    )
    assert "Traceback" not in result.stderr


# --- queue: ---------------------------------------------------------------------------


def test_the_queue_block_sets_the_settings_it_stands_for():
    assert queue_settings(CONFIGS / "deploy-example") == {
        "TARSY_MAX_CONCURRENT_SESSIONS": 5,
        "TARSY_QUEUE_POLL": 1.0,
        "TARSY_SESSION_TIMEOUT": 2400.0,
        "TARSY_SHUTDOWN_GRACE": 2400.0,
        "TARSY_RECOVERY_INTERVAL": 300.0,
        "TARSY_ORPHAN_THRESHOLD": 300.0,
    }
    assert queue_settings(CONFIGS / "pipeline") == {}


def test_a_queue_block_that_cannot_be_read_leaves_the_defaults(tmp_path):
    """Start-up goes on; the check names the mistake (tarsy.E010)."""
    (tmp_path / "tarsy.yaml").write_text("queue:\n  session_timeout: soon\n")
    assert queue_settings(tmp_path) == {}
    (tmp_path / "tarsy.yaml").write_text("queue: [\n")
    assert queue_settings(tmp_path) == {}
    assert queue_settings(tmp_path / "missing") == {}


def test_queue_keys_with_no_counterpart_are_named_by_the_check(monkeypatch):
    for key, value in EXAMPLE_ENV.items():
        monkeypatch.setenv(key, value)
    warnings = load_config(CONFIGS / "deploy-example").warnings
    for key in ("worker_count", "poll_interval_jitter"):
        assert any(f"queue.{key}: accepted, not applied" in w for w in warnings), key


def test_the_environment_wins_over_the_queue_block(tmp_path):
    QUEUED = ("TARSY_SESSION_TIMEOUT", "TARSY_MAX_CONCURRENT_SESSIONS")

    def settings_with(**env: str) -> list[str]:
        code = (
            "from django.conf import settings as s; "
            "print(s.TARSY_SESSION_TIMEOUT, s.TARSY_MAX_CONCURRENT_SESSIONS, s.Q_CLUSTER['timeout'])"
        )
        result = subprocess.run(
            [sys.executable, "-c", code],
            cwd=ROOT,
            env={
                **{k: v for k, v in os.environ.items() if k not in QUEUED},
                "DJANGO_SETTINGS_MODULE": "tarsy_site.settings",
                "TARSY_DATA_DIR": str(tmp_path),
                "TARSY_CONFIG": str(CONFIGS / "deploy-example"),
                **env,
            },
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 0, result.stderr
        return result.stdout.split()

    # The file's 40m and 5; django-q2's own timeout stays above the session's.
    assert settings_with() == ["2400.0", "5", "2520"]
    assert settings_with(TARSY_SESSION_TIMEOUT="60", TARSY_MAX_CONCURRENT_SESSIONS="7") == [
        "60.0",
        "7",
        "180",
    ]


# --- the read routes TARSy's clients call about the configuration -----------------------


@pytest.fixture
def tarsy_dir(settings):
    """Run with one of TARSy's config directories as TARSY_CONFIG."""
    from config.loader import get_config

    def use(name: str) -> None:
        settings.TARSY_CONFIG = str(CONFIGS / name)
        get_config.cache_clear()

    yield use
    get_config.cache_clear()


@pytest.fixture
def api(client, user):
    from sessions.auth import api_token_create

    token = api_token_create(username=user.username)
    return lambda path: client.get(f"/api/v1{path}", HTTP_AUTHORIZATION=f"Bearer {token}")


def test_the_skills_are_listed_and_each_is_served_with_its_text(api, tarsy_dir):
    tarsy_dir("skills")
    listed = api("/system/config").json()["skills"]
    assert listed == {
        "kubernetes-basics": {
            "name": "kubernetes-basics",
            "description": listed["kubernetes-basics"]["description"],
        },
        "networking": {
            "name": "networking",
            "description": "Network troubleshooting skills including DNS resolution, TCP "
            "connectivity, and packet analysis.",
        },
    }
    one = api("/system/config/skills/networking")
    assert one.status_code == 200
    assert one.json()["body"].startswith("\n# Networking\n\n## DNS Resolution")
    missing = api("/system/config/skills/definitely-missing-skill")
    assert (missing.status_code, missing.json()["error"]) == (404, "skill not found")


def test_default_tools_as_tarsy_computes_them(api, tarsy_dir):
    tarsy_dir("pipeline")
    answer = api("/system/default-tools?alert_type=test-alert")
    assert answer.status_code == 200
    # No chain-level servers: the union of what the chain's agents use.
    assert answer.json() == {
        "alert_type": "test-alert",
        "mcp_servers": ["prometheus-mcp", "test-mcp"],
        "native_tools": {"google_search": True, "code_execution": False, "url_context": False},
    }
    everything = api("/system/default-tools?alert_type=nope").json()
    assert everything["mcp_servers"] == ["kubernetes-server", "prometheus-mcp", "test-mcp"]
    assert "alert_type" not in api("/system/default-tools").json()


def test_the_config_view_shows_what_runs_and_no_secret(api, tarsy_dir, monkeypatch):
    for key, value in EXAMPLE_ENV.items():
        monkeypatch.setenv(key, value)
    tarsy_dir("deploy-example")
    answer = api("/system/config")
    assert answer.status_code == 200
    text = answer.content.decode()
    for secret in ("argocd-token-from-env", "cli-token-from-env", "monitoring-token-from-env"):
        assert secret not in text
    view = answer.json()
    assert list(view) == [
        "defaults",
        "queue",
        "system",
        "agents",
        "chains",
        "mcp_servers",
        "llm_providers",
        "skills",
    ]
    cli = view["mcp_servers"]["cli-mcp-server"]["transport"]
    assert cli == {
        "type": "http",
        "url": "https://cli-mcp-server:8443/mcp",
        "bearer_token_set": True,
        "verify_ssl": False,
        "timeout": 90.0,
        "custom_header_keys": ["X-Session-ID"],
        "session_cleanup_url": "https://cli-mcp-server:8443/sessions/{{.SESSION_ID}}",
    }
    argocd = view["mcp_servers"]["argocd-server"]["transport"]
    assert argocd["args"] == ["***"]
    assert argocd["command"] == "npx"
    assert view["queue"]["session_timeout"].endswith("m")
    assert list(view["agents"]) == sorted(view["agents"])
    assert view["llm_providers"]["gemini-2.5-flash"]["native_tools"] == {
        "google_search": True,
        "code_execution": False,
        "url_context": True,
    }
    assert view["skills"] == {}


def test_admin_lists_the_files_providers_beside_its_own(admin_client, tarsy_dir):
    from llm.models import LLMProvider, ProviderType

    tarsy_dir("pipeline")
    LLMProvider.objects.create(name="local", type=ProviderType.SCRIPTED, model="demo")
    page = admin_client.get("/admin/llm/llmprovider/").content.decode()
    assert "local" in page  # admin's own rows, as before
    table = page[page.index('id="configured-providers"') :]
    assert "test-provider-fast" in table
    assert "test-model-fast" in table
    assert "llm-providers.yaml" in table


def test_a_file_provider_without_a_key_variable_reads_its_sdks(monkeypatch):
    from config.providers import file_row
    from config.types import FileProvider

    monkeypatch.setenv("TARSY_GOOGLE_BASE_URL", "http://gateway.internal:8080")
    gemini = file_row(FileProvider(name="g", type="google", model="m"))
    assert (gemini.api_key_env, gemini.base_url) == (
        "GOOGLE_API_KEY",
        "http://gateway.internal:8080",
    )
    # The variable wins over a provider's own base_url (one gateway for all of them).
    own = file_row(FileProvider(name="o", type="google", model="m", base_url="https://own"))
    assert own.base_url == "http://gateway.internal:8080"
    monkeypatch.delenv("TARSY_GOOGLE_BASE_URL")
    own = file_row(FileProvider(name="o", type="google", model="m", base_url="https://own"))
    assert own.base_url == "https://own"
    # A keyless OpenAI-compatible server stays keyless.
    local = file_row(
        FileProvider(name="v", type="openai", model="m", base_url="http://vllm:8000/v1")
    )
    assert local.api_key_env == ""
