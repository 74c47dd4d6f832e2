"""The usage page: LLM tokens and estimated cost over a window chosen in the URL."""

from __future__ import annotations

from typing import Any

from django import forms
from django.http import HttpRequest, HttpResponse, QueryDict
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET

from sessions.selectors import usage

DATE_HELP = "YYYY-MM-DD"


class UsageForm(forms.Form):
    """The window and grouping, read from the query string; ``cleaned_data["window"]``
    is the ``UsageWindow`` they describe."""

    range = forms.ChoiceField(
        choices=[*usage.PRESETS.items(), ("custom", "Custom dates")],
        error_messages={
            "invalid_choice": "Unknown range %(value)r: choose 24h, 7d, 30d, 90d or custom."
        },
    )
    group = forms.ChoiceField(
        label="Group by",
        choices=usage.GROUPINGS.items(),
        error_messages={
            "invalid_choice": "Unknown grouping %(value)r: choose day, provider, model or "
            "alert_type."
        },
    )

    def __init__(self, query: QueryDict) -> None:
        data = query.dict()
        # A link with dates alone (?from=…&to=…) means those dates.
        has_dates = bool(data.get("from") or data.get("to"))
        data.setdefault("range", "custom" if has_dates else usage.DEFAULT_PRESET)
        data.setdefault("group", usage.DEFAULT_GROUPING)
        super().__init__(data)
        # "from" is a Python keyword, so these two cannot be declared as attributes.
        for name in ("from", "to"):
            self.fields[name] = forms.DateField(
                required=False,
                input_formats=["%Y-%m-%d"],
                widget=forms.DateInput(format="%Y-%m-%d", attrs={"type": "date"}),
                error_messages={"invalid": f"Enter the '{name}' date as {DATE_HELP}."},
            )

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        assert cleaned is not None  # Form.clean returns cleaned_data
        preset = cleaned.get("range")
        if preset is None or self.has_error("from") or self.has_error("to"):
            return cleaned
        try:
            if preset == "custom":
                first, last = cleaned.get("from"), cleaned.get("to")
                if first is None or last is None:
                    raise usage.WindowError(
                        f"Custom dates need both 'from' and 'to' ({DATE_HELP})."
                    )
                cleaned["window"] = usage.dates_window(first, last)
            else:
                cleaned["window"] = usage.preset_window(preset, now=timezone.now())
        except usage.WindowError as exc:
            raise forms.ValidationError(str(exc)) from None
        return cleaned


@require_GET
def usage_page(request: HttpRequest) -> HttpResponse:
    form = UsageForm(request.GET)
    context = {
        "form": form,
        "max_days": usage.MAX_WINDOW_DAYS,
        "time_zone": timezone.get_default_timezone_name(),
    }
    if not form.is_valid():
        return render(request, "sessions/usage.html", context, status=400)
    grouping = form.cleaned_data["group"]
    report = usage.usage_report(window=form.cleaned_data["window"], grouping=grouping)
    title = f"Total tokens per {usage.GROUPINGS[grouping].lower()}"
    return render(
        request,
        "sessions/usage.html",
        {
            **context,
            "window": form.cleaned_data["window"],
            "grouping_label": usage.GROUPINGS[grouping],
            "report": report,
            "chart": None if report.is_empty else usage.bar_chart_svg(report.rows, title=title),
        },
    )
