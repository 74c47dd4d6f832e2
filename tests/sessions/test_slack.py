"""Slack for real: sessions run on the scripted provider, the Slack tasks they queue are
taken from the ORM broker and run, and ``slack-sdk`` talks to a local stand-in for the
Slack Web API (``slack_server.py``)."""

from __future__ import annotations

import json
import time

import pytest
from django_q.models import OrmQ
from slack_sdk.http_retry.builtin_interval_calculators import FixedValueRetryIntervalCalculator

from sessions import services
from sessions.models import AlertSession, SessionStatus, SlackMessage
from tests.secrets_corpus import CANARY
from worker import slack
from worker.tasks import run_session, slack_notify

pytestmark = pytest.mark.django_db(transaction=True)

TOKEN = "xoxb-1234567890-Zq7xSlackTestToken"
CHANNEL = "C0ALERTS"
DASHBOARD = "https://tarsy.example.com"
THREAD = "1699990000.000200"
PASSWORD = "password=Zq7xSlackCanary01"
ALERT_MESSAGE = {
    "ts": THREAD,
    "text": "[FIRING:1] PodCrashLooping payments-api\nFingerprint:  7f3a9c0d1e",
}


@pytest.fixture
def configure(tarsy_config, scripted_provider, stand_in, monkeypatch):
    """Slack on (pointed at the stand-in), a one-agent chain without tools for the alert
    type ``slack-test``, and the scripted model answering once."""

    def use(
        *, answer: str = "## Summary\nThe pod crash-loops.", summary: str = "", **slack_keys
    ) -> None:
        def change(config: dict) -> None:
            config["agents"]["Reader"] = {"mcp_servers": []}
            config["agent_chains"]["slack-test"] = {
                "alert_types": ["slack-test"],
                "stages": [{"name": "investigation", "agents": [{"name": "Reader"}]}],
            }
            config.setdefault("system", {}).update(
                dashboard_url=DASHBOARD,
                slack={
                    "enabled": True,
                    "token_env": "TEST_SLACK_TOKEN",
                    "channel": CHANNEL,
                    "api_url": stand_in.base_url,
                    **slack_keys,
                },
            )

        tarsy_config(change)
        own = {"ExecSummaryAgent": {"turns": [{"text": summary}]}} if summary else {}
        scripted_provider([{"text": answer}], agents=own)

    monkeypatch.setenv("TEST_SLACK_TOKEN", TOKEN)
    return use


def submit(client, api_token, **body) -> AlertSession:
    response = client.post(
        "/api/v1/alerts",
        data=json.dumps(
            {"data": "pod payments-api is crash-looping", "alert_type": "slack-test", **body}
        ),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {api_token}",
    )
    assert response.status_code == 202, response.content
    return AlertSession.objects.get(id=response.json()["session_id"])


def slack_tasks() -> list[tuple[str, ...]]:
    """The Slack tasks waiting in the broker, as (session id, kind)."""
    return [
        tuple(row.task["args"])
        for row in OrmQ.objects.order_by("id")
        if row.task.get("func") == "worker.tasks.slack_notify"
    ]


def run_slack_tasks() -> list[str]:
    return [slack_notify(*args) for args in slack_tasks()]


def investigate(client, api_token, **body) -> AlertSession:
    session = submit(client, api_token, **body)
    assert run_session(str(session.id)) == "completed"
    session.refresh_from_db()
    return session


def texts(call) -> str:
    blocks = call.params["blocks"]
    blocks = json.loads(blocks) if isinstance(blocks, str) else blocks
    return "\n".join(block["text"]["text"] for block in blocks)


def test_a_session_from_a_slack_alert_replies_in_its_thread_when_it_starts_and_ends(
    client, api_token, stand_in, configure, browser_client
):
    configure()
    stand_in.history = [
        {"ts": "1699999999.000100", "text": "deploy finished"},
        {"ts": "1699999000.000100", "text": "someone said fingerprint 7f3a9c0d"},
        ALERT_MESSAGE,
    ]
    stand_in.page_size = 2  # the alert is on the second page
    session = investigate(client, api_token, slack_message_fingerprint="FINGERPRINT: 7f3a9c0d1e")
    assert session.slack_message_fingerprint == "FINGERPRINT: 7f3a9c0d1e"
    assert slack_tasks() == [(str(session.id), "start"), (str(session.id), "end")]
    looked_up_at = time.time()
    assert run_slack_tasks() == ["sent", "sent"]

    history = [call for call in stand_in.calls if call.method == "conversations.history"]
    assert len(history) == 2  # two pages, once: the end message reuses the thread found
    assert history[0].params["channel"] == CHANNEL
    assert abs(float(history[0].params["oldest"]) - (looked_up_at - 24 * 3600)) < 30
    start, end = stand_in.posts()
    for call in (start, end):
        assert call.headers["authorization"] == f"Bearer {TOKEN}"
        assert call.params["channel"] == CHANNEL
        assert call.params["thread_ts"] == THREAD
        assert f"<{DASHBOARD}/sessions/{session.id}/|" in texts(call)
    assert "*Investigating*" in texts(start)
    assert "*Investigation complete*" in texts(end)
    assert "The pod crash-loops." in texts(end)  # the executive summary, else the analysis

    messages = {m.kind: m for m in SlackMessage.objects.filter(session=session)}
    assert messages["start"].status == messages["end"].status == "sent"
    assert messages["end"].thread_ts == THREAD
    assert messages["end"].ts.startswith("1700000")
    page = browser_client.get(f"/sessions/{session.id}/").content.decode()
    assert "end message\n    posted in the alert's thread" in page


def test_a_fingerprint_quoting_a_secret_is_kept_masked_and_still_finds_its_thread(
    client, api_token, stand_in, configure
):
    configure()
    stand_in.history = [
        {"ts": "1699999999.000100", "text": "DB login failed for another app"},
        {"ts": THREAD, "text": f"[FIRING:1] DB login failed\n{PASSWORD}\nsee the runbook"},
    ]
    session = investigate(client, api_token, slack_message_fingerprint=f"login failed {PASSWORD}")
    assert session.slack_message_fingerprint.startswith("login failed password=[MASKED_")
    assert run_slack_tasks() == ["sent", "sent"]
    for post in stand_in.posts():
        assert post.params["thread_ts"] == THREAD
        assert CANARY not in json.dumps(post.params)


def test_what_is_posted_is_masked_even_the_models_words(client, api_token, stand_in, configure):
    # The model reads only masked text, and its words are stored as it wrote them; but it
    # may decode what the masking did not recognise, so Slack gets them masked again.
    configure(summary=f"The app used the leaked {PASSWORD}\nRotate it.")
    session = investigate(client, api_token)
    assert PASSWORD in session.executive_summary
    cancelled = submit(client, api_token)
    response = client.post(
        f"/api/v1/sessions/{cancelled.id}/cancel",
        data=json.dumps({"reason": f"duplicate of the one with {PASSWORD}"}),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {api_token}",
    )
    assert response.status_code == 200
    assert run_slack_tasks() == ["sent", "sent"]
    summary, reason = (texts(post) for post in stand_in.posts())
    assert "The app used the leaked password=[MASKED_" in summary
    assert "Rotate it." in summary
    assert "duplicate of the one with password=[MASKED_" in reason
    assert CANARY not in json.dumps([post.params for post in stand_in.posts()])


def test_without_a_fingerprint_only_the_end_is_posted_to_the_channel(
    client, api_token, stand_in, configure
):
    configure()
    session = investigate(client, api_token)
    assert slack_tasks() == [(str(session.id), "end")]
    assert run_slack_tasks() == ["sent"]
    [post] = stand_in.posts()
    assert "thread_ts" not in post.params
    assert not [call for call in stand_in.calls if call.method == "conversations.history"]


def test_no_matching_message_posts_to_the_channel(client, api_token, stand_in, configure):
    configure()
    stand_in.history = [{"ts": "1.0", "text": "something else"}]
    investigate(client, api_token, slack_message_fingerprint="7f3a9c0d1e")
    assert run_slack_tasks() == ["sent", "sent"]
    assert all("thread_ts" not in post.params for post in stand_in.posts())


def test_a_long_summary_is_cut_to_slacks_block_limit_and_cannot_ping_the_channel(
    client, api_token, stand_in, configure
):
    configure(summary="<!channel> " + "The pod crash-loops & restarts. " * 400)
    session = investigate(client, api_token)
    assert len(session.executive_summary) > 10_000
    run_slack_tasks()
    [post] = stand_in.posts()
    blocks = post.params["blocks"]
    assert all(len(block["text"]["text"]) <= 2900 for block in blocks)
    body = blocks[1]["text"]["text"]
    assert body.startswith("&lt;!channel&gt; The pod crash-loops &amp; restarts.")
    assert body.endswith("_… (truncated: the whole text is on the session page)_")
    assert len(body) > 2800


def test_every_terminal_status_is_told(client, api_token, stand_in, configure):
    configure()
    session = submit(client, api_token)
    services.session_cancel(session_id=session.id, by="alice", reason="duplicate alert")
    assert run_slack_tasks() == ["sent"]
    [post] = stand_in.posts()
    assert "*Investigation cancelled*" in texts(post)
    assert "duplicate alert" in texts(post)
    assert run_session(str(session.id)) == "skipped"


@pytest.mark.parametrize(
    ("outage", "reason"),
    [
        ("down", "Connection refused"),
        ("http_500", "Slack answered HTTP 500"),
        ("not_ok", "Slack answered HTTP 200: channel_not_found"),
    ],
)
def test_a_slack_outage_is_recorded_and_leaves_the_session_alone(
    client, api_token, stand_in, configure, browser_client, outage, reason, monkeypatch
):
    configure()
    if outage == "down":
        stand_in.close()
        # It still retries, but at once.
        monkeypatch.setattr("worker.slack.RETRY_INTERVAL", FixedValueRetryIntervalCalculator(0))
    elif outage == "http_500":
        stand_in.http_status = 500
    else:
        stand_in.fail_with = "channel_not_found"
    session = investigate(client, api_token, slack_message_fingerprint="7f3a9c0d1e")
    assert run_slack_tasks() == ["failed", "failed"]
    session.refresh_from_db()
    assert session.status == SessionStatus.COMPLETED
    assert session.final_analysis.startswith("## Summary")
    for message in SlackMessage.objects.filter(session=session):
        assert message.status == "failed"
        assert reason in message.error
    page = browser_client.get(f"/sessions/{session.id}/").content.decode()
    assert "start message\n    failed: " in page
    assert reason.replace("'", "&#x27;") in page


def test_a_missing_token_is_a_recorded_failure_that_names_the_variable(
    client, api_token, stand_in, configure, monkeypatch
):
    configure()
    monkeypatch.delenv("TEST_SLACK_TOKEN")
    session = investigate(client, api_token)
    assert run_slack_tasks() == ["failed"]
    message = SlackMessage.objects.get(session=session)
    assert "TEST_SLACK_TOKEN" in message.error
    assert not stand_in.calls


def test_a_redelivered_task_does_not_post_twice(client, api_token, stand_in, configure):
    configure()
    session = investigate(client, api_token)
    assert slack_notify(str(session.id), "end") == "sent"
    assert slack_notify(str(session.id), "end") == "skipped"
    assert len(stand_in.posts()) == 1
    assert SlackMessage.objects.filter(session=session).count() == 1


def test_with_slack_disabled_nothing_is_queued(client, api_token, stand_in, configure):
    configure(enabled=False)
    session = investigate(client, api_token, slack_message_fingerprint="7f3a9c0d1e")
    assert session.slack_message_fingerprint == "7f3a9c0d1e"  # kept for later
    assert slack_tasks() == []


def test_the_fingerprint_must_be_a_short_string(client, api_token, configure):
    configure()
    for value, problem in [
        (42, "'slack_message_fingerprint' must be a string, got int"),
        ("x" * 501, "'slack_message_fingerprint' is 501 characters; the limit is 500"),
    ]:
        response = client.post(
            "/api/v1/alerts",
            data=json.dumps({"data": "x", "slack_message_fingerprint": value}),
            content_type="application/json",
            HTTP_AUTHORIZATION=f"Bearer {api_token}",
        )
        assert response.status_code == 400
        assert response.json()["error"] == problem


def test_the_form_takes_a_fingerprint_when_slack_is_on(browser_client, configure):
    configure()
    page = browser_client.get("/sessions/new/")
    assert 'name="slack_message_fingerprint"' in page.content.decode()
    response = browser_client.post(
        "/sessions/new/",
        {
            "csrfmiddlewaretoken": page.cookies["csrftoken"].value,
            "alert_type": "slack-test",
            "data": "pod crash-looping",
            "slack_message_fingerprint": "7f3a9c0d1e",
        },
    )
    assert response.status_code == 302
    assert AlertSession.objects.get().slack_message_fingerprint == "7f3a9c0d1e"


def test_end_blocks_of_a_failed_session_carry_the_error():
    session = AlertSession(status=SessionStatus.FAILED, error_message="Stage 'x' failed: boom")
    blocks = slack.end_blocks(session, "")
    assert [b["text"]["text"] for b in blocks] == [
        ":x: *Investigation failed*",
        "Stage 'x' failed: boom",
    ]


def test_end_blocks_of_a_session_stopped_by_its_budget_say_so():
    session = AlertSession(
        status=SessionStatus.COMPLETED,
        executive_summary="The pool is exhausted.",
        budget_stop="cost $0.50 of $0.50",
    )
    blocks = slack.end_blocks(session, "")
    assert [b["text"]["text"] for b in blocks] == [
        ":white_check_mark: *Investigation complete*",
        ":money_with_wings: Stopped by budget: cost $0.50 of $0.50",
        "The pool is exhausted.",
    ]


async def test_the_session_page_shows_a_slack_message_live(user):
    from asgiref.sync import sync_to_async
    from channels.routing import URLRouter
    from channels.testing import WebsocketCommunicator

    from sessions.models import SessionEvent
    from tarsy_site.routing import websocket_urlpatterns

    session = await sync_to_async(AlertSession.objects.create)(
        alert_type="kubernetes",
        alert_data="d",
        chain_id="kubernetes-investigation",
        status="completed",
    )
    communicator = WebsocketCommunicator(
        URLRouter(websocket_urlpatterns), f"/ws/sessions/{session.id}/"
    )
    communicator.scope["user"] = user
    assert (await communicator.connect())[0]
    cursor = await sync_to_async(
        lambda: SessionEvent.objects.order_by("-id").values_list("id", flat=True).first() or 0
    )()
    await communicator.send_json_to({"action": "subscribe", "last_event_id": cursor})
    await sync_to_async(services.slack_message_record)(
        session_id=session.id, kind="end", channel="C1", error="Slack answered HTTP 200: nope"
    )
    message = await communicator.receive_from(timeout=5)
    assert 'id="slack-status"' in message
    assert 'hx-swap-oob="true"' in message
    assert "end message" in message
    assert "failed: Slack answered HTTP 200: nope" in message
    await communicator.disconnect()
