from __future__ import annotations

from django.apps import AppConfig


class LLMConfig(AppConfig):
    name = "llm"
    verbose_name = "LLM providers"
    default_auto_field = "django.db.models.BigAutoField"
