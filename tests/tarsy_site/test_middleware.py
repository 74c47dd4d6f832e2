"""A NUL anywhere in a page's request is refused with a 400 before it reaches a query (on
PostgreSQL it would be a 500); CI runs these on SQLite and on PostgreSQL. The REST API
answers such input in its own error shape (tests/compat/test_rest_compat.py)."""

from __future__ import annotations

import pytest
from django.test import Client

from sessions.models import AlertSession, SessionStatus
from tests.conftest import running_session


@pytest.mark.parametrize(
    "url",
    [
        "/?q=%00",
        "/?status=%00",
        "/?q=a&sort=%00created",
        "/triage/?assignee=%00",
        "/usage/?period=%00",
    ],
)
def test_a_nul_in_the_query_string_is_a_clear_400(browser_client: Client, url: str) -> None:
    response = browser_client.get(url)
    assert response.status_code == 400
    assert "NUL" in response.content.decode()
    assert "query string" in response.content.decode()


def test_a_nul_in_a_cookie_is_a_clear_400(client: Client) -> None:
    client.cookies["sessionid"] = "abc\x00def"
    response = client.get("/")
    assert response.status_code == 400
    assert "cookie 'sessionid'" in response.content.decode()


@pytest.mark.django_db
def test_a_nul_in_a_form_field_is_refused_and_nothing_is_written(user) -> None:
    session, _ = running_session()
    browser = Client()  # the CSRF check is not what is tested here
    browser.force_login(user)
    response = browser.post(f"/sessions/{session.id}/cancel/", {"reason": "stop\x00now"})
    assert response.status_code == 400
    assert "form field 'reason'" in response.content.decode()
    session.refresh_from_db()
    assert session.status == SessionStatus.IN_PROGRESS
    assert session.cancel_reason == ""


@pytest.mark.django_db
def test_requests_without_nul_pass(browser_client: Client) -> None:
    AlertSession.objects.create(alert_type="kubernetes", alert_data="d", chain_id="c")
    assert browser_client.get("/?q=payments").status_code == 200
    assert browser_client.get("/api/v1/sessions?search=payments").status_code == 200
