"""System checks run by ``manage.py check``/``migrate`` (and so by bin/run at start-up)."""

from __future__ import annotations

from django.conf import settings
from django.core.checks import CheckMessage, Error, register
from django.db import DatabaseError


@register()
def check_queue_timeouts(app_configs, **kwargs) -> list[CheckMessage]:
    cluster = settings.Q_CLUSTER
    timeout = settings.TARSY_SESSION_TIMEOUT
    problems: list[CheckMessage] = []
    if cluster["timeout"] <= timeout:
        problems.append(
            Error(
                f"Q_CLUSTER timeout ({cluster['timeout']} s) must exceed TARSY_SESSION_TIMEOUT "
                f"({timeout} s), or django-q2 kills sessions before TARSy times them out.",
                id="tarsy.E001",
            )
        )
    if cluster["retry"] <= cluster["timeout"]:
        problems.append(
            Error(
                f"Q_CLUSTER retry ({cluster['retry']} s) must exceed its timeout "
                f"({cluster['timeout']} s), or running sessions are delivered twice.",
                id="tarsy.E002",
            )
        )
    if settings.TARSY_ORPHAN_THRESHOLD < 2 * settings.TARSY_HEARTBEAT_INTERVAL:
        problems.append(
            Error(
                f"TARSY_ORPHAN_THRESHOLD ({settings.TARSY_ORPHAN_THRESHOLD:g} s) must be at least "
                f"twice TARSY_HEARTBEAT_INTERVAL ({settings.TARSY_HEARTBEAT_INTERVAL:g} s), or "
                "healthy sessions are timed out between two heartbeats.",
                id="tarsy.E004",
            )
        )
    return problems


@register(deploy=False)
def check_config_references(app_configs, databases=None, **kwargs) -> list[CheckMessage]:
    """tarsy.yaml names providers that live in the database; check them when we can."""
    if not databases:
        return []
    from config.loader import get_config, validate_references
    from config.providers import default_provider
    from llm.models import LLMProvider
    from llm.registry import backend_names

    try:
        providers = list(LLMProvider.objects.filter(enabled=True).only("name", "is_default"))
    except DatabaseError:
        return []  # not migrated yet; migrate runs the checks again afterwards
    config = get_config()
    problems = validate_references(
        config,
        provider_names={provider.name for provider in providers},
        has_default_provider=default_provider(config.defaults.llm_provider, providers) is not None,
        backend_names=backend_names(),
    )
    return [Error(problem, id="tarsy.E003") for problem in problems]
