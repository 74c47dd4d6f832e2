"""Import the LLM backends the enabled providers can use, before a qcluster forks."""

from __future__ import annotations

import logging
import time

from llm.models import BACKENDS_FOR_TYPE, LLMProvider
from llm.registry import get_backend

logger = logging.getLogger(__name__)


def warm_backends() -> list[str]:
    """The backends warmed: every backend that can drive an enabled provider's type."""
    types = set(LLMProvider.objects.filter(enabled=True).values_list("type", flat=True))
    names = sorted({backend for t in types for backend in BACKENDS_FOR_TYPE.get(t, ())})
    for name in names:
        started = time.monotonic()
        try:
            get_backend(name)  # imports its SDKs; the instance is inherited by the workers
        except Exception:
            logger.warning("could not warm LLM backend %s", name, exc_info=True)
            continue
        logger.info("warmed LLM backend %s in %.1f s", name, time.monotonic() - started)
    return names
