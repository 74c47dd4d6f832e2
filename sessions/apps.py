from __future__ import annotations

import sys

from django.apps import AppConfig


class SessionsConfig(AppConfig):
    name = "sessions"
    # "sessions" is django.contrib.sessions' label.
    label = "alert_sessions"
    verbose_name = "Alert sessions"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from sessions import checks  # noqa: F401 - registers system checks

        if "qcluster" in sys.argv:
            # django-q2 forks its workers from this process: importing the agent stack
            # (the MCP SDK alone takes ~1 s) and listing the MCP servers' tools here once
            # spares every worker's first session both.
            import agents.executor  # noqa: F401
            from agents.config import get_config
            from agents.toolbox import warm_catalog

            warm_catalog(get_config())
