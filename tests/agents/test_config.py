from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

from agents.checks import llm_use_problems
from agents.resolver import stage_agent_settings
from config.loader import ConfigError, load_config
from config.providers import file_row
from config.types import FileProvider


def rows(*names: str, default: str | None = None):
    """Providers of these names (Gemini), as the check reads them."""
    made = [file_row(FileProvider(name=n, type="google", model="m")) for n in names]
    for row in made:
        row.is_default = row.name == default
    return made


BASE = {
    "defaults": {"alert_type": "kubernetes"},
    "mcp_servers": {
        "kubernetes": {
            "transport": {"type": "stdio", "command": "{{.PYTHON}}", "args": ["-m", "x"]}
        }
    },
    "agents": {"KubernetesAgent": {"mcp_servers": ["kubernetes"], "max_iterations": 5}},
    "agent_chains": {
        "k8s": {
            "alert_types": ["kubernetes"],
            "stages": [{"name": "investigation", "agents": [{"name": "KubernetesAgent"}]}],
        }
    },
}


def write(tmp_path: Path, config: dict) -> Path:
    path = tmp_path / "tarsy.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def with_change(path: list, value) -> dict:
    import copy

    config = copy.deepcopy(BASE)
    target = config
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return config


def error_for(tmp_path: Path, config: dict) -> str:
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, config))
    return str(info.value)


def test_the_bundled_config_loads():
    config = load_config(Path(__file__).parents[2] / "config" / "tarsy.yaml")
    assert config.defaults.alert_type == "kubernetes"
    assert config.chain_for_alert_type("PodCrashLooping").id == "kubernetes-investigation"
    assert config.mcp_servers["kubernetes"].transport.command == sys.executable


def test_a_valid_config_parses_into_typed_objects(tmp_path):
    config = load_config(write(tmp_path, BASE))
    chain = config.chains["k8s"]
    assert chain.stages[0].agents[0].name == "KubernetesAgent"
    assert config.agents["KubernetesAgent"].mcp_servers == ("kubernetes",)
    assert config.alert_types == ["kubernetes"]


def test_an_unknown_agent_names_file_key_and_the_defined_agents(tmp_path):
    message = error_for(
        tmp_path,
        with_change(["agent_chains", "k8s", "stages"], [{"name": "s", "agents": ["Nope"]}]),
    )
    assert message == (
        "tarsy.yaml: agent_chains.k8s.stages[0].agents[0].name: unknown agent 'Nope'; "
        "defined: SynthesisAgent, ExecSummaryAgent, ChatAgent, ScoringAgent, KubernetesAgent, "
        "GeneralWorker, WebResearcher, CodeExecutor"
    )


def test_an_unknown_key_lists_the_allowed_keys(tmp_path):
    message = error_for(
        tmp_path, with_change(["agents", "KubernetesAgent", "iteration_strategy"], "react")
    )
    assert message.startswith("tarsy.yaml: agents.KubernetesAgent.iteration_strategy: unknown key;")
    assert "custom_instructions" in message
    assert "llm_backend" in message


def test_an_unknown_top_level_key_is_rejected(tmp_path):
    assert "llm_providers: unknown key" in error_for(tmp_path, with_change(["llm_providers"], {}))


def test_an_unknown_mcp_server_names_the_defined_ones(tmp_path):
    message = error_for(
        tmp_path, with_change(["agents", "KubernetesAgent", "mcp_servers"], ["k8s"])
    )
    assert (
        "agents.KubernetesAgent.mcp_servers[0]: unknown MCP server 'k8s'; defined: kubernetes"
        in message
    )


def test_an_unknown_agent_type_lists_the_allowed_types(tmp_path):
    message = error_for(tmp_path, with_change(["agents", "KubernetesAgent", "type"], "planner"))
    assert "agents.KubernetesAgent.type: unknown agent type 'planner'" in message
    for allowed in ("'action'", "'synthesis'", "'exec_summary'", "'scoring'"):
        assert allowed in message


def test_the_default_alert_type_must_have_a_chain(tmp_path):
    message = error_for(tmp_path, with_change(["defaults", "alert_type"], "database"))
    assert (
        "defaults.alert_type: no chain handles alert type 'database'; chains handle: kubernetes"
        in message
    )


def test_an_alert_type_belongs_to_one_chain(tmp_path):
    config = with_change(["agent_chains", "other"], BASE["agent_chains"]["k8s"])
    assert "already handled by chain 'k8s'" in error_for(tmp_path, config)


def test_unsupported_transport_is_named(tmp_path):
    config = with_change(["mcp_servers", "kubernetes", "transport", "type"], "websocket")
    assert "unsupported transport 'websocket'; allowed: stdio" in error_for(tmp_path, config)


def test_a_missing_environment_variable_is_named(tmp_path, monkeypatch):
    monkeypatch.delenv("TARSY_TEST_UNSET", raising=False)
    config = with_change(
        ["mcp_servers", "kubernetes", "transport", "args"], ["{{.TARSY_TEST_UNSET}}"]
    )
    assert "environment variable TARSY_TEST_UNSET is not set" in error_for(tmp_path, config)


def test_environment_variables_are_expanded(tmp_path, monkeypatch):
    monkeypatch.setenv("TARSY_TEST_ARG", "--read-only")
    config = with_change(
        ["mcp_servers", "kubernetes", "transport", "args"], ["{{ .TARSY_TEST_ARG }}"]
    )
    assert load_config(write(tmp_path, config)).mcp_servers["kubernetes"].transport.args == (
        "--read-only",
    )


@pytest.mark.parametrize("value", [0, -3, "ten", True])
def test_max_iterations_must_be_a_positive_whole_number(tmp_path, value):
    message = error_for(
        tmp_path, with_change(["agents", "KubernetesAgent", "max_iterations"], value)
    )
    assert "agents.KubernetesAgent.max_iterations: expected a whole number of at least 1" in message


def parallel_chain(**stage) -> dict:
    config = with_change(
        ["agent_chains", "k8s", "stages"],
        [{"name": "investigation", "agents": ["KubernetesAgent", "EventsAgent"], **stage}],
    )
    config["agents"]["EventsAgent"] = {
        "mcp_servers": ["kubernetes"],
        "description": "Reads events",
    }
    return config


def test_a_parallel_stage_with_policy_synthesis_and_sub_agents(tmp_path):
    config = parallel_chain(
        success_policy="all",
        synthesis={"agent": "SynthesisAgent", "llm_provider": "claude"},
        sub_agents=["EventsAgent", {"name": "EventsAgent", "max_iterations": 3}],
    )
    config["defaults"]["success_policy"] = "any"
    config["defaults"]["orchestrator"] = {"max_concurrent_agents": 2, "agent_timeout": "10m"}
    config["agents"]["KubernetesAgent"]["orchestrator"] = {"max_budget": 90}
    config["agent_chains"]["k8s"]["executive_summary_provider"] = "cheap"
    loaded = load_config(write(tmp_path, config))
    stage = loaded.chains["k8s"].stages[0]
    assert stage.parallel
    assert stage.success_policy == "all"
    assert stage.synthesis.llm_provider == "claude"
    assert [r.max_iterations for r in stage.sub_agents] == [None, 3]
    assert loaded.chains["k8s"].executive_summary_provider == "cheap"
    settings = stage_agent_settings(loaded, loaded.chains["k8s"], stage, stage.agents[0])
    assert settings.orchestrator.max_concurrent_agents == 2  # defaults
    assert settings.orchestrator.agent_timeout == 600.0  # "10m"
    assert settings.orchestrator.max_budget == 90.0  # the agent's own
    assert [r.name for r in settings.sub_agents] == ["EventsAgent", "EventsAgent"]


def test_sub_agents_resolve_stage_agent_then_stage_then_chain(tmp_path):
    config = parallel_chain(sub_agents=["EventsAgent"])
    config["agent_chains"]["k8s"]["sub_agents"] = ["KubernetesAgent"]
    config["agent_chains"]["k8s"]["stages"][0]["agents"][0] = {
        "name": "KubernetesAgent",
        "sub_agents": [{"name": "EventsAgent", "max_iterations": 2}],
    }
    config["agents"]["KubernetesAgent"]["description"] = "Kubernetes"
    loaded = load_config(write(tmp_path, config))
    chain = loaded.chains["k8s"]
    stage = chain.stages[0]
    first = stage_agent_settings(loaded, chain, stage, stage.agents[0])
    second = stage_agent_settings(loaded, chain, stage, stage.agents[1])
    assert [(r.name, r.max_iterations) for r in first.sub_agents] == [("EventsAgent", 2)]
    assert [r.name for r in second.sub_agents] == ["EventsAgent"]  # the stage's list


def test_replicas_run_copies_of_one_agent(tmp_path):
    from agents.resolver import stage_settings

    config = with_change(["agent_chains", "k8s", "stages", 0, "replicas"], 3)
    loaded = load_config(write(tmp_path, config))
    chain = loaded.chains["k8s"]
    assert [s.name for s in stage_settings(loaded, chain, chain.stages[0])] == [
        "KubernetesAgent"
    ] * 3


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"replicas": 2}, "stages[0].replicas: replicas run copies of one agent"),
        ({"success_policy": "most"}, "stages[0].success_policy: unknown success policy 'most'"),
        ({"synthesis": {"agent": "KubernetesAgent"}}, "'KubernetesAgent' is not a synthesis agent"),
        ({"synthesis": {"agnet": "x"}}, "stages[0].synthesis.agnet: unknown key"),
        ({"sub_agents": ["Ghost"]}, "stages[0].sub_agents[0]: unknown agent 'Ghost'"),
        ({"sub_agents": ["SynthesisAgent"]}, "'SynthesisAgent' is a synthesis agent"),
    ],
)
def test_stage_mistakes_are_named(tmp_path, change, expected):
    assert expected in error_for(tmp_path, parallel_chain(**change))


@pytest.mark.parametrize(
    ("value", "expected"),
    [("5m", 300.0), ("90s", 90.0), ("1h", 3600.0), (45, 45.0), ("250ms", 0.25)],
)
def test_durations(tmp_path, value, expected):
    config = with_change(["defaults", "orchestrator"], {"agent_timeout": value})
    assert load_config(write(tmp_path, config)).defaults.orchestrator.agent_timeout == expected


def test_a_bad_duration_is_named(tmp_path):
    config = with_change(["defaults", "orchestrator"], {"agent_timeout": "soon"})
    assert "defaults.orchestrator.agent_timeout: expected a duration" in error_for(tmp_path, config)


def test_builtin_agents_exist_and_a_yaml_entry_replaces_one(tmp_path):
    loaded = load_config(write(tmp_path, BASE))
    assert loaded.agents["SynthesisAgent"].type == "synthesis"
    assert loaded.agents["ExecSummaryAgent"].type == "exec_summary"
    config = with_change(
        ["agents", "SynthesisAgent"], {"type": "synthesis", "custom_instructions": "Be brief."}
    )
    assert load_config(write(tmp_path, config)).agents["SynthesisAgent"].custom_instructions == (
        "Be brief."
    )


def test_the_orchestrator_server_id_is_reserved(tmp_path):
    config = with_change(["mcp_servers", "orchestrator"], BASE["mcp_servers"]["kubernetes"])
    assert "'orchestrator' is reserved" in error_for(tmp_path, config)


def test_broken_yaml_and_missing_file(tmp_path):
    path = tmp_path / "tarsy.yaml"
    path.write_text("defaults: [unclosed")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(path)
    with pytest.raises(ConfigError, match="file not found"):
        load_config(tmp_path / "missing.yaml")


def test_hierarchy_defaults_agent_chain_stage_stage_agent(tmp_path):
    config = with_change(["defaults", "max_iterations"], 30)
    config["defaults"]["llm_provider"] = "from-defaults"
    config["agent_chains"]["k8s"]["max_iterations"] = 7
    config["agent_chains"]["k8s"]["llm_backend"] = "langchain"
    config["agent_chains"]["k8s"]["stages"][0]["agents"][0]["llm_provider"] = "from-stage-agent"
    loaded = load_config(write(tmp_path, config))
    chain = loaded.chains["k8s"]
    resolved = stage_agent_settings(loaded, chain, chain.stages[0], chain.stages[0].agents[0])
    assert resolved.max_iterations == 7  # chain beats agent (5) and defaults (30)
    assert resolved.llm_provider == "from-stage-agent"
    assert resolved.llm_backend == "langchain"
    assert resolved.mcp_servers == ("kubernetes",)


def test_an_unknown_backend_is_named_when_the_file_loads(tmp_path):
    config = with_change(["agents", "KubernetesAgent", "llm_backend"], "react")
    assert (
        "tarsy.yaml: agents.KubernetesAgent.llm_backend: unknown backend 'react'; "
        "allowed: google-native, langchain, scripted"
    ) in error_for(tmp_path, config)


def test_an_unknown_provider_is_named_with_the_key_that_uses_it(tmp_path):
    config = with_change(["defaults", "llm_provider"], "gemini")
    problems = llm_use_problems(load_config(write(tmp_path, config)), rows("demo"))
    assert problems[0].startswith(
        "tarsy.yaml: agent_chains.k8s.stages[0] (KubernetesAgent): LLM provider 'gemini' "
        "(used by KubernetesAgent) does not exist; providers: demo"
    )


def test_no_provider_at_all_is_a_problem(tmp_path):
    problems = llm_use_problems(load_config(write(tmp_path, BASE)), rows("gemini"))
    assert problems == [
        "tarsy.yaml: agent_chains.k8s.stages[0] (KubernetesAgent): No LLM provider is "
        "configured: mark one as default in Django admin → LLM providers or set "
        "defaults.llm_provider in tarsy.yaml"
    ]


def test_a_sub_agent_without_a_description_is_left_out_with_a_warning(tmp_path):
    # TARSy leaves it out of the catalog silently; here manage.py check says so.
    config = with_change(["agents", "Quiet"], {"mcp_servers": ["kubernetes"]})
    config["agent_chains"]["k8s"]["stages"][0]["sub_agents"] = ["Quiet", "GeneralWorker"]
    loaded = load_config(write(tmp_path, config))
    assert loaded.warnings == (
        "tarsy.yaml: agent_chains.k8s.stages[0].sub_agents[0]: agent 'Quiet' has no "
        "description, so it is left out of the sub-agents offered (the dispatching agent "
        "chooses by description); give it one",
    )
    chain = loaded.chains["k8s"]
    settings = stage_agent_settings(loaded, chain, chain.stages[0], chain.stages[0].agents[0])
    assert [ref.name for ref in settings.sub_agents] == ["GeneralWorker"]


def test_fallback_providers_resolve_like_other_settings(tmp_path):
    config = with_change(["defaults", "fallback_providers"], ["gemini"])
    config["agent_chains"]["k8s"]["fallback_providers"] = [
        {"provider": "claude", "backend": "langchain"},
        "gpt",
    ]
    loaded = load_config(write(tmp_path, config))
    chain = loaded.chains["k8s"]
    resolved = stage_agent_settings(loaded, chain, chain.stages[0], chain.stages[0].agents[0])
    assert [(f.provider, f.backend) for f in resolved.fallback_providers] == [
        ("claude", "langchain"),
        ("gpt", None),
    ]
    problems = llm_use_problems(loaded, rows("gemini", "claude", default="gemini"))
    assert problems == [
        "tarsy.yaml: agent_chains.k8s.stages[0] (KubernetesAgent) fallback_providers[1]: "
        "LLM provider 'gpt' (used by KubernetesAgent) does not exist; providers: claude, "
        "gemini. Add it in Django admin → LLM providers or llm-providers.yaml"
    ]


def test_a_fallback_entry_needs_a_provider(tmp_path):
    message = error_for(
        tmp_path, with_change(["defaults", "fallback_providers"], [{"backend": "langchain"}])
    )
    assert "defaults.fallback_providers[0].provider: is required" in message


def test_model_rates_price_by_longest_prefix(tmp_path):
    config = with_change(
        ["system"],
        {
            "cost_estimation": {
                "model_rates": {
                    "gemini-2.5": {"input_per_million": 1, "output_per_million": 2},
                    "gemini-2.5-pro": {"input_per_million": 10, "output_per_million": 20},
                }
            }
        },
    )
    cost = load_config(write(tmp_path, config)).cost_estimation
    assert cost.estimate("gemini-2.5-pro-002", 1_000_000, 1_000_000) == 30
    assert cost.estimate("gemini-2.5-flash", 1_000_000, 0) == 1
    assert cost.estimate("claude-sonnet", 5, 5) is None


def test_a_rate_must_have_both_prices(tmp_path):
    config = with_change(
        ["system"], {"cost_estimation": {"model_rates": {"m": {"input_per_million": 1}}}}
    )
    assert "system.cost_estimation.model_rates.m: missing output_per_million" in error_for(
        tmp_path, config
    )


def test_agent_native_tools_are_checked(tmp_path):
    config = with_change(["agents", "KubernetesAgent", "native_tools"], ["google_search", "web"])
    message = error_for(tmp_path, config)
    assert "agents.KubernetesAgent.native_tools[1]: unknown native tool 'web'" in message
    config["agents"]["KubernetesAgent"]["native_tools"] = ["code_execution"]
    loaded = load_config(write(tmp_path, config))
    chain = loaded.chains["k8s"]
    resolved = stage_agent_settings(loaded, chain, chain.stages[0], chain.stages[0].agents[0])
    assert resolved.native_tools == ("code_execution",)


def test_http_and_sse_servers_with_masking_and_summarization(tmp_path, monkeypatch):
    monkeypatch.setenv("TARSY_TEST_TEAM", "sre")
    config = with_change(
        ["mcp_servers", "prometheus"],
        {
            "transport": {
                "type": "http",
                "url": "https://prometheus-mcp.internal/mcp",
                "bearer_token_env": "PROMETHEUS_MCP_TOKEN",
                "headers": {"X-Team": "{{.TARSY_TEST_TEAM}}", "X-Exec": "{{.SESSION_ID}}"},
                "verify_ssl": False,
                "timeout": "10s",
            },
            "init_timeout": "45s",
            "call_timeout": 120,
            "data_masking": {
                "pattern_groups": ["security"],
                "custom_patterns": [{"pattern": "TCK-[0-9]+", "replacement": "[T]"}],
            },
            "summarization": {"size_threshold_tokens": 2000, "llm_provider": "flash"},
        },
    )
    config["mcp_servers"]["events"] = {"transport": {"type": "sse", "url": "http://e:8080/sse"}}
    config["defaults"]["summarization"] = {"llm_provider": "flash", "llm_backend": "langchain"}
    parsed = load_config(write(tmp_path, config))
    prometheus = parsed.mcp_servers["prometheus"]
    transport = prometheus.transport
    assert (transport.type, transport.url, transport.bearer_token_env) == (
        "http",
        "https://prometheus-mcp.internal/mcp",
        "PROMETHEUS_MCP_TOKEN",
    )
    # The environment is read at load; the execution id is filled in per connection.
    assert transport.headers == {"X-Team": "sre", "X-Exec": "{{.SESSION_ID}}"}
    assert transport.per_execution
    assert (transport.verify_ssl, transport.timeout) == (False, 10.0)
    assert (prometheus.init_timeout, prometheus.call_timeout) == (45.0, 120.0)
    assert prometheus.data_masking.pattern_groups == ("security",)
    assert prometheus.summarization.size_threshold_tokens == 2000
    assert prometheus.summarization.summary_max_token_limit == 1000
    assert parsed.mcp_servers["events"].transport.type == "sse"
    assert not parsed.mcp_servers["events"].transport.per_execution
    assert parsed.defaults.summarization_provider == "flash"


@pytest.mark.parametrize(
    ("server", "message"),
    [
        ({"transport": {"type": "http"}}, "mcp_servers.x.transport.url: is required"),
        (
            {"transport": {"type": "http", "url": "ftp://x"}},
            "expected an http:// or https:// URL",
        ),
        (
            {"transport": {"type": "sse", "url": "http://x", "command": "y"}},
            "mcp_servers.x.transport.command: unknown key",
        ),
        (
            {
                "transport": {"type": "stdio", "command": "x"},
                "data_masking": {"pattern_groups": ["nope"]},
            },
            "mcp_servers.x.data_masking.pattern_groups[0]",
        ),
        (
            {
                "transport": {"type": "stdio", "command": "x"},
                "data_masking": {"custom_patterns": [{"pattern": "(", "replacement": "y"}]},
            },
            "mcp_servers.x.data_masking.custom_patterns[0].pattern",
        ),
        (
            {
                "transport": {"type": "stdio", "command": "x"},
                "summarization": {"size_threshold_tokens": 0},
            },
            "mcp_servers.x.summarization.size_threshold_tokens: expected a whole number",
        ),
    ],
)
def test_bad_mcp_server_settings_are_named(tmp_path, server, message):
    config = with_change(["mcp_servers", "x"], server)
    assert message in error_for(tmp_path, config)


def test_summarization_providers_are_checked_against_the_database(tmp_path):
    config = with_change(
        ["mcp_servers", "kubernetes", "summarization"], {"llm_provider": "nowhere"}
    )
    problems = llm_use_problems(load_config(write(tmp_path, config)), rows("demo", default="demo"))
    assert problems == [
        "tarsy.yaml: mcp_servers.kubernetes.summarization: LLM provider 'nowhere' (used by "
        "mcp_servers.kubernetes.summarization) does not exist; providers: demo. Add it in "
        "Django admin → LLM providers or llm-providers.yaml"
    ]
