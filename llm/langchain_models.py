"""LangChain chat models per provider type, built from a ``ProviderConfig``.

Keys and Vertex AI project/location are read here from the environment variables the
config *names*; a missing variable raises ``llm.clients.MissingEnvironmentVariable`` whose message
names the variable (never a value). SDK retries are switched off everywhere: retries
belong to ``llm.retry`` so that Retry-After, backoff and cancellation behave the same
for every provider.

Each model gets HTTP clients of its own instead of the per-base-URL clients the
LangChain packages share process-wide: pooled connections belong to the event loop
that opened them, and a worker runs each session in a fresh ``asyncio.run``. The
provider therefore caches models per event loop as well as per configuration.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

import anthropic
import openai
from langchain_anthropic import ChatAnthropic
from langchain_core.language_models import BaseChatModel
from langchain_core.outputs import ChatGenerationChunk
from langchain_google_genai import ChatGoogleGenerativeAI
from langchain_openai import ChatOpenAI

from llm.clients import env_value
from llm.types import ProviderConfig

# Anthropic requires max_tokens on every request (docs/design/seeds.md, seed 001 Q8): half
# of Sonnet's limit is ample for an agent turn.
ANTHROPIC_MAX_TOKENS = 32000
XAI_BASE_URL = "https://api.x.ai/v1"
# Self-hosted OpenAI-compatible servers (vLLM, Ollama) often need no key, but the
# OpenAI SDK refuses to build a client without one; vLLM documents "EMPTY".
PLACEHOLDER_API_KEY = "EMPTY"
# The google-genai SDK reads 0 as "use the default" (5 retries); 1 attempt is none.
GOOGLE_SINGLE_ATTEMPT = 1

ModelKey = tuple[str, ...]


def model_key(config: ProviderConfig) -> ModelKey:
    """What identifies one chat model: the variables' names, never their values."""
    key: ModelKey = (config.type, config.model, config.api_key_env, config.base_url)
    if config.type == "vertexai":
        key += (config.project_env, config.location_env)
    return key


def is_claude_model(model: str) -> bool:
    name = model.lower()
    return "claude" in name or "anthropic" in name


def create_chat_model(config: ProviderConfig) -> BaseChatModel:
    match config.type:
        case "openai":
            return _openai_compatible(config, default_base_url="")
        case "xai":
            # xAI speaks the OpenAI Chat Completions protocol; langchain-xai is not a
            # dependency, and ChatOpenAI plus reasoning_content covers what it adds.
            return _openai_compatible(config, default_base_url=XAI_BASE_URL)
        case "anthropic":
            return _anthropic(config)
        case "google":
            return _google(config)
        case "vertexai":
            return _vertex(config)
        case _:
            raise ValueError(
                f"LLM provider {config.name!r}: type {config.type!r} is not served by the "
                "langchain backend (expected openai, anthropic, google, xai or vertexai)"
            )


class ChatOpenAICompatible(ChatOpenAI):
    """ChatOpenAI that keeps the reasoning text OpenAI-compatible servers stream.

    vLLM, DeepSeek and xAI send it as ``delta.reasoning_content`` (newer vLLM and
    Ollama as ``delta.reasoning``); ChatOpenAI drops both. Kept in
    ``additional_kwargs["reasoning_content"]``, the key LangChain uses for it elsewhere.
    """

    def _convert_chunk_to_generation_chunk(
        self,
        chunk: dict[str, Any],
        default_chunk_class: type,
        base_generation_info: dict[str, Any] | None,
    ) -> ChatGenerationChunk | None:
        generation = super()._convert_chunk_to_generation_chunk(
            chunk, default_chunk_class, base_generation_info
        )
        choices = chunk.get("choices") or []
        delta = (choices[0].get("delta") if choices else None) or {}
        reasoning = delta.get("reasoning_content") or delta.get("reasoning")
        if generation is not None and isinstance(reasoning, str) and reasoning:
            generation.message.additional_kwargs["reasoning_content"] = reasoning
        return generation


def _openai_compatible(config: ProviderConfig, *, default_base_url: str) -> ChatOpenAI:
    base_url = config.base_url or default_base_url
    if config.api_key_env or not config.base_url:
        api_key = env_value(config, "api_key_env")
    else:
        api_key = PLACEHOLDER_API_KEY
    return ChatOpenAICompatible(
        model=config.model,
        api_key=api_key,
        base_url=base_url or None,
        # Some model names and options silently switch ChatOpenAI to the Responses
        # API, which OpenAI-compatible servers do not implement.
        use_responses_api=False,
        # Off by default for a custom base_url; vLLM and Ollama support it.
        stream_usage=True,
        max_retries=0,
        http_async_client=openai.DefaultAsyncHttpxClient(),
    )


class ChatAnthropicOwnClient(ChatAnthropic):
    """ChatAnthropic with an SDK client (and connection pool) of its own."""

    @cached_property
    def _async_client(self) -> anthropic.AsyncAnthropic:
        return anthropic.AsyncAnthropic(**self._client_params)


class ChatAnthropicOnVertex(ChatAnthropicOwnClient):
    """Claude on Vertex AI through the ``anthropic`` SDK's ``AsyncAnthropicVertex``.

    langchain-google-vertexai (home of LangChain's ChatAnthropicVertex) is not a
    dependency; Vertex serves the same Messages body and events under a
    project/region URL with a Google OAuth token, which AsyncAnthropicVertex
    handles from Application Default Credentials.
    """

    vertex_project: str
    vertex_region: str
    vertex_base_url: str | None = None

    @cached_property
    def _async_client(self) -> anthropic.AsyncAnthropicVertex:  # type: ignore[override]
        params = self._client_params
        extra = {"timeout": params["timeout"]} if "timeout" in params else {}
        return anthropic.AsyncAnthropicVertex(
            region=self.vertex_region,
            project_id=self.vertex_project,
            base_url=self.vertex_base_url,
            max_retries=params["max_retries"],
            default_headers=params["default_headers"],
            **extra,
        )


def _anthropic(config: ProviderConfig) -> ChatAnthropic:
    kwargs: dict[str, Any] = {}
    if config.base_url:
        kwargs["base_url"] = config.base_url
    return ChatAnthropicOwnClient(
        model=config.model,
        api_key=env_value(config, "api_key_env"),
        max_tokens=ANTHROPIC_MAX_TOKENS,
        max_retries=0,
        **kwargs,
    )


def _google(config: ProviderConfig) -> ChatGoogleGenerativeAI:
    kwargs: dict[str, Any] = {}
    if config.base_url:
        kwargs["base_url"] = config.base_url
    return _with_thoughts(
        ChatGoogleGenerativeAI(
            model=config.model,
            api_key=env_value(config, "api_key_env"),
            # Explicit, so GOOGLE_GENAI_USE_VERTEXAI in the environment cannot flip it.
            vertexai=False,
            max_retries=GOOGLE_SINGLE_ATTEMPT,
            **kwargs,
        )
    )


def _vertex(config: ProviderConfig) -> BaseChatModel:
    project = env_value(config, "project_env")
    location = env_value(config, "location_env")
    if is_claude_model(config.model):
        return ChatAnthropicOnVertex(
            model=config.model,
            max_tokens=ANTHROPIC_MAX_TOKENS,
            max_retries=0,
            vertex_project=project,
            vertex_region=location,
            vertex_base_url=config.base_url or None,
        )
    kwargs: dict[str, Any] = {}
    if config.base_url:
        kwargs["base_url"] = config.base_url
    return _with_thoughts(
        ChatGoogleGenerativeAI(
            model=config.model,
            vertexai=True,
            project=project,
            location=location,
            max_retries=GOOGLE_SINGLE_ATTEMPT,
            **kwargs,
        )
    )


def _with_thoughts(model: ChatGoogleGenerativeAI) -> ChatGoogleGenerativeAI:
    # Gemini returns thought summaries only when asked, and models that cannot think
    # reject the request; LangChain's model profile says which is which.
    if (model.profile or {}).get("reasoning_output"):
        model.include_thoughts = True
    return model
