"""Typed, immutable configuration objects the rest of TARSy reads, built from tarsy.yaml by
its schema (config/schema.py; loaded by config/loader.py)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field


@dataclass(frozen=True)
class StdioTransport:
    command: str
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    type: str = "stdio"


# In an HTTP header value: replaced by the agent execution's id for each connection.
SESSION_ID_PLACEHOLDER = "{{.SESSION_ID}}"


@dataclass(frozen=True)
class HttpTransport:
    """A remote server over streamable HTTP (``type: http``) or SSE (``type: sse``)."""

    type: str
    url: str
    bearer_token_env: str = ""  # the *name* of the variable holding the token
    # A literal token, as TARSy's ``bearer_token`` (usually ``{{.ENV}}``-templated); never
    # shown: ``repr`` leaves it out and every view of the configuration masks it.
    bearer_token: str = field(default="", repr=False)
    headers: dict[str, str] = field(default_factory=dict)
    verify_ssl: bool = True
    timeout: float = 30.0  # seconds for connecting and sending
    # DELETE'd when an execution's connection closes ({{.SESSION_ID}}: the execution).
    session_cleanup_url: str = ""

    @property
    def per_execution(self) -> bool:
        """Headers that name the execution need a connection of its own."""
        return any(
            SESSION_ID_PLACEHOLDER in value
            for value in (*self.headers.values(), self.session_cleanup_url)
        )


@dataclass(frozen=True)
class CustomPattern:
    pattern: str
    replacement: str
    description: str = ""


@dataclass(frozen=True)
class DataMasking:
    """Extra masking for one server's results, on top of the default (which always runs)."""

    enabled: bool = True
    pattern_groups: tuple[str, ...] = ()
    patterns: tuple[str, ...] = ()
    custom_patterns: tuple[CustomPattern, ...] = ()


@dataclass(frozen=True)
class Summarization:
    """Large tool results are summarised by an LLM before the model sees them."""

    enabled: bool = True
    size_threshold_tokens: int = 5000
    summary_max_token_limit: int = 1000
    llm_provider: str | None = None  # None: the agent's provider
    llm_backend: str | None = None


@dataclass(frozen=True)
class MCPServerConfig:
    id: str
    transport: StdioTransport | HttpTransport
    instructions: str = ""
    init_timeout: float = 30.0
    call_timeout: float = 90.0
    data_masking: DataMasking | None = None
    summarization: Summarization = field(default_factory=Summarization)


@dataclass(frozen=True)
class FallbackProvider:
    provider: str
    backend: str | None = None  # None: the provider type's default backend


@dataclass(frozen=True)
class ModelRate:
    input_per_million: float
    output_per_million: float


@dataclass(frozen=True)
class CostEstimation:
    enabled: bool = True
    model_rates: dict[str, ModelRate] = field(default_factory=dict)

    def estimate(self, model: str, input_tokens: int, output_tokens: int) -> float | None:
        """USD for one call; the rate of the longest configured prefix of the model name
        applies (``gemini-2.5-flash`` prices ``gemini-2.5-flash-001``). None: no rate."""
        if not self.enabled:
            return None
        matches = [name for name in self.model_rates if model.startswith(name)]
        if not matches:
            return None
        rate = self.model_rates[max(matches, key=len)]
        return (
            input_tokens * rate.input_per_million + output_tokens * rate.output_per_million
        ) / 1_000_000


# What an agent's ``type`` makes it do. Iterating agents loop over the LLM and their tools;
# single-shot ones make one call without tools (synthesis, executive summary, scoring).
INVESTIGATION = ""
ACTION = "action"
SYNTHESIS = "synthesis"
EXEC_SUMMARY = "exec_summary"
SCORING = "scoring"
ITERATING_TYPES = (INVESTIGATION, ACTION)
SINGLE_SHOT_TYPES = (SYNTHESIS, EXEC_SUMMARY, SCORING)

SUCCESS_POLICIES = ("any", "all")


@dataclass(frozen=True)
class OrchestratorConfig:
    """Guardrails of an agent that dispatches sub-agents (ADR-0002, ADR-0029)."""

    max_concurrent_agents: int | None = None
    agent_timeout: float | None = None  # seconds per sub-agent; None: the session's time
    max_budget: float | None = None  # seconds from the first dispatch; None: no limit


@dataclass(frozen=True)
class SubAgentRef:
    name: str
    max_iterations: int | None = None
    llm_provider: str | None = None
    llm_backend: str | None = None
    mcp_servers: tuple[str, ...] | None = None
    # Added to the agent's own (TARSy: additive, where mcp_servers replace).
    skills: tuple[str, ...] | None = None
    required_skills: tuple[str, ...] = ()


@dataclass(frozen=True)
class SynthesisConfig:
    agent: str = "SynthesisAgent"
    llm_provider: str | None = None
    llm_backend: str | None = None


@dataclass(frozen=True)
class AgentConfig:
    name: str
    type: str = INVESTIGATION
    description: str = ""
    mcp_servers: tuple[str, ...] = ()
    custom_instructions: str = ""
    max_iterations: int | None = None
    llm_backend: str | None = None
    llm_provider: str | None = None
    fallback_providers: tuple[FallbackProvider, ...] | None = None
    # Gemini native tools for this agent; None: the provider's own setting. A list
    # replaces the provider's; a mapping (TARSy's form) switches single tools on or off.
    native_tools: tuple[str, ...] | None = None
    native_tool_switches: dict[str, bool] | None = None
    orchestrator: OrchestratorConfig | None = None
    # Skills it may load on demand (None: every skill; empty: none) and skills whose
    # text is in its prompt from the start.
    skills: tuple[str, ...] | None = None
    required_skills: tuple[str, ...] = ()


@dataclass(frozen=True)
class StageAgentConfig:
    name: str
    type: str | None = None  # TARSy's restatement of the agent's type (checked to agree)
    skills: tuple[str, ...] | None = None  # added to the agent's own
    required_skills: tuple[str, ...] = ()
    llm_provider: str | None = None
    llm_backend: str | None = None
    max_iterations: int | None = None
    mcp_servers: tuple[str, ...] | None = None
    fallback_providers: tuple[FallbackProvider, ...] | None = None
    sub_agents: tuple[SubAgentRef, ...] | None = None
    orchestrator: OrchestratorConfig | None = None


@dataclass(frozen=True)
class StageConfig:
    name: str
    agents: tuple[StageAgentConfig, ...]
    max_iterations: int | None = None
    mcp_servers: tuple[str, ...] | None = None
    fallback_providers: tuple[FallbackProvider, ...] | None = None
    replicas: int = 1
    success_policy: str | None = None  # None: defaults.success_policy
    synthesis: SynthesisConfig | None = None  # None: SynthesisAgent
    sub_agents: tuple[SubAgentRef, ...] | None = None

    @property
    def parallel(self) -> bool:
        return len(self.agents) > 1 or self.replicas > 1


@dataclass(frozen=True)
class ChatConfig:
    """Follow-up chat on an ended session (chain ``chat:``)."""

    enabled: bool = True
    agent: str = "ChatAgent"
    llm_provider: str | None = None
    llm_backend: str | None = None
    mcp_servers: tuple[str, ...] | None = None  # None: the chain's (else the agents') servers
    max_iterations: int | None = None
    sub_agents: tuple[SubAgentRef, ...] | None = None


@dataclass(frozen=True)
class ScoringConfig:
    """Scoring of a completed session (chain ``scoring:``); off unless enabled."""

    enabled: bool = False
    agent: str = "ScoringAgent"
    llm_provider: str | None = None
    llm_backend: str | None = None
    mcp_servers: tuple[str, ...] | None = None
    max_iterations: int | None = None


# What an investigation's budget limits (issue 23), and what runs once one is reached:
# the synthesis and executive summary still (``summarize``), or nothing more (``stop``).
BUDGET_KINDS = ("tokens", "cost_usd", "wall_time", "tool_calls", "llm_calls")
AFTER_LIMIT = ("summarize", "stop")


@dataclass(frozen=True)
class Budget:
    """What one investigation may spend (agents/budget.py); None: no limit of that kind.
    In a chain's or an alert type's ``budget`` an unset key (None, or ``after_limit``
    "") is taken from the level below it."""

    tokens: int | None = None
    cost_usd: float | None = None  # estimated from ``cost_estimation``'s rates
    wall_time: float | None = None  # seconds since the session started
    tool_calls: int | None = None
    llm_calls: int | None = None
    after_limit: str = ""

    def under(self, base: Budget) -> Budget:
        """This budget's keys over ``base``'s."""
        own = {
            name: getattr(self, name)
            for name in (*BUDGET_KINDS, "after_limit")
            if getattr(self, name) not in (None, "")
        }
        return dataclasses.replace(base, **own)

    def limits(self) -> dict[str, float]:
        return {kind: getattr(self, kind) for kind in BUDGET_KINDS if getattr(self, kind)}


@dataclass(frozen=True)
class BudgetConfig(Budget):
    """``defaults.budget``: every investigation's, and per alert type the keys that
    differ (``alert_types``), over the chain's own ``budget``."""

    alert_types: dict[str, Budget] = field(default_factory=dict)


@dataclass(frozen=True)
class ChainConfig:
    id: str
    alert_types: tuple[str, ...]
    stages: tuple[StageConfig, ...]
    description: str = ""
    llm_provider: str | None = None
    llm_backend: str | None = None
    max_iterations: int | None = None
    mcp_servers: tuple[str, ...] | None = None
    fallback_providers: tuple[FallbackProvider, ...] | None = None
    executive_summary_provider: str | None = None
    sub_agents: tuple[SubAgentRef, ...] | None = None
    chat: ChatConfig = field(default_factory=ChatConfig)
    scoring: ScoringConfig = field(default_factory=ScoringConfig)
    budget: Budget = field(default_factory=Budget)  # over ``defaults.budget``


@dataclass(frozen=True)
class AlertMasking:
    """Masking of the alert's own text before anything keeps it (TARSy's
    ``defaults.alert_masking``); secrets are masked either way, this adds a group."""

    enabled: bool = True
    pattern_group: str = "security"


@dataclass(frozen=True)
class EmbeddingConfig:
    """TARSy's ``defaults.memory.embedding``: a provider's embedding model (``google`` or
    ``openai``, llm/embeddings.py); no provider: the built-in local embedder. Empty
    fields take the provider's defaults (``GoogleEmbedder``, ``OpenAIEmbedder``)."""

    provider: str = ""
    model: str = ""
    api_key_env: str = ""
    dimensions: int | None = None
    base_url: str = ""


@dataclass(frozen=True)
class MemoryConfig:
    """TARSy's ``defaults.memory`` (ADR-0014): lessons distilled after scoring, recalled
    into later investigations."""

    enabled: bool = False
    max_inject: int = 5  # lessons put into an investigation's prompt, at most
    reflector_memory_limit: int = 20  # existing lessons the Reflector compares with
    embedding: EmbeddingConfig = field(default_factory=EmbeddingConfig)


@dataclass(frozen=True)
class DedupRule:
    """The duplicate-alert cooldown of one alert type (sessions/dedup.py): an alert whose
    fingerprint matches a session pending, running or ended less than ``window`` seconds
    ago is recorded on it instead of starting an investigation."""

    enabled: bool = False
    # The alert's fields the fingerprint is made of; none (or none found): the whole alert.
    fields: tuple[str, ...] = ()
    window: float = 600.0  # seconds


@dataclass(frozen=True)
class DedupConfig(DedupRule):
    """``defaults.dedup``: the rule of every alert type, and per alert type the keys that
    differ (``alert_types``; unset keys come from ``defaults.dedup``)."""

    alert_types: dict[str, DedupRule] = field(default_factory=dict)

    def for_alert_type(self, alert_type: str) -> DedupRule:
        return self.alert_types.get(
            alert_type, DedupRule(enabled=self.enabled, fields=self.fields, window=self.window)
        )


@dataclass(frozen=True)
class Defaults:
    alert_type: str = "kubernetes"
    max_iterations: int = 20
    llm_provider: str | None = None
    llm_backend: str | None = None
    fallback_providers: tuple[FallbackProvider, ...] = ()
    success_policy: str = "any"
    orchestrator: OrchestratorConfig = field(
        default_factory=lambda: OrchestratorConfig(max_concurrent_agents=5)
    )
    # Which model summarises large tool results when a server names none; None: the agent's.
    summarization_provider: str | None = None
    summarization_backend: str | None = None
    # The runbook of alerts that bring none: text, or a URL on the runbook allowlist.
    runbook: str = ""
    # What chains without a ``scoring:`` of their own score with (TARSy's
    # ``defaults.scoring``); its ``enabled`` turns scoring on for them.
    scoring: ScoringConfig = field(default_factory=ScoringConfig)
    alert_masking: AlertMasking = field(default_factory=AlertMasking)
    memory: MemoryConfig = field(default_factory=MemoryConfig)
    # The duplicate-alert cooldown (issue 23); off unless configured.
    dedup: DedupConfig = field(default_factory=DedupConfig)
    # What one investigation may spend (issue 23); no limits unless configured.
    budget: BudgetConfig = field(default_factory=BudgetConfig)


@dataclass(frozen=True)
class RunbooksConfig:
    repo_url: str = ""  # a GitHub folder whose files the submit form offers
    cache_ttl: float = 60.0  # seconds a fetched runbook is reused
    allowed_domains: tuple[str, ...] = ("github.com", "raw.githubusercontent.com")
    max_bytes: int = 256 * 1024  # a larger runbook is cut here


@dataclass(frozen=True)
class SlackConfig:
    enabled: bool = False
    token_env: str = "SLACK_BOT_TOKEN"  # the *name* of the variable holding the bot token
    channel: str = ""  # channel id (C0123…) the messages go to
    api_url: str = ""  # Slack Web API base URL; empty: slack-sdk's default


@dataclass(frozen=True)
class RetentionConfig:
    """TARSy's ``system.retention``; None: keep (sessions) or the default (events)."""

    session_retention_days: int | None = None
    event_ttl: float | None = None
    cleanup_interval: float | None = None


@dataclass(frozen=True)
class SystemConfig:
    dashboard_url: str = ""  # how links in Slack messages reach this TARSy; empty: none
    github_token_env: str = ""  # system.github.token_env: the variable holding a GitHub token
    runbooks: RunbooksConfig = field(default_factory=RunbooksConfig)
    slack: SlackConfig = field(default_factory=SlackConfig)
    # Origins (besides this site's own) whose pages may open the WebSocket.
    allowed_ws_origins: tuple[str, ...] = ()
    retention: RetentionConfig = field(default_factory=lambda: RetentionConfig())


@dataclass(frozen=True)
class FileProvider:
    """An LLM provider of ``llm-providers.yaml`` (or one of TARSy's built-in ones): used as
    written, shown in admin as coming from the file, never stored in the database."""

    name: str
    type: str
    model: str
    api_key_env: str = ""
    credentials_env: str = ""
    project_env: str = ""
    location_env: str = ""
    base_url: str = ""
    native_tools: tuple[str, ...] = ()
    source: str = "llm-providers.yaml"


@dataclass(frozen=True)
class QueueConfig:
    """TARSy's ``queue:`` block. Its keys with a counterpart here (QUEUE_SETTINGS) set
    those settings where the environment does not (config/queue.py); ``/system/config``
    shows the settings that run, under these names."""

    worker_count: int | None = None
    max_concurrent_sessions: int | None = None
    poll_interval: float | None = None
    poll_interval_jitter: float | None = None
    session_timeout: float | None = None
    graceful_shutdown_timeout: float | None = None
    scoring_shutdown_timeout: float | None = None
    orphan_detection_interval: float | None = None
    orphan_threshold: float | None = None
    heartbeat_interval: float | None = None


# TARSy's key → the setting that does its job here.
QUEUE_SETTINGS = {
    "max_concurrent_sessions": "TARSY_MAX_CONCURRENT_SESSIONS",
    "session_timeout": "TARSY_SESSION_TIMEOUT",
    "graceful_shutdown_timeout": "TARSY_SHUTDOWN_GRACE",
    "poll_interval": "TARSY_QUEUE_POLL",
    "orphan_detection_interval": "TARSY_RECOVERY_INTERVAL",
    "orphan_threshold": "TARSY_ORPHAN_THRESHOLD",
    "heartbeat_interval": "TARSY_HEARTBEAT_INTERVAL",
}

# TARSy's keys that size or pace what works differently here.
QUEUE_NOT_APPLIED = {
    "worker_count": (
        "a worker here is a process running many sessions at once; size it with "
        "TARSY_WORKERS and TARSY_WORKER_SESSIONS"
    ),
    "poll_interval_jitter": "the queue here is polled by django-q2 with no jitter",
    "scoring_shutdown_timeout": (
        "scorings stop with the rest of a worker's work (TARSY_SHUTDOWN_GRACE)"
    ),
}


@dataclass(frozen=True)
class Skill:
    """A SKILL.md of the config directory's ``skills/`` (config/skills.py)."""

    name: str
    description: str
    body: str


@dataclass(frozen=True)
class TarsyConfig:
    source: str
    defaults: Defaults
    mcp_servers: dict[str, MCPServerConfig]
    agents: dict[str, AgentConfig]
    chains: dict[str, ChainConfig]
    cost_estimation: CostEstimation = field(default_factory=CostEstimation)
    system: SystemConfig = field(default_factory=SystemConfig)
    # llm-providers.yaml's providers over TARSy's built-in ones, by name.
    llm_providers: dict[str, FileProvider] = field(default_factory=dict)
    queue: QueueConfig = field(default_factory=QueueConfig)
    # The config directory's skills/, by name.
    skills: dict[str, Skill] = field(default_factory=dict)
    # What loads but may not do what was meant (``<file>: <key>: <why>``), for
    # ``manage.py check`` and the System page.
    warnings: tuple[str, ...] = ()

    @property
    def alert_types(self) -> list[str]:
        return sorted(t for chain in self.chains.values() for t in chain.alert_types)

    def chain_for_alert_type(self, alert_type: str) -> ChainConfig | None:
        for chain in self.chains.values():
            if alert_type in chain.alert_types:
                return chain
        return None

    def budget_for(self, chain: ChainConfig, alert_type: str) -> Budget:
        """An investigation's budget: ``defaults.budget``, under the chain's own, under
        the alert type's; ``after_limit`` ``summarize`` unless one of them says."""
        budget = self.defaults.budget.under(Budget())
        budget = chain.budget.under(budget)
        own = self.defaults.budget.alert_types.get(alert_type)
        if own is not None:
            budget = own.under(budget)
        return (
            budget if budget.after_limit else dataclasses.replace(budget, after_limit="summarize")
        )
