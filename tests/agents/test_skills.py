"""Skills (TARSy's ADR-0012): the files, the check, which agent gets which, the prompt's
sections, ``load_skill``, and a run that loads one with the scripted model and the
real demo MCP server."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import yaml

from agents.resolver import stage_settings, synthesis_settings
from agents.skills import LOAD_SKILL, AgentSkills, WithSkills, agent_skills, skill_sections
from config.loader import ConfigError, load_config
from config.skills import load_skills
from config.types import Skill
from sessions import services
from sessions.models import MCPInteraction, TimelineEvent
from sessions.selectors.trace import request_messages
from worker.tasks import run_session

CONFIGS = Path(__file__).parents[1] / "compat" / "tarsy_configs"


def skill_file(name: str, description: str = "What it is for.", body: str = "Body.\n") -> str:
    return f"---\nname: {name}\ndescription: {description}\n---\n{body}"


# --- the files ---------------------------------------------------------------------------


def test_both_layouts_load_and_dotfiles_and_bare_directories_are_skipped(tmp_path):
    skills = tmp_path / "skills"
    (skills / "dns").mkdir(parents=True)
    (skills / "dns" / "SKILL.md").write_text(skill_file("dns", body="Use dig.\n"))
    (skills / "tcp").write_text(skill_file("tcp", body="Use nc.\r\nThen telnet.\r\n"))
    (skills / "..data").mkdir()  # a ConfigMap's own link
    (skills / ".hidden").write_text("not a skill")
    (skills / "notes").mkdir()  # no SKILL.md: not a skill
    loaded = load_skills(tmp_path)
    assert list(loaded) == ["dns", "tcp"]
    assert loaded["dns"] == Skill("dns", "What it is for.", "Use dig.\n")
    assert loaded["tcp"].body == "Use nc.\nThen telnet.\n"  # line endings normalised
    assert load_skills(tmp_path / "elsewhere") == {}


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("name: x\ndescription: y\n", "missing frontmatter delimiters"),
        ("---\nname: x\ndescription: y\nbody", "missing closing frontmatter delimiter"),
        ("---\nname: [x\n---\nbody", "invalid frontmatter YAML"),
        ("---\ndescription: y\n---\nbody", "missing required field 'name'"),
        ("---\nname: x\n---\nbody", "missing required field 'description'"),
        ("---\n- a list\n---\nbody", "must be a mapping"),
    ],
)
def test_a_broken_skill_file_stops_the_load_naming_the_file(tmp_path, text, problem):
    (tmp_path / "skills").mkdir()
    (tmp_path / "skills" / "broken").write_text(text)
    (tmp_path / "tarsy.yaml").write_text((CONFIGS / "skills" / "tarsy.yaml").read_text())
    with pytest.raises(ConfigError) as raised:
        load_config(tmp_path)
    assert str(tmp_path / "skills" / "broken") in str(raised.value)
    assert problem in str(raised.value)


def test_two_skills_of_one_name_are_refused(tmp_path):
    (tmp_path / "skills" / "a").mkdir(parents=True)
    (tmp_path / "skills" / "a" / "SKILL.md").write_text(skill_file("same"))
    (tmp_path / "skills" / "b").write_text(skill_file("same"))
    with pytest.raises(ConfigError, match="duplicate skill name 'same'"):
        load_config(_with_tarsy_yaml(tmp_path))


def _with_tarsy_yaml(directory: Path, change=None) -> Path:
    config = yaml.safe_load((CONFIGS / "skills" / "tarsy.yaml").read_text())
    if change:
        change(config)
    (directory / "tarsy.yaml").write_text(yaml.safe_dump(config))
    return directory


def test_a_credential_in_a_skill_is_masked(tmp_path):
    token = "ghp_" + "a1B2c3D4e5F6g7H8i9J0" * 2
    (tmp_path / "skills").mkdir()
    (tmp_path / "skills" / "leaky").write_text(skill_file("leaky", body=f"Use token {token}\n"))
    skill = load_skills(tmp_path)["leaky"]
    assert token not in skill.body
    assert "Use token" in skill.body


# --- the check ---------------------------------------------------------------------------


def _skills_dir(tmp_path: Path) -> Path:
    for name in ("kubernetes-basics", "networking"):
        text = (CONFIGS / "skills" / "skills" / name).read_text()
        (tmp_path / "skills").mkdir(exist_ok=True)
        (tmp_path / "skills" / name).write_text(text)
    return tmp_path


def test_an_unknown_skill_name_is_refused_naming_the_key(tmp_path):
    def misspell(config):
        config["agents"]["SkillInvestigator"]["skills"] = ["networking", "netwrking"]
        stage_agent = config["agent_chains"]["skills-chain"]["stages"][1]["agents"][0]
        stage_agent["required_skills"] = ["k8s"]

    with pytest.raises(ConfigError) as raised:
        load_config(_with_tarsy_yaml(_skills_dir(tmp_path), misspell))
    message = str(raised.value)
    assert "agents.SkillInvestigator.skills[1]: unknown skill 'netwrking'; defined: " in message
    assert "kubernetes-basics, networking" in message
    assert (
        "agent_chains.skills-chain.stages[1].agents[0].required_skills[0]: unknown skill 'k8s'"
        in message
    )


def test_skills_named_with_none_defined_are_a_warning(tmp_path):
    config = load_config(_with_tarsy_yaml(tmp_path))
    assert any(
        "agents.SkillInvestigator.required_skills: no skills are defined" in w
        for w in config.warnings
    )


# --- who gets which ----------------------------------------------------------------------


def test_which_agent_gets_which_skill_as_tarsy_resolves_it():
    config = load_config(CONFIGS / "skills")
    chain = config.chains["skills-chain"]
    investigator = stage_settings(config, chain, chain.stages[0])[0]
    remediator = stage_settings(config, chain, chain.stages[1])[0]
    got = agent_skills(config, investigator)
    # Required: in the prompt, and so not also on demand.
    assert [s.name for s in got.required] == ["kubernetes-basics"]
    assert [s.name for s in got.on_demand] == ["networking"]
    # No skills key: every skill, on demand.
    everything = agent_skills(config, remediator)
    assert (everything.required, [s.name for s in everything.on_demand]) == (
        (),
        ["kubernetes-basics", "networking"],
    )
    # Synthesis, the executive summary and scoring get none.
    assert agent_skills(config, synthesis_settings(config, chain, chain.stages[0])) == (
        AgentSkills()
    )


def test_a_stage_agents_skills_add_to_the_agents_own(tmp_path):
    def add(config):
        config["agents"]["SkillInvestigator"].update(skills=["networking"], required_skills=[])
        stage_agent = config["agent_chains"]["skills-chain"]["stages"][0]["agents"][0]
        stage_agent.update(skills=["networking"], required_skills=["kubernetes-basics"])

    config = load_config(_with_tarsy_yaml(_skills_dir(tmp_path), add))
    chain = config.chains["skills-chain"]
    settings = stage_settings(config, chain, chain.stages[0])[0]
    assert settings.skills == ("networking",)  # added, de-duplicated
    assert settings.required_skills == ("kubernetes-basics",)


def test_the_prompt_sections_are_tarsys():
    skills = AgentSkills(
        required=(Skill("k8s", "Pods.", "Pods are units.\n"),),
        on_demand=(Skill("net", "DNS and TCP.", "dig"),),
    )
    required, catalog = skill_sections(skills)
    assert required == (
        "## Pre-loaded Skills\n\n"
        "Skills provide domain-specific knowledge for your task.\n"
        "The following have been loaded automatically — use them as reference.\n"
        "\n### k8s\n\nPods are units."
    )
    assert catalog.startswith("## Available Skills\n\n")
    assert "using the `load_skill` tool" in catalog
    assert catalog.endswith("<available_skills>\n- **net**: DNS and TCP.\n</available_skills>")
    assert skill_sections(AgentSkills()) == []


# --- load_skill --------------------------------------------------------------------------


class _NoTools:
    async def list_tools(self):
        return []

    async def call_tool(self, name, arguments):
        raise AssertionError(f"{name} reached the MCP tools")


def _loader() -> WithSkills:
    return WithSkills(
        _NoTools(), [Skill("net", "DNS.", "Use dig.\n"), Skill("tcp", "TCP.", "Use nc.")]
    )


def test_load_skill_returns_each_skill_asked_for():
    result = asyncio.run(_loader().call_tool(LOAD_SKILL, {"names": ["net", "tcp"]}))
    assert not result.is_error
    assert result.content == "## Skill: net\n\nUse dig.\n\n\n## Skill: tcp\n\nUse nc."


def test_load_skill_with_some_unknown_names_returns_the_rest_and_says_which():
    result = _loader().load({"names": ["net", "kubernetes"]})
    assert not result.is_error
    assert result.content.startswith("## Skill: net\n\nUse dig.\n")
    assert result.content.endswith(
        "---\nNote: the following skill names were not found: kubernetes\n\n"
        "Available skills: net, tcp"
    )


@pytest.mark.parametrize(
    ("arguments", "says"),
    [
        ({"names": ["nope"]}, "no valid skills found for: nope\n\nAvailable skills: net, tcp"),
        ({"names": []}, "'names' must contain at least one skill name"),
        ({"names": "net"}, "'names' must be a list of names"),
        ({}, "'names' must be a list of names"),
    ],
)
def test_load_skill_refuses_what_it_cannot_serve(arguments, says):
    result = _loader().load(arguments)
    assert result.is_error
    assert says in result.content


def test_only_on_demand_skills_load_and_the_tool_is_listed_first():
    loader = WithSkills(_NoTools(), [Skill("net", "DNS.", "x")])
    assert loader.load({"names": ["k8s"]}).is_error  # in the registry, not on demand
    assert [t.name for t in asyncio.run(loader.list_tools())] == [LOAD_SKILL]


# --- a run -------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_an_agent_loads_a_skill_and_shows_its_required_ones(
    scripted_provider, tarsy_config, tmp_path
):
    (tmp_path / "skills").mkdir()
    (tmp_path / "skills" / "pods").write_text(skill_file("pods", "Pod basics.", "Pods run.\n"))
    (tmp_path / "skills" / "dns").write_text(skill_file("dns", "DNS checks.", "Use dig.\n"))
    tarsy_config(
        lambda config: config["agents"]["KubernetesAgent"].update(required_skills=["pods"])
    )
    scripted_provider(
        [
            {
                "text": "Loading.",
                "tool_calls": [{"name": LOAD_SKILL, "arguments": {"names": ["dns"]}}],
            },
            {"text": "DNS is fine; the pods run."},
        ]
    )
    session = services.session_create(
        alert_type="kubernetes",
        alert_data="namespace: payments",
        chain_id="kubernetes-investigation",
        author="t",
    )
    assert run_session(str(session.id)) == "completed"
    items = TimelineEvent.objects.filter(session=session, stage__stage_type="investigation")
    loaded = items.get(event_type="skill_loaded")
    assert (loaded.content, loaded.metadata) == ("Pods run.\n", {"skill_name": "pods"})
    call = items.get(event_type="llm_tool_call")
    assert (call.metadata["tool_name"], call.metadata["server_name"]) == (LOAD_SKILL, "")
    assert call.content == "## Skill: dns\n\nUse dig.\n"
    record = MCPInteraction.objects.get(session=session, interaction_type="tool_call")
    assert (record.server_name, record.tool_name) == ("", LOAD_SKILL)
    first = session.llm_interactions.filter(interaction_type="iteration").first()
    system = request_messages(first)[0]["content"]
    assert "## Pre-loaded Skills" in system
    assert "### pods\n\nPods run." in system
    assert "- **dns**: DNS checks." in system
    assert "- **pods**" not in system  # required, so not also on demand
    assert LOAD_SKILL in first.tools
