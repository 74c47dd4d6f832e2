"""One tiny real call to an LLM provider (a probe), for the "Test" buttons in Django admin.

The call goes through the same registry backend an investigation would use, so a
success here means the worker can reach the model with this row's settings — as long
as the worker's environment holds the same variables as the web process's (keys are
read from the environment of whichever process makes the call).

Failures are reported, never raised: the backends already turn every SDK failure into
a classified ``ErrorInfo`` (a missing key variable is an ``auth_error`` that names the
variable), and whatever slips past them is classified here. Messages never contain a
key: the value of the provider's key variable is masked in anything shown.
"""

from __future__ import annotations

import asyncio
import os
import re
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from llm.errors import INVALID_REQUEST, TIMEOUT, classify_error
from llm.models import BACKENDS_FOR_TYPE, LLMProvider
from llm.registry import get_backend
from llm.types import (
    ConversationMessage,
    ErrorInfo,
    GenerateRequest,
    ProviderConfig,
    Role,
    TextDelta,
    ThinkingDelta,
)

DEFAULT_TIMEOUT = 30.0
EMPTY_REPLY = "empty_response"
SYSTEM_PROMPT = "Reply with the single word: ok"
USER_PROMPT = "ping"
QUOTE_CHARS = 80
# Shorter values could mask ordinary words in messages; real keys are far longer.
_MIN_MASKED_KEY = 6
_SPACES = re.compile(r"\s+")


@dataclass(frozen=True)
class ProviderTestResult:
    ok: bool
    backend: str
    message: str
    duration_ms: int
    code: str = ""  # the classified error code; empty on success


def probe_provider(
    provider: LLMProvider,
    *,
    backend: str | None = None,
    timeout: float = DEFAULT_TIMEOUT,
) -> ProviderTestResult:
    """Make one small real call through ``backend`` (default: the type's default one).

    Synchronous, for admin views: runs its own event loop, so it must not be called
    from a thread that already runs one.
    """
    config = provider.to_config()
    return asyncio.run(_probe(config, backend or provider.default_backend(), timeout))


def probe_providers(
    providers: Sequence[tuple[LLMProvider, str]],
    *,
    timeout: float = DEFAULT_TIMEOUT,
) -> list[ProviderTestResult]:
    """``probe_provider`` for several (provider, backend) pairs at once, results in order.

    Concurrent, so that testing ten providers costs the slowest call rather than the
    sum — the admin request waits for all of them.
    """
    configs = [(provider.to_config(), backend) for provider, backend in providers]

    async def run_all() -> list[ProviderTestResult]:
        return list(
            await asyncio.gather(*(_probe(config, backend, timeout) for config, backend in configs))
        )

    return asyncio.run(run_all()) if configs else []


async def _probe(config: ProviderConfig, backend: str, seconds: float) -> ProviderTestResult:
    started = time.monotonic()

    def result(ok: bool, message: str, code: str = "") -> ProviderTestResult:
        return ProviderTestResult(
            ok=ok,
            backend=backend,
            message=_mask_key(config, message),
            duration_ms=round((time.monotonic() - started) * 1000),
            code=code,
        )

    allowed = BACKENDS_FOR_TYPE.get(config.type, ())
    if backend not in allowed:
        return result(
            False,
            f"backend {backend!r} cannot drive a provider of type {config.type!r}; "
            f"allowed: {', '.join(allowed) or 'none'}",
            INVALID_REQUEST,
        )
    request = GenerateRequest(
        messages=(
            ConversationMessage(Role.SYSTEM, SYSTEM_PROMPT),
            ConversationMessage(Role.USER, USER_PROMPT),
        ),
        config=config,
        execution_id=f"admin-test-{uuid.uuid4()}",
    )
    text: list[str] = []
    thinking: list[str] = []
    error: ErrorInfo | None = None
    try:
        provider = get_backend(backend)
        async with asyncio.timeout(seconds):
            stream = provider.generate(request)
            try:
                async for delta in stream:
                    if isinstance(delta, TextDelta):
                        text.append(delta.content)
                    elif isinstance(delta, ThinkingDelta):
                        thinking.append(delta.content)
                    elif isinstance(delta, ErrorInfo):
                        error = delta
                        break
            finally:
                # Close the HTTP stream now (on timeout too), not when it is collected.
                aclose = getattr(stream, "aclose", None)
                if aclose is not None:
                    await aclose()
    except TimeoutError:
        return result(False, f"no complete reply within {seconds:g} s", TIMEOUT)
    except Exception as exc:
        # Backends yield errors rather than raise; a bug in one must still not turn
        # the admin page into a 500.
        classified = classify_error(exc)
        return result(False, f"{type(exc).__name__}: {classified.message}", classified.code)

    if error is not None:
        return result(False, error.message, error.code)
    reply = "".join(text).strip()
    elapsed_ms = round((time.monotonic() - started) * 1000)
    if reply:
        return result(True, f"replied {_quote(reply)} in {elapsed_ms} ms")
    thought = "".join(thinking).strip()
    if thought:
        return result(True, f"replied with thinking only, {_quote(thought)}, in {elapsed_ms} ms")
    return result(False, "the model answered with no text at all", EMPTY_REPLY)


def _quote(text: str) -> str:
    flat = _SPACES.sub(" ", text)
    if len(flat) > QUOTE_CHARS:
        flat = flat[:QUOTE_CHARS].rstrip() + "…"
    return f"“{flat}”"


def _mask_key(config: ProviderConfig, message: str) -> str:
    """Defence in depth: SDK messages should never echo a key, but some echo headers."""
    key = os.environ.get(config.api_key_env, "") if config.api_key_env else ""
    if len(key) >= _MIN_MASKED_KEY:
        message = message.replace(key, "***")
    return message
