from __future__ import annotations

from django.http import HttpRequest

from config.loader import get_config
from config.providers import default_provider, provider_rows
from llm.models import ProviderType


def demo_provider(request: HttpRequest) -> dict[str, bool]:
    """Whether new investigations would run on the scripted demo provider."""
    if not request.user.is_authenticated:
        return {}
    config = get_config()
    default = default_provider(config.defaults.llm_provider, provider_rows(config))
    demo = default is not None and default.enabled and default.type == ProviderType.SCRIPTED
    return {"demo_provider_default": demo}
