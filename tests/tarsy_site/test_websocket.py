"""Who may open TARSy's WebSockets: the site's own pages (scheme, host and port), the
configured origins, and only while their login holds. Driven through the real ASGI
application: origin check, session cookie, auth middleware, consumer."""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.sessions.models import Session
from django.test import Client

from sessions.models import AlertSession
from tarsy_site.asgi import application

pytestmark = pytest.mark.django_db(transaction=True)

SITE = "127.0.0.1:8000"


def login_cookie(user) -> str:
    client = Client()
    client.force_login(user)
    return client.cookies["sessionid"].value


async def open_socket(
    cookie: str, *, origin: str | None, host: str = SITE, path: str = "/ws/sessions/"
):
    headers = [(b"host", host.encode()), (b"cookie", f"sessionid={cookie}".encode())]
    if origin is not None:
        headers.append((b"origin", origin.encode()))
    communicator = WebsocketCommunicator(application, path, headers=headers)
    connected, code = await communicator.connect(timeout=3)
    return communicator, connected, code


@pytest.mark.parametrize(
    ("origin", "allowed"),
    [
        ("http://127.0.0.1:8000", True),
        ("http://127.0.0.1:9999", False),  # the finding: another port of the same host
        ("https://127.0.0.1:8000", False),
        ("http://localhost:8000", False),
        ("http://evil.example", False),
        ("null", False),
        ("not a url", False),
        (None, True),  # a program, not a page; the login is still required
    ],
)
async def test_only_the_sites_own_origin_may_connect(user, origin, allowed):
    cookie = await sync_to_async(login_cookie)(user)
    communicator, connected, _ = await open_socket(cookie, origin=origin)
    assert connected is allowed
    await communicator.disconnect()


async def test_a_host_that_is_not_served_is_refused(user):
    cookie = await sync_to_async(login_cookie)(user)
    _, connected, _ = await open_socket(
        cookie, origin="http://rebound.example:8000", host="rebound.example:8000"
    )
    assert not connected


async def test_configured_origins_may_connect(user, settings):
    settings.ALLOWED_WS_ORIGINS = ["http://127.0.0.1:3000"]
    settings.CSRF_TRUSTED_ORIGINS = ["https://*.example.com"]
    cookie = await sync_to_async(login_cookie)(user)
    for origin, allowed in [
        ("http://127.0.0.1:3000", True),
        ("https://tarsy.example.com", True),  # a TLS proxy in front of daphne
        ("http://tarsy.example.com", False),
        ("http://127.0.0.1:3001", False),
    ]:
        communicator, connected, _ = await open_socket(cookie, origin=origin)
        assert connected is allowed, origin
        await communicator.disconnect()


async def test_a_proxy_that_says_https_makes_the_https_origin_the_sites_own(user, settings):
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    cookie = await sync_to_async(login_cookie)(user)
    headers = [
        (b"host", b"127.0.0.1:8000"),
        (b"cookie", f"sessionid={cookie}".encode()),
        (b"origin", b"https://127.0.0.1:8000"),
        (b"x-forwarded-proto", b"https"),
    ]
    communicator = WebsocketCommunicator(application, "/ws/sessions/", headers=headers)
    connected, _ = await communicator.connect(timeout=3)
    assert connected
    await communicator.disconnect()


async def _assert_closes_when(user, settings, take_access_away) -> None:
    settings.TARSY_WS_ACCESS_CHECK_INTERVAL = 0.1
    session = await AlertSession.objects.acreate(
        alert_type="kubernetes", alert_data="d", chain_id="kubernetes-investigation"
    )
    cookie = await sync_to_async(login_cookie)(user)
    communicator, connected, _ = await open_socket(
        cookie, origin=f"http://{SITE}", path=f"/ws/sessions/{session.id}/"
    )
    assert connected
    assert await communicator.receive_nothing(timeout=0.4)  # still allowed: stays open
    await sync_to_async(take_access_away)(user)
    closed = await communicator.receive_output(timeout=2)
    assert closed == {"type": "websocket.close", "code": 4401}


async def test_a_socket_closes_when_its_user_is_deactivated(user, settings):
    def deactivate(user):
        user.is_active = False
        user.save()

    await _assert_closes_when(user, settings, deactivate)


async def test_a_socket_closes_when_its_user_is_logged_out_everywhere(user, settings):
    await _assert_closes_when(user, settings, lambda user: Session.objects.all().delete())


async def test_a_socket_closes_when_its_users_password_changes(user, settings):
    def change_password(user):
        user.set_password("a-new-password-1")
        user.save()

    await _assert_closes_when(user, settings, change_password)
