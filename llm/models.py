"""LLM providers, edited in Django admin.

API keys never live here: ``api_key_env`` holds the *name* of the environment
variable that holds the key, read by the backend at call time.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from pathlib import Path

from django.core.exceptions import ValidationError
from django.db import models

from llm.types import NATIVE_TOOLS, ProviderConfig
from masking import mask_text

ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# The scripted backend's built-in investigation (llm/demo_script.py).
DEMO_SCRIPT = "demo"


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
NATIVE_TOOL_TYPES = (ProviderType.GOOGLE, ProviderType.VERTEXAI)
# Every field an operator types free text into (the rest are choices and flags).
SECRET_CHECKED_FIELDS = (
    "name",
    "model",
    "api_key_env",
    "base_url",
    "project_env",
    "location_env",
    "options",
)
# Shown in the "needs an API key variable" message.
_KEY_EXAMPLE: dict[str, str] = {
    ProviderType.GOOGLE: "GEMINI_API_KEY",
    ProviderType.OPENAI: "OPENAI_API_KEY",
    ProviderType.ANTHROPIC: "ANTHROPIC_API_KEY",
    ProviderType.XAI: "XAI_API_KEY",
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
    # Where the provider is defined: "admin" (a row), or, for providers of the
    # configuration read like rows (config/providers.py), "llm-providers.yaml" or "built-in".
    source = "admin"

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
        errors: dict[str, list[str]] = {}

        def reject(field: str, message: str) -> None:
            errors.setdefault(field, []).append(message)

        for field in ("api_key_env", "project_env", "location_env"):
            value = getattr(self, field)
            if value and not ENV_NAME_RE.match(value):
                reject(
                    field,
                    f"{value!r} is not an environment variable name; enter the variable's "
                    "name (e.g. GEMINI_API_KEY), never the key itself.",
                )
        if self.type != ProviderType.SCRIPTED and not self.model:
            reject("model", "A model name is required for this provider type.")
        if self.type == ProviderType.VERTEXAI:
            for field, what in (("project_env", "project"), ("location_env", "location")):
                if not getattr(self, field):
                    reject(
                        field,
                        f"Vertex AI needs both the project and the location variable: enter "
                        f"the name of the variable that holds the {what} "
                        f"(e.g. GOOGLE_CLOUD_{what.upper()}).",
                    )
        if (
            self.type in BACKENDS_FOR_TYPE  # an unknown type has its own error already
            and self.type not in (ProviderType.SCRIPTED, ProviderType.VERTEXAI)
            and not self.api_key_env
            # A self-hosted OpenAI-compatible server (vLLM, Ollama) may need no key.
            and not (self.type == ProviderType.OPENAI and self.base_url)
        ):
            reject(
                "api_key_env",
                f"A {self.get_type_display()} provider needs the name of the environment "
                f"variable that holds its API key (e.g. {_KEY_EXAMPLE.get(self.type, 'API_KEY')})"
                + (
                    "; only an OpenAI-compatible server with a base URL may go without one."
                    if self.type == ProviderType.OPENAI
                    else "."
                ),
            )
        if self.type == ProviderType.SCRIPTED and self.base_url:
            reject("base_url", "A scripted provider calls no server: clear the base URL.")
        self._clean_native_tools(reject)
        self._clean_options(reject)
        self._clean_default(reject)
        self._clean_secrets(reject)
        if errors:
            raise ValidationError(errors)

    def _clean_native_tools(self, reject: Callable[[str, str], None]) -> None:
        if not isinstance(self.native_tools, list):
            reject("native_tools", 'Enter a JSON list, e.g. ["google_search"].')
            return
        if not self.native_tools:
            return
        if self.type not in NATIVE_TOOL_TYPES:
            reject(
                "native_tools",
                "Native tools are Gemini features: only Google Gemini and Vertex AI providers "
                "take them; empty the list ([]) for this type.",
            )
            return
        unknown = [tool for tool in self.native_tools if tool not in NATIVE_TOOLS]
        if unknown:
            reject(
                "native_tools",
                f"Unknown native tool(s) {', '.join(map(repr, unknown))}; "
                f"choose among {', '.join(NATIVE_TOOLS)}.",
            )

    def _clean_options(self, reject: Callable[[str, str], None]) -> None:
        if not isinstance(self.options, dict):
            reject("options", 'Enter a JSON object, e.g. {"script": "demo"}.')
            return
        if self.type != ProviderType.SCRIPTED or "script" not in self.options:
            return  # without "script" the scripted backend plays the built-in demo
        script = self.options["script"]
        if script == DEMO_SCRIPT:
            return
        if not isinstance(script, str) or not script.strip():
            reject(
                "options",
                f'options.script must be "{DEMO_SCRIPT}" or the path of a script file; '
                f"got {script!r}.",
            )
        elif not Path(script).is_file():
            reject(
                "options",
                f'options.script: no file at {script!r} on this server; use "{DEMO_SCRIPT}" '
                "for the built-in demo or an absolute path the worker can read.",
            )

    def _clean_secrets(self, reject: Callable[[str, str], None]) -> None:
        """Refuse what the masking would hide: the admin shows these fields and the
        database keeps them, so a key pasted into one (or a base URL carrying a password
        or a key) would be on every page that shows the provider. Masking it instead
        would store a URL or name that no longer works."""
        for field in SECRET_CHECKED_FIELDS:
            value = getattr(self, field)
            text = value if isinstance(value, str) else json.dumps(value, default=str)
            if text and mask_text(text) != text:
                reject(
                    field,
                    "This looks like it holds a secret (a key, a token, or a password in "
                    "the URL); TARSy keeps no secrets in its database. Put the secret in an "
                    "environment variable and enter that variable's name in “API key "
                    "variable”.",
                )

    def _clean_default(self, reject: Callable[[str, str], None]) -> None:
        """At most one default, said plainly: the database constraint alone gives a
        generic "constraint violated" in forms and an IntegrityError elsewhere."""
        if not self.is_default:
            return
        current = LLMProvider.objects.filter(is_default=True).exclude(pk=self.pk).first()
        if current is not None:
            reject(
                "is_default",
                f"{current.name!r} is already the default provider; untick “is default” "
                f"on {current.name!r} first, then save this one.",
            )

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
