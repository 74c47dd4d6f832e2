from __future__ import annotations

from django.apps import AppConfig


class AgentsConfig(AppConfig):
    name = "agents"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Parse tarsy.yaml at start-up: a broken config stops every process (daphne,
        # qcluster, manage.py) with a message naming the file and key; ``manage.py check``
        # reports it as a system check error instead (agents/checks.py).
        import sys

        from agents import checks
        from config.loader import ConfigError, get_config

        try:
            get_config()
        except ConfigError as error:
            if sys.argv[1:2] != ["check"]:
                raise SystemExit(f"TARSy's configuration is not valid:\n{error}") from None
            checks.LOAD_ERROR.append(error)
