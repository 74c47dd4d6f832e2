from __future__ import annotations

from django.http import HttpRequest

from llm.models import LLMProvider, ProviderType


def demo_provider(request: HttpRequest) -> dict[str, bool]:
    """Whether new investigations would run on the scripted demo provider."""
    if not request.user.is_authenticated:
        return {}
    default = LLMProvider.objects.filter(is_default=True, enabled=True).first()
    return {"demo_provider_default": default is not None and default.type == ProviderType.SCRIPTED}
