from __future__ import annotations

import pytest
from django.test import Client

from sessions import services
from sessions.models import AlertSession, TimelineEventStatus, TimelineEventType
from tests.conftest import running_session

pytestmark = pytest.mark.django_db


def test_pages_require_login(client):
    response = client.get("/")
    assert response.status_code == 302
    assert response.url.startswith("/login/")
    assert client.get("/sessions/new/").status_code == 302


def test_the_login_page_and_health_are_public(client):
    assert client.get("/login/").status_code == 200
    assert client.get("/health").status_code == 200


def test_the_form_creates_a_session_and_redirects_to_its_page(user):
    client = Client()
    client.force_login(user)
    response = client.post(
        "/sessions/new/", {"alert_type": "PodCrashLooping", "data": "namespace: payments\r\npod: x"}
    )
    session = AlertSession.objects.get()
    assert session.alert_data == "namespace: payments\npod: x"  # the browser's CRLF normalized
    assert response.status_code == 302
    assert response.url == f"/sessions/{session.id}/"
    assert session.alert_type == "PodCrashLooping"
    assert session.author == "alice"


def test_the_form_enforces_csrf(browser_client):
    response = browser_client.post("/sessions/new/", {"alert_type": "kubernetes", "data": "x"})
    assert response.status_code == 403


def test_the_form_explains_an_oversized_alert_and_creates_nothing(user):
    client = Client()
    client.force_login(user)
    response = client.post(
        "/sessions/new/", {"alert_type": "kubernetes", "data": "x" * (1024 * 1024 + 1)}
    )
    assert response.status_code == 400
    assert "the limit is 1048576 bytes" in response.content.decode()
    assert AlertSession.objects.count() == 0


def test_the_form_keeps_what_was_typed_when_queueing_fails(user, monkeypatch):
    from django.db import OperationalError
    from django_q.brokers.orm import ORM

    def refuse(self, task):
        raise OperationalError("disk I/O error")

    monkeypatch.setattr(ORM, "enqueue", refuse)
    client = Client()
    client.force_login(user)
    response = client.post(
        "/sessions/new/", {"alert_type": "kubernetes", "data": "pod payments-api is down"}
    )
    assert response.status_code == 503
    page = response.content.decode()
    assert "could not be queued" in page
    assert "nothing was stored" in page
    assert "pod payments-api is down" in page  # the form is shown again, filled in
    assert AlertSession.objects.count() == 0


def test_the_form_rejects_an_unknown_alert_type(user):
    client = Client()
    client.force_login(user)
    response = client.post("/sessions/new/", {"alert_type": "nope", "data": "x"})
    assert response.status_code == 400
    assert "Select a valid choice" in response.content.decode()


def test_the_session_page_shows_streamed_text_up_to_its_cursor(user):
    session, lease = running_session()
    item = services.timeline_event_add(
        lease=lease,
        event_type=TimelineEventType.LLM_THINKING,
        status=TimelineEventStatus.STREAMING,
    )
    services.timeline_event_chunk(lease=lease, event=item, delta="checking the ")
    services.timeline_event_chunk(lease=lease, event=item, delta="pods")
    client = Client()
    client.force_login(user)
    page = client.get(f"/sessions/{session.id}/").content.decode()
    assert f'<span id="stream-{item.id}">checking the pods</span>' in page
    cursor = session.events.latest("id").id
    assert f'data-last-event-id="{cursor}"' in page
    assert f'ws-connect="/ws/sessions/{session.id}/"' in page


def test_the_session_list_shows_queued_sessions_in_their_panel(user):
    session = services.session_create(
        alert_type="kubernetes", alert_data="d", chain_id="kubernetes-investigation", author="a"
    )
    client = Client()
    client.force_login(user)
    page = client.get("/").content.decode()
    assert f'id="queued-{session.id}"' in page
    assert f'id="session-row-{session.id}"' not in page  # the history has ended ones
    assert 'ws-connect="/ws/sessions/"' in page


def test_the_demo_banner_shows_when_the_default_provider_is_scripted(user, demo_provider):
    client = Client()
    client.force_login(user)
    assert "demo LLM provider" in client.get("/").content.decode()
    demo_provider.is_default = False
    demo_provider.save()
    assert "demo LLM provider" not in client.get("/").content.decode()


def test_the_form_offers_an_example_alert(user):
    client = Client()
    client.force_login(user)
    page = client.get("/sessions/new/").content.decode()
    assert "namespace: payments" in page
    assert "PodCrashLooping" in page
