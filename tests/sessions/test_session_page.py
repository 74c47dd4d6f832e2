"""The session page: Markdown (sanitised), alert data formatting, tool results loaded on
demand, re-submit, and the kept HTML of finished items."""

from __future__ import annotations

import re

import pytest
from django.test import Client

from sessions import services
from sessions.models import TimelineEvent, TimelineEventType
from sessions.selectors import INLINE_RESULT_CHARS
from tests.conftest import running_session
from web.markdown import render
from web.templatetags.tarsy import alert_format

pytestmark = pytest.mark.django_db
ACTIVE_LINK = re.compile(r"<a\s[^>]*href=\"\s*javascript", re.IGNORECASE)

HOSTILE = (
    "<script>alert(1)</script> <img src=x onerror=alert(1)> "
    "[click](javascript:alert(1)) [ok](https://example.com) "
    '<a href="javascript:alert(2)">raw</a> ![img](javascript:alert(3))'
)


@pytest.fixture
def client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_markdown_keeps_structure_and_drops_everything_active():
    html = str(
        render("## Cause\n\n**bold** and `code`\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n" + HOSTILE)
    )
    assert "<h2>Cause</h2>" in html
    assert "<strong>bold</strong>" in html
    assert "<code>code</code>" in html
    assert "<td>1</td>" in html
    assert "<script" not in html
    assert "<img" not in html
    assert not ACTIVE_LINK.search(html)  # "javascript:" is left only as text
    assert 'href="https://example.com"' in html
    assert 'rel="noopener noreferrer nofollow"' in html


@pytest.mark.parametrize(
    ("data", "shown"),
    [
        ('{"b": 1, "a": [1, 2]}', "json"),
        ("alert: X\nnamespace: payments", "yaml"),
        ("just a line of text", "text"),
        ("{not json", "text"),
        ("[" * 100 + "]" * 100, "json"),
        ("[" * 500 + "]" * 500, "text"),  # deeper than a page shows indented
        ("[" * 100000, "text"),
    ],
)
def test_alert_data_is_shown_as_what_it_parses_as(data, shown):
    assert alert_format(data)["format"] == shown


def _items(session, lease, result: str):
    services.timeline_event_add(
        lease=lease, event_type=TimelineEventType.LLM_RESPONSE, content="**Pods** look " + HOSTILE
    )
    return services.timeline_event_add(
        lease=lease,
        event_type=TimelineEventType.LLM_TOOL_CALL,
        content=result,
        metadata={"tool_name": "kubernetes.get_pods", "arguments": {"namespace": "payments"}},
    )


def test_llm_text_is_markdown_on_the_page_and_nothing_hostile_survives(client):
    session, lease = running_session(alert_data="note: " + HOSTILE)
    _items(session, lease, "short result")
    page = client.get(f"/sessions/{session.id}/").content.decode()
    assert "<strong>Pods</strong>" in page
    assert "<script>alert(1)</script>" not in page
    assert "<img src=x" not in page
    assert not ACTIVE_LINK.search(page)
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page  # the alert data, as text


def test_a_long_tool_result_is_left_out_of_the_page_and_loads_on_demand(client):
    session, lease = running_session()
    long_result = "line of pod output\n" * 1000  # 19,000 characters
    call = _items(session, lease, long_result)
    short = _items(session, lease, "tiny result")
    page = client.get(f"/sessions/{session.id}/").content.decode()
    assert "line of pod output" not in page
    assert f'hx-get="/items/{call.id}/body/"' in page
    assert "tiny result" in page  # short results stay inline
    # Arguments show at once and fold away.
    assert '<details class="arguments" open><summary>Arguments</summary>' in page
    assert f"/items/{short.id}/body/" not in page
    assert len(long_result) > INLINE_RESULT_CHARS

    preview = client.get(f"/items/{call.id}/body/").content.decode()
    assert preview.count("line of pod output") == 4000 // len("line of pod output\n")
    assert "Show all (" in preview
    whole = client.get(f"/items/{call.id}/body/?all=1").content.decode()
    assert whole.count("line of pod output") == 1000
    assert "Show all" not in whole
    assert client.get("/items/999999/body/").status_code == 404


def test_item_bodies_need_a_login(client):
    session, lease = running_session()
    call = _items(session, lease, "x" * 5000)
    assert Client().get(f"/items/{call.id}/body/").status_code == 302


def test_a_kept_item_is_rendered_again_when_its_row_changes(client):
    session, lease = running_session()
    item = services.timeline_event_add(
        lease=lease, event_type=TimelineEventType.LLM_RESPONSE, content="first words"
    )

    def timeline() -> str:
        page = client.get(f"/sessions/{session.id}/").content.decode()
        return page[page.index('<section id="timeline"') :]

    first = timeline()
    assert "first words" in first
    assert first == timeline()
    TimelineEvent.objects.filter(id=item.id).update(content="other words")
    assert "other words" in timeline()


def test_resubmit_prefills_the_form_with_the_sessions_alert(client):
    session, _ = running_session(
        alert_type="kubernetes",
        alert_data="namespace: payments\n<b>x</b>",
        runbook="check the pods",
        mcp_selection={"servers": [{"name": "kubernetes", "tools": ["get_pods"]}]},
    )
    page = client.get(f"/sessions/new/?from={session.id}").content.decode()
    assert "namespace: payments\n&lt;b&gt;x&lt;/b&gt;</textarea>" in page
    assert "check the pods</textarea>" in page
    assert re.search(r'name="mcp_servers" value="kubernetes"[^>]*checked', page)
    assert 'id="resubmit-note"' in page


@pytest.mark.parametrize("bad", ["nope", "00000000-0000-0000-0000-000000000000", "x" * 500])
def test_resubmit_of_an_unknown_session_says_so(client, bad):
    response = client.get(f"/sessions/new/?from={bad}")
    assert response.status_code == 200
    assert "The session to re-submit was not found" in response.content.decode()


def test_the_header_shows_chain_stage_progress_and_a_resubmit_link(client):
    session, lease = running_session(chain_id="kubernetes-investigation")
    services.stage_start(lease=lease, name="Investigation", index=0)
    page = client.get(f"/sessions/{session.id}/").content.decode()
    assert "kubernetes-investigation" in page
    assert "stage 1 of" in page
    assert f'href="/sessions/new/?from={session.id}"' in page
    assert 'class="elapsed"' in page  # running: the elapsed time ticks
