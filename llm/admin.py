"""LLM providers in Django admin: edit rows, see whether key variables are set, and
test a provider with one small real call.

Tests run in the web process, so they see the web process's environment; the worker
needs the same variables, which is what the "key variable" texts remind of.
"""

from __future__ import annotations

import os
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.db import models
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html_join

from llm.models import BACKENDS_FOR_TYPE, LLMProvider, ProviderType
from llm.provider_probe import ProviderTestResult, probe_provider, probe_providers


def variable_status(variable: str) -> str:
    """Whether ``variable`` is set here, never its value."""
    if os.environ.get(variable):
        return "set"
    return f"not set: export {variable}=… for both the web and worker processes"


@admin.register(LLMProvider)
class LLMProviderAdmin(admin.ModelAdmin):
    list_display = ("name", "type", "model", "api_key_env", "key_set", "enabled", "is_default")
    list_filter = ("type", "enabled")
    search_fields = ("name", "model")
    actions = ["test_selected"]
    readonly_fields = ("key_status",)
    # Django 6 makes https the scheme of a base URL typed without one; say so now (and
    # silence the deprecation warning). A key must not go out over plain http by
    # accident: a local vLLM/Ollama server is entered as http://… explicitly.
    formfield_overrides = {models.URLField: {"assume_scheme": "https"}}
    fieldsets = (
        (None, {"fields": ("name",)}),
        ("Connection", {"fields": ("type", "model", "base_url")}),
        (
            "Credentials",
            {
                "fields": ("api_key_env", "key_status", "project_env", "location_env"),
                "description": (
                    "Names of environment variables, never their values. The web and "
                    "worker processes both read them; restart both after exporting one."
                ),
            },
        ),
        ("Behaviour", {"fields": ("native_tools", "options", "enabled", "is_default")}),
    )

    @admin.display(boolean=True, description="key variable set")
    def key_set(self, provider: LLMProvider) -> bool:
        return provider.key_is_set

    @admin.display(description="Key variable in this process")
    def key_status(self, provider: LLMProvider) -> str:
        lines: list[tuple[str, str]] = []
        if provider.api_key_env:
            lines.append(("", variable_status(provider.api_key_env)))
        elif provider.type == ProviderType.SCRIPTED:
            lines.append(("", "not needed: a scripted provider calls no API"))
        elif provider.type == ProviderType.VERTEXAI:
            lines.append(("", "none: Vertex AI uses Application Default Credentials"))
        elif provider.type == ProviderType.OPENAI and provider.base_url:
            lines.append(("", "none: a keyless OpenAI-compatible server"))
        else:
            lines.append(("", "no key variable named yet"))
        if provider.type == ProviderType.VERTEXAI:
            # Vertex AI's project and location are read from variables just like a key.
            lines.extend(
                (f"{variable}: ", variable_status(variable))
                for variable in (provider.project_env, provider.location_env)
                if variable
            )
        if len(lines) == 1:
            return lines[0][1]
        return format_html_join("", "<div>{}{}</div>", lines)

    # -- testing -------------------------------------------------------------------------

    @admin.action(description="Test selected providers", permissions=["change"])
    def test_selected(self, request: HttpRequest, queryset: QuerySet[LLMProvider]) -> None:
        # Every backend the type allows: tarsy.yaml may pick any of them per agent.
        pairs = [
            (provider, backend)
            for provider in queryset
            for backend in BACKENDS_FOR_TYPE.get(provider.type, ())
        ]
        for (provider, _), result in zip(pairs, probe_providers(pairs), strict=True):
            self._report(request, provider, result)

    def get_urls(self) -> list[URLPattern]:
        info = self.opts.app_label, self.opts.model_name
        test_url = path(
            "<path:object_id>/test/",
            self.admin_site.admin_view(self.test_view),  # login, staff and CSRF checks
            name="{}_{}_test".format(*info),
        )
        # Before the defaults: their "<path:object_id>/" would swallow ".../test/".
        return [test_url, *super().get_urls()]

    def test_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """POST ``<id>/test/`` (``backend`` optional): test, then back to the change page."""
        if request.method != "POST":
            # A GET must not spend tokens (link prefetchers, crawlers, history).
            return HttpResponseNotAllowed(["POST"])
        provider = self.get_object(request, unquote(object_id))
        if provider is None:
            # Django's own "not found" redirect (private, so not in the stubs).
            return self._get_obj_does_not_exist_redirect(request, self.opts, object_id)  # type: ignore[attr-defined]
        if not self.has_change_permission(request, provider):
            raise PermissionDenied
        backend = request.POST.get("backend") or provider.default_backend()
        self._report(request, provider, probe_provider(provider, backend=backend))
        return HttpResponseRedirect(
            reverse(
                f"admin:{self.opts.app_label}_{self.opts.model_name}_change",
                args=[provider.pk],
                current_app=self.admin_site.name,
            )
        )

    def render_change_form(
        self,
        request: HttpRequest,
        context: dict[str, Any],
        add: bool = False,
        change: bool = False,
        form_url: str = "",
        obj: LLMProvider | None = None,
    ) -> HttpResponse:
        # One Test button per backend that can drive the saved type.
        context["test_backends"] = BACKENDS_FOR_TYPE.get(obj.type, ()) if obj else ()
        return super().render_change_form(request, context, add, change, form_url, obj)

    def _report(
        self, request: HttpRequest, provider: LLMProvider, result: ProviderTestResult
    ) -> None:
        where = f"{provider.name} via {result.backend}"
        if result.ok:
            self.message_user(request, f"{where}: OK, {result.message}", messages.SUCCESS)
        else:
            self.message_user(
                request,
                f"{where}: {result.code} after {result.duration_ms} ms: {result.message}",
                messages.ERROR,
            )
