"""The provider-neutral types every LLM backend speaks.

The request carries the whole conversation each call (backends keep no conversation
state), tool definitions with canonical ``server.tool`` names, and the resolved
provider configuration. A backend answers with a stream of deltas.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

# Gemini's built-in tools that google-native can switch on (llm/google_native.py).
NATIVE_TOOLS = ("google_search", "code_execution", "url_context")


class Role(StrEnum):
    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str  # canonical "server.tool"
    arguments: dict[str, Any]


@dataclass(frozen=True)
class ConversationMessage:
    role: Role
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    # For role=tool: which call this result answers.
    tool_call_id: str = ""
    tool_name: str = ""


@dataclass(frozen=True)
class ToolDefinition:
    name: str  # canonical "server.tool"
    description: str
    parameters_schema: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ProviderConfig:
    """Everything a backend needs to reach one model; built from an ``LLMProvider`` row.

    ``api_key_env`` and friends are *names* of environment variables; backends read
    the values themselves so that keys never travel through the database or logs.
    """

    name: str
    type: str
    model: str
    api_key_env: str = ""
    base_url: str = ""
    project_env: str = ""
    location_env: str = ""
    native_tools: tuple[str, ...] = ()
    options: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class GenerateRequest:
    messages: tuple[ConversationMessage, ...]
    config: ProviderConfig
    tools: tuple[ToolDefinition, ...] = ()
    # Identifies one agent execution; backends key per-conversation caches on it
    # (Gemini thought signatures).
    execution_id: str = ""
    session_id: str = ""
    # Which agent asks; only the scripted backend reads it (a script's turns per agent).
    agent_name: str = ""


@dataclass(frozen=True)
class TextDelta:
    content: str


@dataclass(frozen=True)
class ThinkingDelta:
    content: str


@dataclass(frozen=True)
class ToolCallDelta:
    call_id: str
    name: str  # canonical "server.tool"
    arguments: dict[str, Any]


@dataclass(frozen=True)
class CodeExecutionDelta:
    code: str = ""
    result: str = ""


@dataclass(frozen=True)
class UsageInfo:
    """Tokens of one call. ``output_tokens`` includes ``thinking_tokens`` — thinking is
    billed as output by every provider — so cost is input * in-rate + output * out-rate."""

    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0
    thinking_tokens: int = 0


@dataclass(frozen=True)
class ErrorInfo:
    code: str
    message: str
    retryable: bool = False


@dataclass(frozen=True)
class GroundingInfo:
    """Search/URL grounding metadata returned by Gemini native tools."""

    metadata: dict[str, Any]


Delta = (
    TextDelta
    | ThinkingDelta
    | ToolCallDelta
    | CodeExecutionDelta
    | UsageInfo
    | ErrorInfo
    | GroundingInfo
)
