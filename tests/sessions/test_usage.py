"""The usage page: tokens and estimated cost of LLM calls over a window, by day,
provider, model or alert type, as a server-rendered SVG chart and a table."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from sessions.models import AgentExecution, AlertSession, LLMInteraction, Stage
from sessions.selectors import usage

pytestmark = pytest.mark.django_db

HOSTILE = "<script>alert(1)</script>"


def execution_for(alert_type: str) -> AgentExecution:
    session = AlertSession.objects.filter(alert_type=alert_type).first()
    if session is None:
        session = AlertSession.objects.create(alert_type=alert_type, alert_data="d", chain_id="c")
    stage, _ = Stage.objects.get_or_create(session=session, index=0, defaults={"name": "s"})
    execution = stage.executions.first()
    return execution or AgentExecution.objects.create(
        session=session, stage=stage, agent_name="KubernetesAgent"
    )


def call(
    at: datetime,
    *,
    provider: str = "gemini",
    model: str = "gemini-2.5-pro",
    alert_type: str = "kubernetes",
    input_tokens: int = 100,
    output_tokens: int = 20,
    thinking_tokens: int = 0,
    cost: str | None = None,
) -> LLMInteraction:
    execution = execution_for(alert_type)
    interaction = LLMInteraction.objects.create(
        session_id=execution.session_id,
        execution=execution,
        provider=provider,
        backend="google-native",
        model_name=model,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        thinking_tokens=thinking_tokens,
        total_tokens=input_tokens + output_tokens,
        estimated_cost_usd=Decimal(cost) if cost is not None else None,
    )
    # created_at is auto_now_add: only an UPDATE can put a call in the past.
    LLMInteraction.objects.filter(pk=interaction.pk).update(created_at=at)
    return interaction


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def report(first: str, last: str, grouping: str) -> usage.UsageReport:
    window = usage.dates_window(date.fromisoformat(first), date.fromisoformat(last))
    return usage.usage_report(window=window, grouping=grouping)


def table(page: str) -> dict[str, list[str]]:
    """The table's body rows: group label → the other cells' text."""
    rows = {}
    for label, cells in re.findall(r'<tr data-group="([^"]*)"[^>]*>(.*?)</tr>', page, re.S):
        texts = [
            re.sub(r"<[^>]+>", "", cell).strip()
            for cell in re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", cells, re.S)
        ]
        rows[label] = texts[1:]
    return rows


def test_days_are_grouped_with_the_days_without_calls_included():
    call(utc("2026-03-02T08:00"), input_tokens=100, output_tokens=20, thinking_tokens=5)
    call(utc("2026-03-02T22:00"), input_tokens=50, output_tokens=10)
    call(utc("2026-03-04T12:00"), input_tokens=7, output_tokens=3)
    result = report("2026-03-01", "2026-03-05", "day")
    assert [row.label for row in result.rows] == [
        "2026-03-01",
        "2026-03-02",
        "2026-03-03",
        "2026-03-04",
        "2026-03-05",
    ]
    assert [row.total_tokens for row in result.rows] == [0, 180, 0, 10, 0]
    second = result.rows[1]
    assert (second.calls, second.input_tokens, second.output_tokens, second.thinking_tokens) == (
        2,
        150,
        30,
        5,
    )
    assert (result.total.calls, result.total.total_tokens) == (3, 190)


def test_days_are_those_of_the_servers_time_zone(settings):
    settings.TIME_ZONE = "America/New_York"
    call(utc("2026-03-10T03:00"))  # 23:00 on the 9th in New York
    call(utc("2026-03-10T05:00"))  # 01:00 on the 10th
    result = report("2026-03-09", "2026-03-09", "day")
    assert [(row.label, row.calls) for row in result.rows] == [("2026-03-09", 1)]


def test_providers_are_grouped_biggest_first():
    day = utc("2026-03-02T08:00")
    call(day, provider="gemini", input_tokens=10, output_tokens=10)
    call(day, provider="anthropic", input_tokens=300, output_tokens=30)
    call(day, provider="gemini", input_tokens=40, output_tokens=5)
    rows = report("2026-03-02", "2026-03-02", "provider").rows
    assert [(row.label, row.calls, row.input_tokens, row.total_tokens) for row in rows] == [
        ("anthropic", 1, 300, 330),
        ("gemini", 2, 50, 65),
    ]


def test_models_are_grouped_and_a_call_without_a_model_name_has_its_own_group():
    day = utc("2026-03-02T08:00")
    call(day, model="gemini-2.5-pro", output_tokens=1)
    call(day, model="gemini-2.5-pro", output_tokens=2)
    call(day, model="", input_tokens=1, output_tokens=1)
    rows = report("2026-03-02", "2026-03-02", "model").rows
    assert [(row.label, row.calls, row.output_tokens) for row in rows] == [
        ("gemini-2.5-pro", 2, 3),
        (usage.UNNAMED_GROUP, 1, 1),
    ]


def test_alert_types_come_from_the_calls_sessions():
    day = utc("2026-03-02T08:00")
    call(day, alert_type="PodCrashLooping", input_tokens=500)
    call(day, alert_type="PodCrashLooping", input_tokens=500)
    call(day, alert_type="DiskFull", input_tokens=10)
    rows = report("2026-03-02", "2026-03-02", "alert_type").rows
    assert [(row.label, row.calls, row.input_tokens) for row in rows] == [
        ("PodCrashLooping", 2, 1000),
        ("DiskFull", 1, 10),
    ]


def test_a_custom_range_counts_whole_days_and_nothing_outside_them(browser_client):
    call(utc("2026-02-28T23:59:59"), provider="before")
    call(utc("2026-03-01T00:00"), provider="inside")
    call(utc("2026-03-03T23:59:59"), provider="inside")
    call(utc("2026-03-04T00:00"), provider="after")
    response = browser_client.get("/usage/?from=2026-03-01&to=2026-03-03&group=provider")
    assert response.status_code == 200
    rows = table(response.content.decode())
    assert list(rows) == ["inside"]
    assert rows["inside"][0] == "2"


@pytest.mark.parametrize(
    ("preset", "inside", "outside", "days"),
    [
        ("24h", timedelta(hours=23), timedelta(hours=25), None),
        ("7d", timedelta(days=6), timedelta(days=7, hours=1), 7),
        ("30d", timedelta(days=29), timedelta(days=30, hours=1), 30),
        ("90d", timedelta(days=89), timedelta(days=90, hours=1), 90),
    ],
)
def test_presets_end_now_and_leave_older_calls_out(browser_client, preset, inside, outside, days):
    now = timezone.now()
    call(now - inside, provider="inside")
    call(now - outside, provider="outside")
    page = browser_client.get(f"/usage/?range={preset}&group=provider").content.decode()
    assert list(table(page)) == ["inside"]
    if days is not None:
        by_day = browser_client.get(f"/usage/?range={preset}").content.decode()
        assert by_day.count('<rect class="bar"') == days


def test_the_default_is_the_last_seven_days_by_day(browser_client):
    call(timezone.now())
    page = browser_client.get("/usage/").content.decode()
    today = timezone.localdate().isoformat()
    assert page.count('<rect class="bar"') == 7  # days without calls have a bar of 0
    assert f"<title>{today}: 120 tokens in 1 call</title>" in page
    assert table(page) == {today: ["1", "100", "20", "0", "120", "—"]}  # but no row
    assert '<option value="7d" selected>' in page
    assert '<option value="day" selected>' in page


@pytest.mark.parametrize(
    ("query", "message"),
    [
        (
            "from=2026-03-05&to=2026-03-01",
            "&#x27;to&#x27; (2026-03-01) is before &#x27;from&#x27; (2026-03-05): swap the dates.",
        ),
        ("from=yesterday&to=2026-03-01", "Enter the &#x27;from&#x27; date as YYYY-MM-DD."),
        ("from=2026-03-01&to=2026-13-01", "Enter the &#x27;to&#x27; date as YYYY-MM-DD."),
        ("from=2025-01-01&to=2026-03-01", "The window is 425 days long; the limit is 366."),
        (
            "range=custom&from=2026-03-01",
            "Custom dates need both &#x27;from&#x27; and &#x27;to&#x27;",
        ),
        ("range=forever", "Unknown range &#x27;forever&#x27;"),
        ("group=colour", "Unknown grouping &#x27;colour&#x27;"),
        ("from=9999-12-31&to=9999-12-31", "9999-12-31 is too far in the future"),
    ],
)
def test_invalid_input_is_explained_with_a_400(browser_client, query, message):
    call(utc("2026-03-01T08:00"))
    response = browser_client.get(f"/usage/?{query}")
    assert response.status_code == 400
    page = response.content.decode()
    assert message in page
    assert 'id="usage-errors"' in page
    assert 'id="usage-table"' not in page
    assert "<svg" not in page


def test_a_group_without_any_rate_shows_no_cost(browser_client):
    day = utc("2026-03-02T08:00")
    call(day, provider="local", cost=None)
    call(day, provider="local", cost=None)
    rows = table(
        browser_client.get("/usage/?from=2026-03-02&to=2026-03-02&group=provider").content.decode()
    )
    assert rows["local"][-1] == "—"


def test_a_group_with_some_rates_shows_the_known_sum_and_how_many_calls_lack_one(
    browser_client,
):
    day = utc("2026-03-02T08:00")
    call(day, provider="gemini", cost="0.0125")
    call(day, provider="gemini", cost="0.0100")
    call(day, provider="gemini", cost=None)
    call(day, provider="anthropic", cost="0.5000")
    call(day, provider="local", cost=None)
    page = browser_client.get(
        "/usage/?from=2026-03-02&to=2026-03-02&group=provider"
    ).content.decode()
    rows = table(page)
    assert rows["gemini"][-1] == "$0.0225 (1 call without a rate)"
    assert rows["anthropic"][-1] == "$0.5000"
    assert rows["local"][-1] == "—"
    total = re.search(r'<tr id="usage-total">(.*?)</tr>', page, re.S).group(1)
    assert "$0.5225" in total
    assert "(2 calls without a rate)" in total


def test_hostile_group_names_are_escaped_in_the_chart_and_the_table(browser_client):
    call(utc("2026-03-02T08:00"), provider=HOSTILE)
    page = browser_client.get(
        "/usage/?from=2026-03-02&to=2026-03-02&group=provider"
    ).content.decode()
    assert HOSTILE not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    chart = re.search(r"<svg.*?</svg>", page, re.S).group(0)
    assert "&lt;script&gt;" in chart


def test_the_chart_is_well_formed_svg_whatever_the_names():
    rows = [
        usage.UsageRow(label=HOSTILE, calls=1, total_tokens=10),
        usage.UsageRow(label='" onload="x', calls=2, total_tokens=5),
    ]
    svg = ET.fromstring(usage.bar_chart_svg(rows, title="Tokens & <more>"))
    assert svg.get("role") == "img"
    assert svg.get("aria-label") == "Tokens & <more>"
    assert svg.find("title").text == "Tokens & <more>"
    assert [g.find("title").text for g in svg.iter("g")] == [
        f"{HOSTILE}: 10 tokens in 1 call",
        '" onload="x: 5 tokens in 2 calls',
    ]
    assert all(element.get("onload") is None for element in svg.iter())


def test_bars_scale_to_the_biggest_and_take_their_colour_from_css():
    rows = [
        usage.UsageRow(label="a", calls=1, total_tokens=1000),
        usage.UsageRow(label="b", calls=1, total_tokens=500),
        usage.UsageRow(label="c", calls=0, total_tokens=0),
    ]
    svg = ET.fromstring(usage.bar_chart_svg(rows, title="t"))
    heights = [float(rect.get("height")) for rect in svg.iter("rect")]
    assert heights == [usage.CHART_PLOT_HEIGHT, usage.CHART_PLOT_HEIGHT / 2, 0]
    assert [text.text for text in svg.iter("text") if text.get("class") == "label"] == [
        "a",
        "b",
        "c",
    ]
    assert [text.text for text in svg.iter("text") if text.get("class") == "value"] == [
        "1k",
        "500",
    ]
    assert all(element.get("fill") is None for element in svg.iter())
    assert all(element.get("style") is None for element in svg.iter())


def test_a_long_window_labels_every_few_days_not_every_day():
    rows = [usage.UsageRow(label=f"day {n}", calls=1, total_tokens=n) for n in range(90)]
    svg = ET.fromstring(usage.bar_chart_svg(rows, title="t"))
    labels = [text.text for text in svg.iter("text") if text.get("class") == "label"]
    assert len(svg.findall(".//rect")) == 90
    assert 1 < len(labels) <= usage.MAX_AXIS_LABELS
    assert labels[0] == "day 0"


def test_an_empty_window_says_so_instead_of_a_chart(browser_client):
    call(utc("2026-03-02T08:00"))
    page = browser_client.get("/usage/?from=2026-04-01&to=2026-04-30").content.decode()
    assert "No LLM calls in this window" in page
    assert "<svg" not in page
    assert 'id="usage-table"' not in page


def test_the_page_has_a_chart_with_a_title_per_grouping(browser_client):
    call(utc("2026-03-02T08:00"))
    page = browser_client.get("/usage/?from=2026-03-01&to=2026-03-03&group=model").content.decode()
    assert 'aria-label="Total tokens per model"' in page
    assert "<title>gemini-2.5-pro: 120 tokens in 1 call</title>" in page


@pytest.mark.parametrize("grouping", list(usage.GROUPINGS))
def test_the_number_of_queries_does_not_grow_with_the_calls(browser_client, grouping):
    url = f"/usage/?from=2026-03-01&to=2026-03-31&group={grouping}"
    call(utc("2026-03-02T08:00"))
    with CaptureQueriesContext(connection) as few:
        assert browser_client.get(url).status_code == 200
    for n in range(40):
        call(
            utc("2026-03-01T08:00") + timedelta(days=n % 30),
            provider=f"p{n % 4}",
            model=f"m{n % 5}",
            alert_type=f"type{n % 3}",
        )
    with CaptureQueriesContext(connection) as many:
        assert browser_client.get(url).status_code == 200
    assert len(many) == len(few)


def test_the_calls_time_index_exists():
    indexes = connection.introspection.get_constraints(
        connection.cursor(), LLMInteraction._meta.db_table
    )
    assert any(index["index"] and index["columns"] == ["created_at"] for index in indexes.values())


def test_the_page_needs_a_login_and_is_in_the_navigation(client, browser_client):
    response = client.get("/usage/")
    assert response.status_code == 302
    assert response.url.startswith("/login/")
    assert 'href="/usage/"' in browser_client.get("/system/").content.decode()
