"""Typed, immutable configuration objects parsed from tarsy.yaml (see agents/config.py)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class StdioTransport:
    command: str
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class MCPServerConfig:
    id: str
    transport: StdioTransport
    instructions: str = ""


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


@dataclass(frozen=True)
class AgentConfig:
    name: str
    type: str = ""
    description: str = ""
    mcp_servers: tuple[str, ...] = ()
    custom_instructions: str = ""
    max_iterations: int | None = None
    llm_backend: str | None = None
    llm_provider: str | None = None
    fallback_providers: tuple[FallbackProvider, ...] | None = None
    # Gemini native tools for this agent; None: the provider's own setting.
    native_tools: tuple[str, ...] | None = None


@dataclass(frozen=True)
class StageAgentConfig:
    name: str
    llm_provider: str | None = None
    llm_backend: str | None = None
    max_iterations: int | None = None
    mcp_servers: tuple[str, ...] | None = None
    fallback_providers: tuple[FallbackProvider, ...] | None = None


@dataclass(frozen=True)
class StageConfig:
    name: str
    agents: tuple[StageAgentConfig, ...]
    max_iterations: int | None = None


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


@dataclass(frozen=True)
class Defaults:
    alert_type: str
    max_iterations: int = 20
    llm_provider: str | None = None
    llm_backend: str | None = None
    fallback_providers: tuple[FallbackProvider, ...] = ()


@dataclass(frozen=True)
class ResolvedAgentConfig:
    """One agent of one stage with the hierarchy applied:
    defaults → agent → chain → stage → stage-agent."""

    agent_name: str
    type: str
    mcp_servers: tuple[str, ...]
    custom_instructions: str
    max_iterations: int
    llm_provider: str | None  # None: the provider marked default in admin
    llm_backend: str | None  # None: the provider type's default backend
    # Tried in order after the provider fails for good (non-retryable or retries spent).
    fallback_providers: tuple[FallbackProvider, ...] = ()
    native_tools: tuple[str, ...] | None = None  # None: the provider's own setting


@dataclass(frozen=True)
class TarsyConfig:
    source: str
    defaults: Defaults
    mcp_servers: dict[str, MCPServerConfig]
    agents: dict[str, AgentConfig]
    chains: dict[str, ChainConfig]
    cost_estimation: CostEstimation = field(default_factory=CostEstimation)

    @property
    def alert_types(self) -> list[str]:
        return sorted(t for chain in self.chains.values() for t in chain.alert_types)

    def chain_for_alert_type(self, alert_type: str) -> ChainConfig | None:
        for chain in self.chains.values():
            if alert_type in chain.alert_types:
                return chain
        return None

    def resolve_agent(
        self, chain: ChainConfig, stage: StageConfig, stage_agent: StageAgentConfig
    ) -> ResolvedAgentConfig:
        agent = self.agents[stage_agent.name]

        def pick(*values):  # the last value that is set wins
            chosen = None
            for value in values:
                if value is not None:
                    chosen = value
            return chosen

        return ResolvedAgentConfig(
            agent_name=agent.name,
            type=agent.type,
            mcp_servers=pick(agent.mcp_servers, chain.mcp_servers, stage_agent.mcp_servers) or (),
            custom_instructions=agent.custom_instructions,
            max_iterations=pick(
                self.defaults.max_iterations,
                agent.max_iterations,
                chain.max_iterations,
                stage.max_iterations,
                stage_agent.max_iterations,
            ),
            llm_provider=pick(
                self.defaults.llm_provider,
                agent.llm_provider,
                chain.llm_provider,
                stage_agent.llm_provider,
            ),
            llm_backend=pick(
                self.defaults.llm_backend,
                agent.llm_backend,
                chain.llm_backend,
                stage_agent.llm_backend,
            ),
            fallback_providers=pick(
                self.defaults.fallback_providers,
                agent.fallback_providers,
                chain.fallback_providers,
                stage_agent.fallback_providers,
            )
            or (),
            native_tools=agent.native_tools,
        )
