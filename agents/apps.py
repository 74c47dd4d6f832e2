from __future__ import annotations

from django.apps import AppConfig


class AgentsConfig(AppConfig):
    name = "agents"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Parse tarsy.yaml at start-up: a broken config stops every process (daphne,
        # qcluster, manage.py) with a message naming the file and key.
        from config.loader import get_config

        get_config()
