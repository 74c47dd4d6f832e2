"""The memory page (``/memories/``): the lessons TARSy has learned, searched and filtered,
each with the sessions that made, reinforced and were given it and the audit of who did
what. Staff edit, deprecate and delete; everyone else reads."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django import forms
from django.contrib import messages
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseForbidden
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from agents.memory import memory_embedder
from config.loader import get_config
from llm.embeddings import EmbeddingFailed
from sessions import services
from sessions.models import InvestigationMemory, MemoryCategory, MemoryValence
from sessions.selectors import memory_page
from sessions.services.memory import MAX_LESSON_CHARS, MemoryRejected
from web.views import HtmxHttpRequest

PAGE_SIZE = 25
MAX_SEARCH = 200
STAFF_ONLY = "Only staff may change or delete memories."
DEPRECATED_CHOICES = [
    (memory_page.ACTIVE, "Active only"),
    (memory_page.DEPRECATED, "Deprecated only"),
    (memory_page.ALL, "All"),
]


class MemoryFilterForm(forms.Form):
    """The list's filters, read from the query string."""

    q = forms.CharField(
        label="Search",
        required=False,
        max_length=MAX_SEARCH,
        error_messages={"max_length": f"The search is over {MAX_SEARCH} characters; ignored."},
    )
    # Any text: a link to an alert type nothing was learned from shows no memory.
    alert_type = forms.CharField(
        required=False,
        max_length=200,
        error_messages={"max_length": "The alert type is over 200 characters; ignored."},
    )
    category = forms.ChoiceField(
        required=False,
        choices=[("", "Any"), *MemoryCategory.choices],
        error_messages={
            "invalid_choice": "Unknown category %(value)r: one of "
            + ", ".join(MemoryCategory.values)
            + "; ignored."
        },
    )
    valence = forms.ChoiceField(
        required=False,
        choices=[("", "Any"), *MemoryValence.choices],
        error_messages={
            "invalid_choice": "Unknown valence %(value)r: one of "
            + ", ".join(MemoryValence.values)
            + "; ignored."
        },
    )
    deprecated = forms.ChoiceField(
        required=False,
        choices=DEPRECATED_CHOICES,
        error_messages={
            "invalid_choice": "Unknown deprecated filter %(value)r: active, deprecated or "
            "all; showing active."
        },
    )

    def filters(self) -> dict[str, str]:
        """The valid filters (a wrong one is left out, its error shown)."""
        self.is_valid()
        clean = getattr(self, "cleaned_data", {})
        return {
            "q": (clean.get("q") or "").strip(),
            "alert_type": clean.get("alert_type") or "",
            "category": clean.get("category") or "",
            "valence": clean.get("valence") or "",
            "deprecated": clean.get("deprecated") or memory_page.ACTIVE,
        }


class MemoryEditForm(forms.Form):
    # The service masks it and then holds it to MAX_LESSON_CHARS; this only stops a
    # huge paste before masking.
    content = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 5}),
        max_length=MAX_LESSON_CHARS * 5,
        error_messages={"required": "The content is empty; a memory needs a lesson."},
        help_text=f"Masked like a tool result; at most {MAX_LESSON_CHARS} characters.",
    )
    category = forms.ChoiceField(
        choices=MemoryCategory.choices,
        error_messages={
            "invalid_choice": "Unknown category %(value)r: one of "
            + ", ".join(MemoryCategory.values)
            + "."
        },
    )
    valence = forms.ChoiceField(
        choices=MemoryValence.choices,
        error_messages={
            "invalid_choice": "Unknown valence %(value)r: one of "
            + ", ".join(MemoryValence.values)
            + "."
        },
    )


@require_GET
def memory_list(request: HtmxHttpRequest) -> HttpResponse:
    """Newest first; the filter form swaps the results in place (htmx) or reloads."""
    form = MemoryFilterForm(request.GET)
    filters = form.filters()
    page = Paginator(memory_page.memories(**filters), PAGE_SIZE).get_page(request.GET.get("page"))
    query = {k: v for k, v in filters.items() if v and (k, v) != ("deprecated", "active")}
    context: dict[str, Any] = {
        "form": form,
        "filters": filters,
        "filtered": bool(query),
        "page": page,
        "query": urlencode(query),
        "alert_types": memory_page.memory_alert_types(),
        "categories": MemoryCategory.choices,
        "valences": MemoryValence.choices,
        "deprecated_choices": DEPRECATED_CHOICES,
    }
    if request.htmx and not request.htmx.history_restore_request:
        response = render(request, "memories/_results.html", context)
        response["HX-Push-Url"] = request.path + (f"?{context['query']}" if query else "")
        return response
    return render(request, "memories/list.html", context)


@require_GET
def memory_detail(request: HttpRequest, memory_id) -> HttpResponse:
    history = memory_page.memory_history(memory_id)
    if history is None:
        raise Http404("No such memory.")
    form = None
    if request.user.is_staff and history.memory is not None:
        memory = history.memory
        form = MemoryEditForm(
            initial={
                "content": memory.content,
                "category": memory.category,
                "valence": memory.valence,
            }
        )
    return _detail(request, history, form)


def _detail(
    request: HttpRequest,
    history: memory_page.MemoryHistory,
    form: MemoryEditForm | None,
    status: int = 200,
) -> HttpResponse:
    return render(
        request,
        "memories/detail.html",
        {
            "history": history,
            "memory": history.memory,
            "form": form,
            "events": [(event, _changes(event.details)) for event in history.events],
        },
        status=status,
    )


def _changes(details: dict[str, Any]) -> list[tuple[str, str]]:
    """An event's details as lines: ``field: old → new``, or ``field: value``."""
    lines = []
    for name, value in details.items():
        if isinstance(value, list) and len(value) == 2:
            lines.append((name, f"{_shown(value[0])} → {_shown(value[1])}"))
        else:
            lines.append((name, _shown(value)))
    return lines


def _shown(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.3g}"
    if value in ("", None):
        return "none"
    return str(value)


def _editable(request: HttpRequest, memory_id) -> InvestigationMemory | HttpResponse:
    """The memory a staff member may change, or the answer saying why not."""
    if not request.user.is_staff:
        return HttpResponseForbidden(STAFF_ONLY)
    memory = InvestigationMemory.objects.filter(id=memory_id).defer("embedding").first()
    if memory is None:
        raise Http404("No such memory.")
    return memory


@require_POST
def memory_edit(request: HttpRequest, memory_id) -> HttpResponse:
    memory = _editable(request, memory_id)
    if isinstance(memory, HttpResponse):
        return memory
    form = MemoryEditForm(request.POST)
    status = 400
    if form.is_valid():
        try:
            services.memory_edit(
                memory=memory,
                actor=request.user.get_username(),
                changes=form.cleaned_data,
                embedder=lambda: memory_embedder(get_config()),
            )
        except MemoryRejected as problem:
            form.add_error(None, f"Not saved: {problem}.")
        except EmbeddingFailed as problem:
            form.add_error(None, f"Not saved: the new content cannot be embedded: {problem}.")
            status = 502
        except InvestigationMemory.DoesNotExist:
            raise Http404("No such memory.") from None
        else:
            messages.success(request, "Memory saved.")
            return redirect("sessions:memory", memory_id=memory.id)
    history = memory_page.memory_history(memory.id)
    assert history is not None  # the memory exists
    return _detail(request, history, form, status=status)


@require_POST
def memory_deprecate(request: HttpRequest, memory_id) -> HttpResponse:
    """``deprecated=true`` leaves it out of recall; ``false`` takes that back."""
    memory = _editable(request, memory_id)
    if isinstance(memory, HttpResponse):
        return memory
    value = request.POST.get("deprecated", "")
    if value not in ("true", "false"):
        return HttpResponse(
            f"deprecated must be true or false, not {value[:20]!r}.",
            status=400,
            content_type="text/plain",
        )
    try:
        services.memory_edit(
            memory=memory,
            actor=request.user.get_username(),
            changes={"deprecated": value == "true"},
            embedder=lambda: memory_embedder(get_config()),
        )
    except InvestigationMemory.DoesNotExist:  # deleted meanwhile
        raise Http404("No such memory.") from None
    messages.success(request, "Memory deprecated." if value == "true" else "Memory restored.")
    return redirect("sessions:memory", memory_id=memory.id)


@require_http_methods(["GET", "POST"])
def memory_delete(request: HttpRequest, memory_id) -> HttpResponse:
    """GET: are you sure? POST: deleted (its history stays)."""
    memory = _editable(request, memory_id)
    if isinstance(memory, HttpResponse):
        return memory
    if request.method == "GET":
        return render(request, "memories/delete.html", {"memory": memory})
    services.memory_remove(memory=memory, actor=request.user.get_username())
    messages.success(request, "Memory deleted; its history stays on its page.")
    return redirect("sessions:memories")
