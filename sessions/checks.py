"""System checks run by ``manage.py check``/``migrate`` (and so by bin/run at start-up)."""

from __future__ import annotations

from django.conf import settings
from django.core.checks import CheckMessage, Error, register


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
