from __future__ import annotations

from django.apps import AppConfig


class WebConfig(AppConfig):
    """The HTMX pages: views, page WebSockets, fragments and template tags."""

    name = "web"
