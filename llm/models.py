"""LLM providers, edited in Django admin.

API keys never live here: ``api_key_env`` holds the *name* of the environment
variable that holds the key, read by the backend at call time.
"""

from __future__ import annotations

import os
import re

from django.core.exceptions import ValidationError
from django.db import models

from llm.types import ProviderConfig

ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class ProviderType(models.TextChoices):
    SCRIPTED = "scripted", "Scripted (demo and tests)"
    GOOGLE = "google", "Google Gemini"
    OPENAI = "openai", "OpenAI or OpenAI-compatible"
    ANTHROPIC = "anthropic", "Anthropic"
    XAI = "xai", "xAI"
    VERTEXAI = "vertexai", "Google Vertex AI"


# Which llm_backend values can drive each provider type, first one is the default.
BACKENDS_FOR_TYPE: dict[str, tuple[str, ...]] = {
    ProviderType.SCRIPTED: ("scripted",),
    ProviderType.GOOGLE: ("langchain", "google-native"),
    ProviderType.OPENAI: ("langchain",),
    ProviderType.ANTHROPIC: ("langchain",),
    ProviderType.XAI: ("langchain",),
    ProviderType.VERTEXAI: ("langchain",),
}


class LLMProvider(models.Model):
    name = models.SlugField(max_length=100, unique=True, help_text="Referenced by tarsy.yaml.")
    type = models.CharField(max_length=20, choices=ProviderType.choices)
    model = models.CharField(max_length=200, blank=True)
    api_key_env = models.CharField(
        "API key variable",
        max_length=100,
        blank=True,
        help_text="Name of the environment variable that holds the API key (never the key).",
    )
    base_url = models.URLField(
        max_length=500, blank=True, help_text="For OpenAI-compatible servers (vLLM, Ollama…)."
    )
    project_env = models.CharField(
        max_length=100, blank=True, help_text="Vertex AI project variable."
    )
    location_env = models.CharField(
        max_length=100, blank=True, help_text="Vertex AI location variable."
    )
    native_tools = models.JSONField(
        default=list, blank=True, help_text='Gemini native tools, e.g. ["google_search"].'
    )
    options = models.JSONField(
        default=dict, blank=True, help_text="Backend options, e.g. a script path for scripted."
    )
    enabled = models.BooleanField(default=True)
    is_default = models.BooleanField(
        default=False, help_text="Used when tarsy.yaml names no provider. At most one."
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        verbose_name = "LLM provider"
        constraints = [
            models.UniqueConstraint(
                fields=["is_default"],
                condition=models.Q(is_default=True),
                name="llm_one_default_provider",
            )
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.type}: {self.model or '-'})"

    def clean(self) -> None:
        errors: dict[str, str] = {}
        for field in ("api_key_env", "project_env", "location_env"):
            value = getattr(self, field)
            if value and not ENV_NAME_RE.match(value):
                errors[field] = (
                    f"{value!r} is not an environment variable name; enter the variable's "
                    "name (e.g. GEMINI_API_KEY), never the key itself."
                )
        if self.type != ProviderType.SCRIPTED and not self.model:
            errors["model"] = "A model name is required for this provider type."
        if self.type == ProviderType.VERTEXAI and not (self.project_env and self.location_env):
            errors["project_env"] = "Vertex AI needs both the project and the location variable."
        if not isinstance(self.native_tools, list):
            errors["native_tools"] = 'Enter a JSON list, e.g. ["google_search"].'
        if errors:
            raise ValidationError(errors)

    @property
    def key_is_set(self) -> bool:
        """Whether the key variable is present in this process's environment."""
        return not self.api_key_env or bool(os.environ.get(self.api_key_env))

    def default_backend(self) -> str:
        return BACKENDS_FOR_TYPE[self.type][0]

    def to_config(self) -> ProviderConfig:
        return ProviderConfig(
            name=self.name,
            type=self.type,
            model=self.model,
            api_key_env=self.api_key_env,
            base_url=self.base_url,
            project_env=self.project_env,
            location_env=self.location_env,
            native_tools=tuple(self.native_tools or ()),
            options=dict(self.options or {}),
        )
