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
    PrivateAttr,
    ValidationInfo,
    field_validator,
    model_validator,
)

from config.builtin import (
    CHAT_INSTRUCTIONS,
    CODE_EXECUTOR_INSTRUCTIONS,
    EXEC_SUMMARY_INSTRUCTIONS,
    GENERAL_WORKER_INSTRUCTIONS,
    KUBERNETES_CHAIN,
    KUBERNETES_INSTRUCTIONS,
    KUBERNETES_SERVER,
    SCORING_INSTRUCTIONS,
    SYNTHESIS_INSTRUCTIONS,
    WEB_RESEARCHER_DESCRIPTION,
    WEB_RESEARCHER_INSTRUCTIONS,
    kubernetes_server,
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
    key_path,
    list_of,
    mapping_of,
    one_of,
    or_default,
    required_list,
)
from config.references import file_problems, file_warnings, skill_problems
from config.types import (
    ACTION,
    AFTER_LIMIT,
    BUDGET_KINDS,
    EXEC_SUMMARY,
    INVESTIGATION,
    SCORING,
    SUCCESS_POLICIES,
    SYNTHESIS,
    AgentConfig,
    AlertMasking,
    Budget,
    BudgetConfig,
    ChainConfig,
    ChatConfig,
    CostEstimation,
    CustomPattern,
    DataMasking,
    DedupConfig,
    DedupRule,
    Defaults,
    EmbeddingConfig,
    FallbackProvider,
    FileProvider,
    HttpTransport,
    MCPServerConfig,
    MemoryConfig,
    ModelRate,
    OrchestratorConfig,
    QueueConfig,
    RetentionConfig,
    RunbooksConfig,
    ScoringConfig,
    Skill,
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
from llm.embeddings import EMBEDDING_PROVIDERS
from llm.registry import backend_names
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
Backend = Annotated[Text, one_of(tuple(backend_names()), "backend")]


def _native_tools(value: Any) -> tuple[str, ...] | dict[str, bool]:
    """A list of tools (ours: these and no others) or TARSy's mapping of tools to
    true/false (each one switched on or off, the rest as the provider says)."""
    problems: list[tuple[Loc, str]] = []
    allowed = ", ".join(NATIVE_TOOLS)
    if isinstance(value, dict):
        for tool, on in value.items():
            if tool not in NATIVE_TOOLS:
                problems.append(((str(tool),), f"unknown native tool {tool!r}; allowed: {allowed}"))
            elif not isinstance(on, bool):
                problems.append(((str(tool),), f"expected true or false, got {on!r}"))
        if problems:
            fail_at(problems)
        return dict(value)
    if not isinstance(value, list | tuple):
        fail("expected a list of native tools or a mapping of native tools to true/false")
    for index, tool in enumerate(value):
        if tool not in NATIVE_TOOLS:
            problems.append(((index,), f"unknown native tool {tool!r}; allowed: {allowed}"))
    if problems:
        fail_at(problems)
    return tuple(value)


NativeTools = Annotated[tuple[str, ...] | dict[str, bool], PlainValidator(_native_tools)]
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
    backend: Backend | None = None


class SubAgentSchema(Schema):
    target = SubAgentRef
    shorthand = "name"
    name: Text
    max_iterations: PositiveInt | None = None
    llm_provider: Text | None = None
    llm_backend: Backend | None = None
    mcp_servers: Texts | None = None
    skills: Texts | None = None  # None: every skill (config/skills.py)
    required_skills: Texts = ()


Fallbacks = Annotated[tuple[FallbackSchema, ...], list_of("providers")]
SubAgents = Annotated[tuple[SubAgentSchema, ...], list_of("agent names")]


class StdioTransportSchema(Schema):
    target = StdioTransport
    type: Literal["stdio"] = "stdio"
    command: Text
    args: Texts = ()
    env: Annotated[dict[Key, EnvValue], mapping_of("names to values")] = {}


Headers = Annotated[dict[Key, HeaderValue], mapping_of("header names to values")]


class HttpTransportSchema(Schema):
    type: Literal["http", "sse"]
    url: Annotated[Text, check(_http_url)]
    bearer_token_env: Text = ""
    # TARSy's literal token (``{{.ENV}}``-templated as a rule).
    bearer_token: Text = ""
    headers: Headers = {}
    custom_headers: Headers = {}  # TARSy's name for ``headers``
    verify_ssl: Flag = HttpTransport.verify_ssl
    timeout: Duration = HttpTransport.timeout
    session_cleanup_url: Annotated[HeaderValue, check(lambda url: url and _http_url(url))] = ""

    @model_validator(mode="after")
    def _one_token(self) -> Self:
        if self.bearer_token and self.bearer_token_env:
            message = "set bearer_token or bearer_token_env, not both"
            fail_at([(("bearer_token",), message)])
        return self

    def build(self) -> HttpTransport:
        return build(self, HttpTransport, headers={**self.headers, **self.custom_headers})


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
    llm_backend: Backend | None = None


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
    llm_backend: Backend | None = None
    llm_provider: Text | None = None
    fallback_providers: Fallbacks | None = None
    # Gemini native tools for this agent; None: the provider's own setting.
    native_tools: NativeTools | None = None
    orchestrator: OrchestratorSchema | None = None
    skills: Texts | None = None  # None: every skill (config/skills.py)
    required_skills: Texts = ()

    def build_named(self, name: str) -> AgentConfig:
        tools = self.native_tools
        return build(
            self,
            AgentConfig,
            name=name,
            native_tools=tools if isinstance(tools, tuple) else None,
            native_tool_switches=tools if isinstance(tools, dict) else None,
        )


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
    # TARSy's built-in agents, under its names and with its tools.
    "KubernetesAgent": AgentSchema(
        description="Kubernetes-specialized agent",
        mcp_servers=(KUBERNETES_SERVER,),
        custom_instructions=KUBERNETES_INSTRUCTIONS,
    ),
    "GeneralWorker": AgentSchema(
        description=(
            "General-purpose agent for analysis, summarization, reasoning, and other tasks"
        ),
        custom_instructions=GENERAL_WORKER_INSTRUCTIONS,
    ),
    "WebResearcher": AgentSchema(
        description=WEB_RESEARCHER_DESCRIPTION,
        llm_backend="google-native",
        native_tools={"google_search": True, "url_context": True, "code_execution": False},
        custom_instructions=WEB_RESEARCHER_INSTRUCTIONS,
    ),
    "CodeExecutor": AgentSchema(
        description="Executes Python code for computation, data analysis, and calculations",
        llm_backend="google-native",
        native_tools={"google_search": False, "url_context": False, "code_execution": True},
        custom_instructions=CODE_EXECUTOR_INSTRUCTIONS,
    ),
}


def _with_builtins(agents: Any) -> Any:
    return {**BUILTIN_AGENTS, **agents} if isinstance(agents, dict) else agents


class StageAgentSchema(Schema):
    target = StageAgentConfig
    shorthand = "name"
    name: Text
    # TARSy lets a stage agent restate its agent's type; it must agree (checked there).
    type: AgentType | None = None
    skills: Texts | None = None  # None: every skill (config/skills.py)
    required_skills: Texts = ()
    llm_provider: Text | None = None
    llm_backend: Backend | None = None
    max_iterations: PositiveInt | None = None
    mcp_servers: Texts | None = None
    fallback_providers: Fallbacks | None = None
    sub_agents: SubAgents | None = None
    # The guardrails of this agent's sub-agents here (over the agent's own).
    orchestrator: OrchestratorSchema | None = None


class SynthesisSchema(Schema):
    target = SynthesisConfig
    agent: Annotated[Text, or_default(SynthesisConfig.agent)] = SynthesisConfig.agent
    llm_provider: Text | None = None
    llm_backend: Backend | None = None


class StageSchema(Schema):
    name: Text
    agents: (
        Annotated[tuple[StageAgentSchema, ...], BeforeValidator(required_list("agents"))] | None
    ) = None
    agent: StageAgentSchema | None = None  # one agent: ``agent: X`` for ``agents: [X]``
    max_iterations: PositiveInt | None = None
    mcp_servers: Texts | None = None
    fallback_providers: Fallbacks | None = None
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
    llm_backend: Backend | None = None
    mcp_servers: Texts | None = None
    max_iterations: PositiveInt | None = None
    sub_agents: SubAgents | None = None


class ScoringSchema(Schema):
    """Scoring of a completed session; off unless enabled. Unset keys come from
    ``defaults.scoring``, then the built-in ScoringAgent."""

    enabled: Flag = ScoringConfig.enabled
    agent: Text | None = None
    llm_provider: Text | None = None
    llm_backend: Backend | None = None
    mcp_servers: Texts | None = None
    max_iterations: PositiveInt | None = None

    def over(self, base: ScoringConfig) -> ScoringConfig:
        """These settings over ``base``, key by key."""
        own = {name: getattr(self, name) for name in self.model_fields_set}
        own = {name: value for name, value in own.items() if value not in (None, "")}
        return dataclasses.replace(base, **own)


MAX_BUDGET = 1e12  # a limit past any real spend; the session stores it as a JSON number


def _more_than_zero(value: float | None) -> str | None:
    if value is not None and not 0 < value <= MAX_BUDGET:
        return f"expected a number more than 0, at most {MAX_BUDGET:g}, got {value!r}"
    return None


class BudgetSchema(Schema):
    """What one investigation may spend (``budget``, agents/budget.py): each key a limit,
    unset keys from the level below (``defaults.budget``, the chain's, the alert type's)."""

    tokens: Annotated[PositiveInt | None, check(_more_than_zero)] = None
    cost_usd: Annotated[Number | None, check(_more_than_zero)] = None
    wall_time: Annotated[Duration | None, check(_more_than_zero)] = None
    tool_calls: Annotated[PositiveInt | None, check(_more_than_zero)] = None
    llm_calls: Annotated[PositiveInt | None, check(_more_than_zero)] = None
    after_limit: Annotated[Text, one_of(AFTER_LIMIT, "after_limit")] | None = None

    def build(self) -> Budget:
        return Budget(
            tokens=self.tokens,
            cost_usd=self.cost_usd,
            wall_time=self.wall_time,
            tool_calls=self.tool_calls,
            llm_calls=self.llm_calls,
            after_limit=self.after_limit or "",
        )


class DefaultsBudgetSchema(BudgetSchema):
    alert_types: Annotated[dict[Key, BudgetSchema], mapping_of("alert types")] = {}

    def build(self) -> BudgetConfig:
        own = super().build()
        return BudgetConfig(
            **{name: getattr(own, name) for name in (*BUDGET_KINDS, "after_limit")},
            alert_types={name: budget.build() for name, budget in self.alert_types.items()},
        )


class ChainSchema(Schema):
    alert_types: Annotated[Texts, AfterValidator(required_list("alert types"))] = Field(
        (), validate_default=True
    )
    description: Text = ""
    stages: Annotated[tuple[StageSchema, ...], BeforeValidator(required_list("stages"))] = Field(
        (), validate_default=True
    )
    llm_provider: Text | None = None
    llm_backend: Backend | None = None
    max_iterations: PositiveInt | None = None
    mcp_servers: Texts | None = None
    fallback_providers: Fallbacks | None = None
    executive_summary_provider: Text | None = None
    sub_agents: SubAgents | None = None
    chat: ChatSchema = ChatSchema()
    scoring: ScoringSchema | None = None  # None: as defaults.scoring says
    budget: BudgetSchema = BudgetSchema()

    def build_named(self, chain_id: str, defaults: Defaults) -> ChainConfig:
        base = defaults.scoring
        scoring = (
            self.scoring.over(dataclasses.replace(base, enabled=False))
            if self.scoring is not None
            else base
        )
        return build(self, ChainConfig, id=chain_id, scoring=scoring, budget=self.budget.build())


class DefaultSummarizationSchema(Schema):
    llm_provider: Text | None = None
    llm_backend: Backend | None = None


class AlertMaskingSchema(Schema):
    target = AlertMasking
    enabled: Flag = AlertMasking.enabled
    pattern_group: PatternGroup = AlertMasking.pattern_group


def _embedding_provider(value: str) -> str | None:
    if value and value not in EMBEDDING_PROVIDERS:
        return f"unknown embedding provider {value!r}; allowed: {', '.join(EMBEDDING_PROVIDERS)}"
    return None


class EmbeddingSchema(Schema):
    """TARSy's ``defaults.memory.embedding``: a provider's embedding model for memory;
    absent, the built-in local embedder (llm/embeddings.py)."""

    target = EmbeddingConfig
    provider: Annotated[Text, check(_embedding_provider)] = ""
    model: Text = ""
    api_key_env: Text = ""
    dimensions: PositiveInt | None = None
    base_url: Annotated[Text, check(lambda url: url and _http_url(url))] = ""

    def build(self) -> EmbeddingConfig:
        embedding = build(self, EmbeddingConfig)
        if not embedding.provider and self.model_fields_set:
            # A block that names no provider: TARSy's default, Google.
            embedding = dataclasses.replace(embedding, provider=EMBEDDING_PROVIDERS[0])
        return embedding


class MemorySchema(Schema):
    """TARSy's investigation memory (config/types.py MemoryConfig)."""

    target = MemoryConfig
    enabled: Flag = False
    max_inject: PositiveInt | None = None
    reflector_memory_limit: PositiveInt | None = None
    embedding: EmbeddingSchema = EmbeddingSchema()

    def build(self) -> MemoryConfig:
        # TARSy's 0 (unset) means its default.
        return MemoryConfig(
            enabled=self.enabled,
            max_inject=self.max_inject or MemoryConfig.max_inject,
            reflector_memory_limit=self.reflector_memory_limit
            or MemoryConfig.reflector_memory_limit,
            embedding=self.embedding.build(),
        )


def _field_names(names: tuple[str, ...]) -> str | None:
    blank = [index for index, name in enumerate(names) if not name.strip()]
    if blank:
        return f"field names may not be empty (item {blank[0]})"
    return None


DedupFields = Annotated[Texts, check(_field_names)]


class DedupRuleSchema(Schema):
    """One alert type's ``defaults.dedup.alert_types.<type>``: unset keys come from
    ``defaults.dedup``."""

    enabled: Flag | None = None
    fields: DedupFields | None = None
    window: Duration | None = None

    def over(self, base: DedupRule) -> DedupRule:
        own = {name: getattr(self, name) for name in self.model_fields_set}
        own = {name: value for name, value in own.items() if value is not None}
        return DedupRule(
            enabled=own.get("enabled", base.enabled),
            fields=own.get("fields", base.fields),
            window=own.get("window", base.window),
        )


class DedupSchema(Schema):
    """The duplicate-alert cooldown (``defaults.dedup``, sessions/dedup.py); off unless
    ``enabled``, for every alert type or the ones of ``alert_types``."""

    enabled: Flag = DedupConfig.enabled
    fields: DedupFields = DedupConfig.fields
    window: Duration = DedupConfig.window
    alert_types: Annotated[dict[Key, DedupRuleSchema], mapping_of("alert types")] = {}

    def build(self) -> DedupConfig:
        base = DedupRule(enabled=self.enabled, fields=self.fields, window=self.window)
        return DedupConfig(
            enabled=self.enabled,
            fields=self.fields,
            window=self.window,
            alert_types={name: rule.over(base) for name, rule in self.alert_types.items()},
        )


class DefaultsSchema(Schema):
    alert_type: Text = Defaults.alert_type
    max_iterations: PositiveInt = Defaults.max_iterations
    llm_provider: Text | None = None
    llm_backend: Backend | None = None
    fallback_providers: Fallbacks = ()
    success_policy: Policy = Defaults.success_policy
    orchestrator: OrchestratorSchema = OrchestratorSchema()
    # Which model summarises large tool results when a server names none.
    summarization: DefaultSummarizationSchema = DefaultSummarizationSchema()
    runbook: Text = ""
    scoring: ScoringSchema = ScoringSchema()
    alert_masking: AlertMaskingSchema = AlertMaskingSchema()
    memory: MemorySchema | None = None
    dedup: DedupSchema = DedupSchema()
    budget: DefaultsBudgetSchema = DefaultsBudgetSchema()

    def build(self) -> Defaults:
        orchestrator: OrchestratorConfig = self.orchestrator.build()
        return build(
            self,
            Defaults,
            scoring=self.scoring.over(ScoringConfig()),
            # Five at once unless configured, as TARSy users know it.
            orchestrator=dataclasses.replace(
                orchestrator, max_concurrent_agents=orchestrator.max_concurrent_agents or 5
            ),
            summarization_provider=self.summarization.llm_provider,
            summarization_backend=self.summarization.llm_backend,
            memory=self.memory.build() if self.memory is not None else MemoryConfig(),
            dedup=self.dedup.build(),
            budget=self.budget.build(),
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


class RetentionSchema(Schema):
    target = RetentionConfig
    session_retention_days: PositiveInt | None = None
    event_ttl: Duration | None = None
    cleanup_interval: Duration | None = None


class HolidaySchema(Schema):
    date: Text  # MM-DD
    name: Text = ""


class SystemSchema(Schema):
    cost_estimation: CostSchema = CostSchema()
    dashboard_url: Text = ""
    github: GithubSchema = GithubSchema()
    runbooks: RunbooksSchema = RunbooksSchema()
    slack: SlackSchema = SlackSchema()
    allowed_ws_origins: Texts = ()
    retention: RetentionSchema = RetentionSchema()
    # The calendar of TARSy's time context: accepted; not used yet.
    holidays: Annotated[tuple[HolidaySchema, ...], list_of("holidays")] = ()

    def build(self) -> SystemConfig:
        return SystemConfig(
            dashboard_url=self.dashboard_url.rstrip("/"),
            github_token_env=self.github.token_env,
            runbooks=self.runbooks.build(),
            slack=self.slack.build(),
            allowed_ws_origins=self.allowed_ws_origins,
            retention=self.retention.build(),
        )


class QueueSchema(Schema):
    """TARSy's ``queue:``: what it sets here is QueueConfig's to say."""

    target = QueueConfig
    worker_count: PositiveInt | None = None
    max_concurrent_sessions: PositiveInt | None = None
    poll_interval: Duration | None = None
    poll_interval_jitter: Duration | None = None
    session_timeout: Duration | None = None
    graceful_shutdown_timeout: Duration | None = None
    scoring_shutdown_timeout: Duration | None = None
    orphan_detection_interval: Duration | None = None
    orphan_threshold: Duration | None = None
    heartbeat_interval: Duration | None = None


def _some_chain(chains: dict[str, ChainSchema]) -> str | None:
    return None if chains else "at least one chain is required"


def _with_builtin_servers(servers: Any) -> Any:
    if not isinstance(servers, dict) or KUBERNETES_SERVER in servers:
        return servers
    return {**servers, KUBERNETES_SERVER: kubernetes_server()}


def _with_builtin_chain(chains: Any) -> Any:
    """TARSy's ``kubernetes`` chain, unless the file has that id or that alert type."""
    if not isinstance(chains, dict) or "kubernetes" in chains:
        return chains
    for chain in chains.values():
        alert_types = chain.get("alert_types") if isinstance(chain, dict) else None
        if isinstance(alert_types, list) and "kubernetes" in alert_types:
            return chains
    return {**chains, "kubernetes": KUBERNETES_CHAIN}


class TarsyFile(Schema):
    """The whole file."""

    defaults: DefaultsSchema = DefaultsSchema()
    mcp_servers: Annotated[dict[Key, McpServerSchema], BeforeValidator(_with_builtin_servers)] = (
        Field(default_factory=_unset, validate_default=True)
    )
    agents: Annotated[dict[Key, AgentSchema], BeforeValidator(_with_builtins)] = Field(
        default_factory=_unset, validate_default=True
    )
    agent_chains: Annotated[
        dict[Key, ChainSchema], BeforeValidator(_with_builtin_chain), check(_some_chain)
    ] = Field(default_factory=_unset, validate_default=True)
    system: SystemSchema = SystemSchema()
    queue: QueueSchema = QueueSchema()
    _written_servers: frozenset[str] = PrivateAttr(default=frozenset())

    @model_validator(mode="wrap")
    @classmethod
    def _remember_written(cls, data: Any, handler: Any) -> Any:
        """Which servers the file wrote itself (the built-in one is added to the rest)."""
        model = handler(data)
        servers = data.get("mcp_servers") if isinstance(data, dict) else None
        model._written_servers = frozenset(servers) if isinstance(servers, dict) else frozenset()
        return model

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
    def _dedup_alert_types(self) -> Self:
        """``defaults.dedup.alert_types`` and ``defaults.budget.alert_types`` name alert
        types some chain handles."""
        known = {t for chain in self.agent_chains.values() for t in chain.alert_types}
        problems: list[tuple[Loc, str]] = [
            (
                ("defaults", "dedup", "alert_types", name),
                f"unknown alert type {name!r}; known alert types: {', '.join(sorted(known))}",
            )
            for name in self.defaults.dedup.alert_types
            if name not in known
        ]
        problems += [
            (
                ("defaults", "budget", "alert_types", name),
                f"unknown alert type {name!r}; known alert types: {', '.join(sorted(known))}",
            )
            for name in self.defaults.budget.alert_types
            if name not in known
        ]
        if problems:
            fail_at(problems)
        return self

    @model_validator(mode="after")
    def _references(self, info: ValidationInfo) -> Self:
        """The one check of what the parts of the file name of each other, and (given
        the config directory's skills as context) the skills they name."""
        problems = file_problems(self)
        skills = (info.context or {}).get("skills")
        if skills is not None:
            problems += skill_problems(self, skills)
        if problems:
            fail_at(problems)
        return self

    def to_config(
        self,
        source: str,
        providers: dict[str, FileProvider] | None = None,
        skills: dict[str, Skill] | None = None,
    ) -> TarsyConfig:
        defaults = self.defaults.build()
        agents = {name: agent.build_named(name) for name, agent in self.agents.items()}
        chains = {key: chain.build_named(key, defaults) for key, chain in self.agent_chains.items()}
        used = used_servers(agents, chains)
        servers = {
            key: server.build_named(key)
            for key, server in self.mcp_servers.items()
            # The built-in server is started only where an agent in use names it.
            if key != KUBERNETES_SERVER or key in used or KUBERNETES_SERVER in self.written
        }
        return TarsyConfig(
            source=source,
            defaults=defaults,
            mcp_servers=servers,
            agents=agents,
            chains=chains,
            cost_estimation=self.system.cost_estimation.build(),
            system=self.system.build(),
            llm_providers=providers or {},
            queue=self.queue.build(),
            skills=skills or {},
            warnings=tuple(
                f"{source}: {key_path(loc)}: {message}"
                for loc, message in file_warnings(self, skills or {})
            ),
        )

    @property
    def written(self) -> frozenset[str]:
        """The MCP server ids of the file itself (not the built-in one)."""
        return self._written_servers


def used_servers(agents: dict[str, AgentConfig], chains: dict[str, ChainConfig]) -> set[str]:
    """The MCP servers some chain can reach: its own, its stages', its agents' (and
    sub-agents'), its chat's and scoring's."""
    used: set[str] = set()
    for chain in chains.values():
        names = {agent.name for stage in chain.stages for agent in stage.agents}
        refs = [
            *(chain.sub_agents or ()),
            *(chain.chat.sub_agents or ()),
            *(ref for stage in chain.stages for ref in stage.sub_agents or ()),
            *(ref for stage in chain.stages for a in stage.agents for ref in a.sub_agents or ()),
        ]
        names |= {ref.name for ref in refs} | {chain.chat.agent}
        used |= {ref_server for ref in refs for ref_server in ref.mcp_servers or ()}
        for name in names:
            if name in agents:
                used |= set(agents[name].mcp_servers)
        used |= set(chain.mcp_servers or ()) | set(chain.chat.mcp_servers or ())
        used |= {s for stage in chain.stages for s in stage.mcp_servers or ()}
        used |= {s for stage in chain.stages for a in stage.agents for s in a.mcp_servers or ()}
    return used


PROVIDER_TYPES = ("google", "openai", "anthropic", "xai", "vertexai")


class ProviderSchema(Schema):
    """One entry of ``llm-providers.yaml``, TARSy's keys."""

    type: Annotated[Text, one_of(PROVIDER_TYPES, "provider type")]
    model: Text
    api_key_env: Text = ""
    credentials_env: Text = ""
    project_env: Text = ""
    location_env: Text = ""
    base_url: Annotated[Text, check(lambda url: url and _http_url(url))] = ""
    native_tools: NativeTools | None = None

    def build_named(self, name: str, source: str) -> FileProvider:
        tools = self.native_tools
        if isinstance(tools, dict):
            tools = tuple(tool for tool in NATIVE_TOOLS if tools.get(tool))
        return build(self, FileProvider, name=name, source=source, native_tools=tools or ())


class ProvidersFile(Schema):
    """``llm-providers.yaml``."""

    llm_providers: dict[Key, ProviderSchema] = {}
