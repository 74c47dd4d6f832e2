"""tarsy.yaml as users write it: one pydantic model per mapping, unknown keys forbidden.

Each model becomes a frozen dataclass of config/types.py (``build()``), which is what the
rest of TARSy reads: the file's shape and the code's shape differ in a few places (the
keys of ``agents``, ``mcp_servers`` and ``agent_chains`` become ``name``/``id``,
``defaults.summarization`` is flattened, the built-in agents are added). What the parts
name of each other is checked once, by ``TarsyFile``'s validator (config/references.py).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Annotated, Any, Literal, Self

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    PlainValidator,
    field_validator,
    model_validator,
)

from config.builtin import (
    CHAT_INSTRUCTIONS,
    EXEC_SUMMARY_INSTRUCTIONS,
    SCORING_INSTRUCTIONS,
    SYNTHESIS_INSTRUCTIONS,
)
from config.fields import (
    Duration,
    EnvValue,
    Flag,
    HeaderValue,
    Key,
    Loc,
    Number,
    PositiveInt,
    Schema,
    Text,
    Texts,
    build,
    check,
    fail,
    fail_at,
    list_of,
    mapping_of,
    one_of,
    or_default,
    required_list,
)
from config.references import file_problems
from config.types import (
    ACTION,
    EXEC_SUMMARY,
    INVESTIGATION,
    SCORING,
    SUCCESS_POLICIES,
    SYNTHESIS,
    AgentConfig,
    ChainConfig,
    ChatConfig,
    CostEstimation,
    CustomPattern,
    DataMasking,
    Defaults,
    FallbackProvider,
    HttpTransport,
    MCPServerConfig,
    ModelRate,
    OrchestratorConfig,
    RunbooksConfig,
    ScoringConfig,
    SlackConfig,
    StageAgentConfig,
    StageConfig,
    StdioTransport,
    SubAgentRef,
    Summarization,
    SynthesisConfig,
    SystemConfig,
    TarsyConfig,
)
from llm.types import NATIVE_TOOLS
from masking.patterns import KNOWN_PATTERNS, PATTERN_GROUPS

AGENT_TYPES = {
    "investigation": "iterating investigation agent with tools (the default)",
    ACTION: "iterating agent that may change things, with a safety preamble",
    SYNTHESIS: "one call, no tools: merges a parallel stage's findings",
    EXEC_SUMMARY: "one call, no tools: the session's executive summary",
    SCORING: "one call, no tools: rates an investigation",
}
TRANSPORT_TYPES = ("stdio", "http", "sse")
# The tool namespace of sub-agent dispatch (orchestrator.dispatch_agent, …).
ORCHESTRATOR_SERVER = "orchestrator"


def _unset() -> Any:
    """The default of a mapping that is validated even when absent (``validate_default``),
    so that what it requires is reported at its own key."""
    return {}


def _agent_type(value: Any) -> str:
    if not value or value == "investigation":  # unset, or spelled out (README)
        return INVESTIGATION
    if not isinstance(value, str) or value not in AGENT_TYPES:
        allowed = ", ".join(f"{kind!r} ({what})" for kind, what in AGENT_TYPES.items())
        fail(f"unknown agent type {value!r}; allowed: {allowed}")
    return value


def _regex(pattern: str) -> str | None:
    try:
        re.compile(pattern)
    except re.error as exc:
        return f"not a valid regular expression: {exc}"
    return None


def _http_url(url: str) -> str | None:
    if url.startswith(("http://", "https://")):
        return None
    return f"expected an http:// or https:// URL, got {url!r}"


AgentType = Annotated[str, PlainValidator(_agent_type)]
Policy = Annotated[Text, one_of(SUCCESS_POLICIES, "success policy")]
NativeTool = Annotated[Text, one_of(NATIVE_TOOLS, "native tool")]
PatternGroup = Annotated[Text, one_of(tuple(PATTERN_GROUPS), "pattern group")]
Pattern = Annotated[Text, one_of(KNOWN_PATTERNS, "pattern")]


class OrchestratorSchema(Schema):
    target = OrchestratorConfig
    max_concurrent_agents: PositiveInt | None = None
    agent_timeout: Duration | None = None
    max_budget: Duration | None = None


class FallbackSchema(Schema):
    target = FallbackProvider
    shorthand = "provider"
    provider: Text
    backend: Text | None = None


class SubAgentSchema(Schema):
    target = SubAgentRef
    shorthand = "name"
    name: Text
    max_iterations: PositiveInt | None = None


Fallbacks = Annotated[tuple[FallbackSchema, ...], list_of("providers")]
SubAgents = Annotated[tuple[SubAgentSchema, ...], list_of("agent names")]


class StdioTransportSchema(Schema):
    target = StdioTransport
    type: Literal["stdio"] = "stdio"
    command: Text
    args: Texts = ()
    env: Annotated[dict[Key, EnvValue], mapping_of("names to values")] = {}


class HttpTransportSchema(Schema):
    target = HttpTransport
    type: Literal["http", "sse"]
    url: Annotated[Text, check(_http_url)]
    bearer_token_env: Text = ""
    headers: Annotated[dict[Key, HeaderValue], mapping_of("header names to values")] = {}
    verify_ssl: Flag = HttpTransport.verify_ssl
    timeout: Duration = HttpTransport.timeout


def _transport(raw: Any) -> Any:
    """The transport's ``type`` (stdio unless said) picks the keys it may have."""
    if isinstance(raw, Schema):
        return raw
    kind = raw.get("type", "stdio") if isinstance(raw, dict) else "stdio"
    if kind not in TRANSPORT_TYPES:
        allowed = ", ".join(TRANSPORT_TYPES)
        fail_at([(("type",), f"unsupported transport {kind!r}; allowed: {allowed}")])
    schema = StdioTransportSchema if kind == "stdio" else HttpTransportSchema
    return schema.model_validate(raw)


class CustomPatternSchema(Schema):
    target = CustomPattern
    pattern: Annotated[Text, check(_regex)]
    replacement: Annotated[Text, or_default("[MASKED_CUSTOM]")] = "[MASKED_CUSTOM]"
    description: Text = ""


class DataMaskingSchema(Schema):
    target = DataMasking
    enabled: Flag = True
    pattern_groups: Annotated[tuple[PatternGroup, ...], list_of("strings")] = ()
    patterns: Annotated[tuple[Pattern, ...], list_of("strings")] = ()
    custom_patterns: Annotated[tuple[CustomPatternSchema, ...], list_of("custom patterns")] = ()


class SummarizationSchema(Schema):
    target = Summarization
    enabled: Flag = Summarization.enabled
    size_threshold_tokens: PositiveInt = Summarization.size_threshold_tokens
    summary_max_token_limit: PositiveInt = Summarization.summary_max_token_limit
    llm_provider: Text | None = None
    llm_backend: Text | None = None


class McpServerSchema(Schema):
    transport: Annotated[
        StdioTransportSchema | HttpTransportSchema, BeforeValidator(_transport)
    ] = Field(default_factory=_unset, validate_default=True)
    instructions: Text = ""
    init_timeout: Duration = MCPServerConfig.init_timeout
    call_timeout: Duration = MCPServerConfig.call_timeout
    data_masking: DataMaskingSchema | None = None
    summarization: SummarizationSchema = SummarizationSchema()

    def build_named(self, server_id: str) -> MCPServerConfig:
        return build(self, MCPServerConfig, id=server_id)


class AgentSchema(Schema):
    type: AgentType = INVESTIGATION
    description: Text = ""
    mcp_servers: Texts = ()
    custom_instructions: Text = ""
    max_iterations: PositiveInt | None = None
    llm_backend: Text | None = None
    llm_provider: Text | None = None
    fallback_providers: Fallbacks | None = None
    # Gemini native tools for this agent; None: the provider's own setting.
    native_tools: Annotated[tuple[NativeTool, ...], list_of("strings")] | None = None
    orchestrator: OrchestratorSchema | None = None

    def build_named(self, name: str) -> AgentConfig:
        return build(self, AgentConfig, name=name)


# Agents every configuration has; a tarsy.yaml entry of the same name replaces one.
BUILTIN_AGENTS = {
    "SynthesisAgent": AgentSchema(
        type=SYNTHESIS,
        description="Merges the findings of agents that investigated in parallel.",
        custom_instructions=SYNTHESIS_INSTRUCTIONS,
    ),
    "ExecSummaryAgent": AgentSchema(
        type=EXEC_SUMMARY,
        description="Writes the executive summary of an investigation.",
        custom_instructions=EXEC_SUMMARY_INSTRUCTIONS,
    ),
    "ChatAgent": AgentSchema(
        description="Answers follow-up questions about an ended investigation, with its tools.",
        custom_instructions=CHAT_INSTRUCTIONS,
    ),
    "ScoringAgent": AgentSchema(
        type=SCORING,
        description="Scores the quality of a completed investigation.",
        custom_instructions=SCORING_INSTRUCTIONS,
    ),
}


def _with_builtins(agents: Any) -> Any:
    return {**BUILTIN_AGENTS, **agents} if isinstance(agents, dict) else agents


class StageAgentSchema(Schema):
    target = StageAgentConfig
    shorthand = "name"
    name: Text
    llm_provider: Text | None = None
    llm_backend: Text | None = None
    max_iterations: PositiveInt | None = None
    mcp_servers: Texts | None = None
    fallback_providers: Fallbacks | None = None
    sub_agents: SubAgents | None = None


class SynthesisSchema(Schema):
    target = SynthesisConfig
    agent: Annotated[Text, or_default(SynthesisConfig.agent)] = SynthesisConfig.agent
    llm_provider: Text | None = None
    llm_backend: Text | None = None


class StageSchema(Schema):
    name: Text
    agents: (
        Annotated[tuple[StageAgentSchema, ...], BeforeValidator(required_list("agents"))] | None
    ) = None
    agent: StageAgentSchema | None = None  # one agent: ``agent: X`` for ``agents: [X]``
    max_iterations: PositiveInt | None = None
    replicas: PositiveInt = 1
    success_policy: Policy | None = None  # None: defaults.success_policy
    synthesis: SynthesisSchema | None = None  # None: SynthesisAgent
    sub_agents: SubAgents | None = None

    @property
    def entries(self) -> list[tuple[Loc, StageAgentSchema]]:
        """The stage's agents, each with the key it is written at."""
        if self.agents is not None:
            return [(("agents", index), agent) for index, agent in enumerate(self.agents)]
        return [(("agent",), self.agent)] if self.agent is not None else []

    @model_validator(mode="after")
    def _agents(self) -> Self:
        if not self.entries:
            fail_at([(("agents",), "is required (a list of agents)")])
        if self.replicas > 1 and len(self.entries) > 1:
            message = "replicas run copies of one agent; this stage lists several agents"
            fail_at([(("replicas",), message)])
        return self

    def build(self) -> StageConfig:
        agents = tuple(agent.build() for _, agent in self.entries)
        return build(self, StageConfig, agents=agents)


class ChatSchema(Schema):
    """Follow-up chat on an ended session."""

    target = ChatConfig
    enabled: Flag = ChatConfig.enabled
    agent: Annotated[Text, or_default(ChatConfig.agent)] = ChatConfig.agent
    llm_provider: Text | None = None
    llm_backend: Text | None = None
    mcp_servers: Texts | None = None
    max_iterations: PositiveInt | None = None
    sub_agents: SubAgents | None = None


class ScoringSchema(Schema):
    """Scoring of a completed session; off unless enabled."""

    target = ScoringConfig
    enabled: Flag = ScoringConfig.enabled
    agent: Annotated[Text, or_default(ScoringConfig.agent)] = ScoringConfig.agent
    llm_provider: Text | None = None
    llm_backend: Text | None = None


class ChainSchema(Schema):
    alert_types: Annotated[Texts, AfterValidator(required_list("alert types"))] = Field(
        (), validate_default=True
    )
    description: Text = ""
    stages: Annotated[tuple[StageSchema, ...], BeforeValidator(required_list("stages"))] = Field(
        (), validate_default=True
    )
    llm_provider: Text | None = None
    llm_backend: Text | None = None
    max_iterations: PositiveInt | None = None
    mcp_servers: Texts | None = None
    fallback_providers: Fallbacks | None = None
    executive_summary_provider: Text | None = None
    sub_agents: SubAgents | None = None
    chat: ChatSchema = ChatSchema()
    scoring: ScoringSchema = ScoringSchema()

    def build_named(self, chain_id: str) -> ChainConfig:
        return build(self, ChainConfig, id=chain_id)


class DefaultSummarizationSchema(Schema):
    llm_provider: Text | None = None
    llm_backend: Text | None = None


class DefaultsSchema(Schema):
    alert_type: Text
    max_iterations: PositiveInt = Defaults.max_iterations
    llm_provider: Text | None = None
    llm_backend: Text | None = None
    fallback_providers: Fallbacks = ()
    success_policy: Policy = Defaults.success_policy
    orchestrator: OrchestratorSchema = OrchestratorSchema()
    # Which model summarises large tool results when a server names none.
    summarization: DefaultSummarizationSchema = DefaultSummarizationSchema()
    runbook: Text = ""

    def build(self) -> Defaults:
        orchestrator: OrchestratorConfig = self.orchestrator.build()
        return build(
            self,
            Defaults,
            # Five at once unless configured, as TARSy users know it.
            orchestrator=dataclasses.replace(
                orchestrator, max_concurrent_agents=orchestrator.max_concurrent_agents or 5
            ),
            summarization_provider=self.summarization.llm_provider,
            summarization_backend=self.summarization.llm_backend,
        )


class RateSchema(Schema):
    target = ModelRate
    input_per_million: Number | None = None
    output_per_million: Number | None = None

    @model_validator(mode="after")
    def _both(self) -> Self:
        missing = [name for name, value in self if value is None]
        if missing:
            fail(f"missing {', '.join(missing)}")
        return self


class CostSchema(Schema):
    enabled: Flag = True
    model_rates: dict[Key, RateSchema] = {}

    def build(self) -> CostEstimation:
        rates = {model: rate.build() for model, rate in self.model_rates.items()}
        return CostEstimation(enabled=self.enabled, model_rates=rates)


class GithubSchema(Schema):
    token_env: Text = ""  # the variable holding a GitHub token


def _lower(domains: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(domain.lower() for domain in domains)


class RunbooksSchema(Schema):
    target = RunbooksConfig
    repo_url: Text = ""
    cache_ttl: Duration = RunbooksConfig.cache_ttl
    allowed_domains: Annotated[Texts, AfterValidator(_lower)] = RunbooksConfig.allowed_domains
    max_bytes: PositiveInt = RunbooksConfig.max_bytes


class SlackSchema(Schema):
    target = SlackConfig
    enabled: Flag = SlackConfig.enabled
    token_env: Annotated[Text, or_default(SlackConfig.token_env)] = SlackConfig.token_env
    channel: Text = ""
    api_url: Text = ""

    @model_validator(mode="after")
    def _channel(self) -> Self:
        if self.enabled and not self.channel:
            fail_at([(("channel",), "is required when Slack is enabled")])
        return self


class SystemSchema(Schema):
    cost_estimation: CostSchema = CostSchema()
    dashboard_url: Text = ""
    github: GithubSchema = GithubSchema()
    runbooks: RunbooksSchema = RunbooksSchema()
    slack: SlackSchema = SlackSchema()

    def build(self) -> SystemConfig:
        return SystemConfig(
            dashboard_url=self.dashboard_url.rstrip("/"),
            github_token_env=self.github.token_env,
            runbooks=self.runbooks.build(),
            slack=self.slack.build(),
        )


def _some_chain(chains: dict[str, ChainSchema]) -> str | None:
    return None if chains else "at least one chain is required"


class TarsyFile(Schema):
    """The whole file."""

    defaults: DefaultsSchema = Field(default_factory=_unset, validate_default=True)
    mcp_servers: dict[Key, McpServerSchema] = {}
    agents: Annotated[dict[Key, AgentSchema], BeforeValidator(_with_builtins)] = Field(
        default_factory=_unset, validate_default=True
    )
    agent_chains: Annotated[dict[Key, ChainSchema], check(_some_chain)] = Field(
        default_factory=_unset, validate_default=True
    )
    system: SystemSchema = SystemSchema()

    @field_validator("mcp_servers")
    @classmethod
    def _server_ids(cls, servers: dict[str, McpServerSchema]) -> dict[str, McpServerSchema]:
        problems = []
        for server_id in servers:
            if "." in server_id or "__" in server_id:
                problems.append(((server_id,), "server ids may not contain '.' or '__'"))
            elif server_id == ORCHESTRATOR_SERVER:
                message = f"{server_id!r} is reserved for sub-agent dispatch tools"
                problems.append(((server_id,), message))
        if problems:
            fail_at(problems)
        return servers

    @model_validator(mode="after")
    def _references(self) -> Self:
        """The one check of what the parts of the file name of each other."""
        problems = file_problems(self)
        if problems:
            fail_at(problems)
        return self

    def to_config(self, source: str) -> TarsyConfig:
        servers = self.mcp_servers.items()
        chains = self.agent_chains.items()
        return TarsyConfig(
            source=source,
            defaults=self.defaults.build(),
            mcp_servers={key: server.build_named(key) for key, server in servers},
            agents={name: agent.build_named(name) for name, agent in self.agents.items()},
            chains={key: chain.build_named(key) for key, chain in chains},
            cost_estimation=self.system.cost_estimation.build(),
            system=self.system.build(),
        )
