"""tarsy.yaml's schema (config/schema.py): pydantic's own errors in TARSy's words, every
mistake on its own line, and the file as docs/configuration.md shows it."""

from __future__ import annotations

import copy
import dataclasses
import inspect
import re
from pathlib import Path

import pytest
import yaml

from config import schema
from config.fields import Schema
from config.loader import ConfigError, load_config
from tests.agents.test_config import BASE, error_for, with_change, write

CONFIGURATION_DOC = Path(__file__).parents[2] / "docs" / "configuration.md"


def lines_for(tmp_path: Path, config: dict) -> list[str]:
    return error_for(tmp_path, config).split("\n")


@pytest.mark.parametrize(
    ("path", "value", "expected"),
    [
        # What pydantic itself checks, in the words of the rest.
        (["agents"], ["KubernetesAgent"], "agents: expected a mapping, got list"),
        (
            ["agent_chains", "k8s", "stages", 0, "agents", 0],
            5,
            "agent_chains.k8s.stages[0].agents[0]: expected a mapping, got int",
        ),
        (
            ["mcp_servers", "kubernetes", "transport"],
            {"type": "sse"},
            "mcp_servers.kubernetes.transport.url: is required",
        ),
        (["defaults"], {"alert_type": 3}, "defaults.alert_type: expected a string, got int"),
        # YAML reads yes, 5 and 1.5 as what they look like: none is a string.
        (
            ["agents", "KubernetesAgent", "description"],
            True,
            "agents.KubernetesAgent.description: expected a string, got bool",
        ),
        (
            ["agents", "KubernetesAgent", "mcp_servers"],
            ["kubernetes", 5],
            "agents.KubernetesAgent.mcp_servers[1]: expected a string, got int",
        ),
        (
            ["agents", "KubernetesAgent", "max_iterations"],
            "5",
            "agents.KubernetesAgent.max_iterations: expected a whole number of at least 1, got '5'",
        ),
        (
            ["system"],
            {"slack": {"enabled": "yes"}},
            "system.slack.enabled: expected true or false, got 'yes'",
        ),
        (
            ["agent_chains", "k8s", "sub_agents"],
            "KubernetesAgent",
            "agent_chains.k8s.sub_agents: expected a list of agent names",
        ),
    ],
)
def test_type_errors_name_file_key_and_what_is_expected(tmp_path, path, value, expected):
    assert lines_for(tmp_path, with_change(path, value)) == [f"tarsy.yaml: {expected}"]


def test_every_unknown_key_is_named_with_the_allowed_ones(tmp_path):
    config = with_change(["agent_chains", "k8s", "stages", 0, "agnet"], "KubernetesAgent")
    config["agent_chains"]["k8s"]["stages"][0]["polcy"] = "all"
    allowed = (
        "allowed: agent, agents, fallback_providers, max_iterations, mcp_servers, name, "
        "replicas, sub_agents, success_policy, synthesis"
    )
    assert lines_for(tmp_path, config) == [
        f"tarsy.yaml: agent_chains.k8s.stages[0].agnet: unknown key; {allowed}",
        f"tarsy.yaml: agent_chains.k8s.stages[0].polcy: unknown key; {allowed}",
    ]


def test_each_mistake_has_its_own_line(tmp_path):
    config = with_change(["agents", "KubernetesAgent", "max_iterations"], 0)
    config["defaults"]["success_policy"] = "most"
    assert lines_for(tmp_path, config) == [
        "tarsy.yaml: defaults.success_policy: unknown success policy 'most'; allowed: any, all",
        "tarsy.yaml: agents.KubernetesAgent.max_iterations: expected a whole number of at "
        "least 1, got 0",
    ]


def test_every_broken_reference_is_named(tmp_path):
    config = with_change(["agents", "KubernetesAgent", "mcp_servers"], ["k8s", "kubernetes", "x"])
    config["agent_chains"]["k8s"]["stages"][0]["agents"].append("Ghost")
    config["agent_chains"]["k8s"]["chat"] = {"agent": "SynthesisAgent"}
    assert lines_for(tmp_path, config) == [
        "tarsy.yaml: agents.KubernetesAgent.mcp_servers[0]: unknown MCP server 'k8s'; "
        "defined: kubernetes, kubernetes-server",
        "tarsy.yaml: agents.KubernetesAgent.mcp_servers[2]: unknown MCP server 'x'; "
        "defined: kubernetes, kubernetes-server",
        "tarsy.yaml: agent_chains.k8s.stages[0].agents[1].name: unknown agent 'Ghost'; "
        "defined: SynthesisAgent, ExecSummaryAgent, ChatAgent, ScoringAgent, KubernetesAgent, "
        "GeneralWorker, WebResearcher, CodeExecutor",
        "tarsy.yaml: agent_chains.k8s.chat.agent: 'SynthesisAgent' is not an iterating agent; "
        "chat agents: ChatAgent, CodeExecutor, GeneralWorker, KubernetesAgent, WebResearcher",
    ]


def test_a_stage_of_one_agent_may_say_agent(tmp_path):
    config = with_change(["agent_chains", "k8s", "stages", 0], {"name": "s", "agent": "Nope"})
    assert "agent_chains.k8s.stages[0].agent.name: unknown agent 'Nope'" in error_for(
        tmp_path, config
    )
    config["agent_chains"]["k8s"]["stages"][0]["agent"] = {
        "name": "KubernetesAgent",
        "max_iterations": 2,
    }
    stage = load_config(write(tmp_path, config)).chains["k8s"].stages[0]
    assert [(a.name, a.max_iterations) for a in stage.agents] == [("KubernetesAgent", 2)]


def test_a_key_set_to_nothing_is_unset(tmp_path):
    config = with_change(["agents", "KubernetesAgent", "max_iterations"], None)
    config["mcp_servers"]["kubernetes"]["summarization"] = None
    config["system"] = {"slack": None, "cost_estimation": {"enabled": None}}
    loaded = load_config(write(tmp_path, config))
    assert loaded.agents["KubernetesAgent"].max_iterations is None
    assert loaded.mcp_servers["kubernetes"].summarization.size_threshold_tokens == 5000
    assert loaded.cost_estimation.enabled
    assert not loaded.system.slack.enabled


def test_investigation_is_the_default_agent_type_spelled_out(tmp_path):
    # docs/configuration.md shows `type: investigation`; it is what an agent without a type is.
    config = with_change(["agents", "KubernetesAgent", "type"], "investigation")
    assert load_config(write(tmp_path, config)).agents["KubernetesAgent"].type == ""


def test_a_name_yaml_reads_as_a_number_is_a_name(tmp_path):
    config = with_change(
        ["system"],
        {
            "cost_estimation": {
                "model_rates": {404: {"input_per_million": 1, "output_per_million": 2}}
            }
        },
    )
    assert "404" in load_config(write(tmp_path, config)).cost_estimation.model_rates


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("- defaults\n", "tarsy.yaml: expected a mapping, got list"),
        ("3\n", "tarsy.yaml: expected a mapping, got int"),
    ],
)
def test_a_file_that_is_not_a_configuration(tmp_path, text, expected):
    path = tmp_path / "tarsy.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value).split("\n")[0] == expected


def test_the_yaml_is_bounded_before_the_schema_sees_it(tmp_path):
    path = tmp_path / "tarsy.yaml"
    path.write_text("defaults: " + "[" * 200 + "]" * 200 + "\n")
    with pytest.raises(ConfigError, match="is this the right file"):
        load_config(path)


def test_the_documented_example_is_a_valid_tarsy_yaml(tmp_path):
    text = CONFIGURATION_DOC.read_text()
    example = re.search(r"## `tarsy.yaml`.*?```yaml\n(.*?)```", text, re.S).group(1)
    config = yaml.safe_load(example)
    # The example's chains name agents it leaves out for brevity.
    for name in ("WorkloadAgent", "ChangeAgent", "LogAgent", "EventsAgent"):
        config["agents"][name] = {"description": name, "mcp_servers": ["kubernetes"]}
    loaded = load_config(write(tmp_path, config))
    assert loaded.defaults.orchestrator.agent_timeout == 600.0
    assert loaded.mcp_servers["prometheus"].transport.type == "http"
    assert loaded.chains["kubernetes-investigation"].stages[2].replicas == 3


def built_field_by_field() -> list[type[Schema]]:
    return [
        cls
        for _, cls in inspect.getmembers(schema, inspect.isclass)
        if issubclass(cls, Schema) and cls.target is not None
    ]


@pytest.mark.parametrize("cls", built_field_by_field(), ids=lambda cls: cls.__name__)
def test_every_key_has_a_dataclass_field_of_its_name(cls):
    """``build()`` copies fields by name: a key its dataclass lacked would be dropped.
    (The mappings shaped otherwise say how in their own ``build``.)"""
    names = {field.name for field in dataclasses.fields(cls.target)}
    assert set(cls.model_fields) <= names


def test_the_built_in_agents_are_the_same_for_every_load(tmp_path):
    first = load_config(write(tmp_path, BASE))
    second = load_config(write(tmp_path, copy.deepcopy(BASE)))
    assert first.agents["SynthesisAgent"] == second.agents["SynthesisAgent"]
    assert first == second
