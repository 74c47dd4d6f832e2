"""Request checks that belong to no view.

**NUL in a request.** PostgreSQL cannot hold NUL in text, and refuses any query that
carries one ("A string literal cannot contain NUL"): a NUL in a search box, a filter, a
form field or a cookie would otherwise reach a query and end in a 500. Every request is
refused up front with a 400 that says why instead. The REST API is left to itself: it
checks its bodies and parameters where it reads them (api/rest/common.py) and
answers in its own JSON error shape, naming the field.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest


def _nul_in(request: HttpRequest) -> str:
    """Where the request holds a NUL character, or ""."""
    if request.path.startswith("/api/"):
        return ""
    if "\x00" in request.path:
        return "the URL path"
    sources: tuple[tuple[str, Mapping[str, Any]], ...] = (
        ("query string", request.GET),
        ("cookie", request.COOKIES),
    )
    if request.content_type in ("application/x-www-form-urlencoded", "multipart/form-data"):
        sources += (("form field", request.POST),)
    for what, values in sources:
        items = values.lists() if hasattr(values, "lists") else values.items()
        for key, value in items:
            texts = value if isinstance(value, list) else [value]
            if "\x00" in key or any("\x00" in text for text in texts):
                return f"{what} {key.replace(chr(0), '')!r}"
    return ""


def _refusal(where: str) -> HttpResponse:
    return HttpResponseBadRequest(
        f"The request's {where} contains a NUL character, which TARSy cannot store or "
        "search for. Send it without one.",
        content_type="text/plain; charset=utf-8",
    )


class RejectNulMiddleware:
    sync_capable = True
    async_capable = True

    def __init__(self, get_response) -> None:
        self.get_response = get_response
        if iscoroutinefunction(get_response):
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest):
        if iscoroutinefunction(self):
            return self._acall(request)
        if where := _nul_in(request):
            return _refusal(where)
        return self.get_response(request)

    async def _acall(self, request: HttpRequest) -> HttpResponse:
        if where := _nul_in(request):
            return _refusal(where)
        return await self.get_response(request)
