from __future__ import annotations

from django.apps import AppConfig


class SessionsConfig(AppConfig):
    name = "sessions"
    # "sessions" is django.contrib.sessions' label.
    label = "alert_sessions"
    verbose_name = "Alert sessions"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from sessions import checks  # noqa: F401 - registers system checks
