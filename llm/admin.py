from __future__ import annotations

from django.contrib import admin

from llm.models import LLMProvider


@admin.register(LLMProvider)
class LLMProviderAdmin(admin.ModelAdmin):
    list_display = ("name", "type", "model", "api_key_env", "key_set", "enabled", "is_default")
    list_filter = ("type", "enabled")
    search_fields = ("name", "model")

    @admin.display(boolean=True, description="key variable set")
    def key_set(self, provider: LLMProvider) -> bool:
        return provider.key_is_set
