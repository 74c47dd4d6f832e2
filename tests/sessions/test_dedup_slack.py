"""The duplicate-alert cooldown's leftovers (issue 23 item 1): the Slack thread of a
session is told of its repeats at milestones, once each; the session's REST detail
carries ``repeat_count`` and ``last_repeated_at``. Slack is a local stand-in for its Web
API (``slack_server.py``); the Slack tasks are taken from the ORM broker and run."""

from __future__ import annotations

import json

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django_q.models import OrmQ

from sessions.models import AlertSession, SessionRepeats, SlackMessage
from sessions.services.slack import is_repeat_milestone, repeat_kind, repeat_number
from worker.tasks import slack_notify

pytestmark = pytest.mark.django_db(transaction=True)

TOKEN = "xoxb-1234567890-Zq7xDedupSlackToken"
CHANNEL = "C0ALERTS"
DASHBOARD = "https://tarsy.example.com"
THREAD = "1699990000.000200"
OTHER_THREAD = "1699995000.000300"
STORM = "alertname: PodCrashLooping\nnamespace: payments\npod: payments-api-{pod}"


@pytest.fixture
def configure(tarsy_config, stand_in, monkeypatch):
    """The cooldown on (by alertname and namespace), Slack on and pointed at the stand-in."""

    def use(*, slack: bool = True) -> None:
        def change(config: dict) -> None:
            config["defaults"]["dedup"] = {"enabled": True, "fields": ["alertname", "namespace"]}
            config.setdefault("system", {}).update(
                dashboard_url=DASHBOARD,
                slack={
                    "enabled": slack,
                    "token_env": "TEST_SLACK_TOKEN",
                    "channel": CHANNEL,
                    "api_url": stand_in.base_url,
                },
            )

        tarsy_config(change)

    monkeypatch.setenv("TEST_SLACK_TOKEN", TOKEN)
    use()
    return use


def post(client, token: str, pod: int, **body):
    response = client.post(
        "/api/v1/alerts",
        data=json.dumps({"data": STORM.format(pod=pod), **body}),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )
    assert response.status_code == 202, response.content
    return response.json()


def slack_tasks() -> list[tuple[str, ...]]:
    return [
        tuple(row.task["args"])
        for row in OrmQ.objects.order_by("id")
        if row.task.get("func") == "worker.tasks.slack_notify"
    ]


def texts(call) -> str:
    blocks = call.params["blocks"]
    blocks = json.loads(blocks) if isinstance(blocks, str) else blocks
    return "\n".join(block["text"]["text"] for block in blocks)


# --- milestones ---------------------------------------------------------------------------------


def test_the_milestones_are_1_2_5_times_powers_of_ten():
    assert [n for n in range(1, 1001) if is_repeat_milestone(n)] == [
        1,
        2,
        5,
        10,
        20,
        50,
        100,
        200,
        500,
        1000,
    ]
    assert not is_repeat_milestone(0)
    assert repeat_kind(5) == "rep-5"
    assert repeat_kind(500_000) == "rep-500000"  # SlackMessage.kind holds 10 characters
    assert repeat_kind(1_000_000) == ""
    assert repeat_kind(3) == ""
    assert repeat_number("rep-50") == 50
    for kind in ("start", "end", "rep-", "rep-x", "rep-\u00b2", "repeat-5"):
        assert repeat_number(kind) is None, kind


# --- the thread replies -------------------------------------------------------------------------


def test_a_storm_replies_in_the_original_thread_at_milestones_only(
    client, api_token, stand_in, configure
):
    first = post(client, api_token, 0, slack_message_fingerprint="PodCrashLooping payments 7f3a")
    session_id = first["session_id"]
    # Each repeat came from a Slack message of its own: the replies still go to the thread
    # of the session's alert, not to theirs.
    for pod in range(1, 51):
        again = post(client, api_token, pod, slack_message_fingerprint=f"storm message {pod}")
        assert again["deduplicated"] is True
        assert again["session_id"] == session_id
    assert AlertSession.objects.count() == 1
    kinds = ["rep-1", "rep-2", "rep-5", "rep-10", "rep-20", "rep-50"]
    # 50 repeats, 6 replies; the "investigating" message waits for the session to start.
    assert slack_tasks() == [(session_id, kind) for kind in kinds]

    stand_in.history = [
        {"ts": OTHER_THREAD, "text": "[FIRING] storm message 50 PodCrashLooping payments 7f"},
        {"ts": THREAD, "text": "[FIRING:1] PodCrashLooping payments 7f3a"},
    ]
    assert [slack_notify(*args) for args in slack_tasks()] == ["sent"] * 6
    posts = stand_in.posts()
    for post_call, count in zip(posts, [1, 2, 5, 10, 20, 50], strict=True):
        assert post_call.params["channel"] == CHANNEL
        assert post_call.params["thread_ts"] == THREAD
        assert texts(post_call) == (
            f":repeat: *Alert repeated \u00d7{count}* \u2014 no new investigation; "
            f"see <{DASHBOARD}/sessions/{session_id}/|the session in TARSy>"
        )
        assert (
            post_call.params["text"] == f"Alert repeated \u00d7{count} \u2014 no new investigation"
        )
    recorded = SlackMessage.objects.filter(session_id=session_id)
    assert sorted(recorded.values_list("kind", flat=True)) == sorted(kinds)
    assert set(recorded.values_list("status", flat=True)) == {"sent"}
    assert set(recorded.values_list("thread_ts", flat=True)) == {THREAD}


def test_a_redelivered_reply_posts_nothing_twice(client, api_token, stand_in, configure):
    session_id = post(client, api_token, 0, slack_message_fingerprint="7f3a")["session_id"]
    post(client, api_token, 1)
    assert (session_id, "rep-1") in slack_tasks()
    assert slack_notify(session_id, "rep-1") == "sent"
    assert slack_notify(session_id, "rep-1") == "skipped"
    assert len(stand_in.posts()) == 1
    assert "Alert repeated \u00d71*" in texts(stand_in.posts()[0])
    assert SlackMessage.objects.filter(session_id=session_id, kind="rep-1").count() == 1


def test_without_a_dashboard_url_the_reply_names_the_session(
    client, api_token, stand_in, configure, tarsy_config
):
    session_id = post(client, api_token, 0, slack_message_fingerprint="7f3a")["session_id"]
    post(client, api_token, 1)
    tarsy_config(
        lambda config: config.setdefault("system", {}).update(
            slack={
                "enabled": True,
                "token_env": "TEST_SLACK_TOKEN",
                "channel": CHANNEL,
                "api_url": stand_in.base_url,
            }
        )
    )
    assert slack_notify(session_id, "rep-1") == "sent"
    [reply] = stand_in.posts()
    assert texts(reply).endswith(f"see session {session_id} in TARSy")
    assert "thread_ts" not in reply.params  # no message in the history matched


def test_a_session_not_from_slack_gets_no_reply(client, api_token, stand_in, configure):
    session_id = post(client, api_token, 0)["session_id"]
    # A repeat's own Slack message does not make the session a Slack one.
    assert post(client, api_token, 1, slack_message_fingerprint="other 7f3a")["deduplicated"]
    assert post(client, api_token, 2)["deduplicated"]
    assert slack_tasks() == []
    assert SessionRepeats.objects.get(session_id=session_id).count == 2


def test_with_slack_off_a_repeat_queues_and_posts_nothing(client, api_token, stand_in, configure):
    session_id = post(client, api_token, 0, slack_message_fingerprint="7f3a")["session_id"]
    post(client, api_token, 1)
    queued = slack_tasks()
    assert (session_id, "rep-1") in queued
    configure(slack=False)
    assert post(client, api_token, 2)["repeat_count"] == 2
    assert slack_tasks() == queued  # no rep-2
    # A reply queued while Slack was on and delivered after it was switched off: nothing.
    assert slack_notify(session_id, "rep-1") == "skipped"
    assert stand_in.calls == []
    assert not SlackMessage.objects.filter(session_id=session_id).exists()


def test_a_failed_reply_is_recorded_and_the_repeat_still_counts(
    client, api_token, stand_in, configure
):
    session_id = post(client, api_token, 0, slack_message_fingerprint="7f3a")["session_id"]
    stand_in.fail_with = "channel_not_found"
    assert post(client, api_token, 1)["repeat_count"] == 1
    assert slack_notify(session_id, "rep-1") == "failed"
    message = SlackMessage.objects.get(session_id=session_id, kind="rep-1")
    assert "channel_not_found" in message.error
    assert SessionRepeats.objects.get(session_id=session_id).count == 1


# --- the session's REST detail ------------------------------------------------------------------


def detail(client, token: str, session_id: str) -> dict:
    response = client.get(f"/api/v1/sessions/{session_id}", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert response.status_code == 200, response.content
    return response.json()


def test_the_detail_counts_the_repeats(client, api_token, configure):
    configure(slack=False)
    session_id = post(client, api_token, 0)["session_id"]
    body = detail(client, api_token, session_id)
    assert body["repeat_count"] == 0
    assert body["last_repeated_at"] is None
    assert body["status"] == "pending"  # TARSy's fields as before
    for pod in (1, 2, 3):
        post(client, api_token, pod)
    body = detail(client, api_token, session_id)
    repeats = SessionRepeats.objects.get(session_id=session_id)
    assert body["repeat_count"] == 3
    assert body["last_repeated_at"] == repeats.last_at.isoformat().replace("+00:00", "Z")
    assert body["last_repeated_at"].endswith("Z")


def test_the_list_does_not_query_per_session_for_repeats(client, api_token, configure):
    configure(slack=False)

    def storm(alertname: str) -> None:
        for pod in range(3):
            client.post(
                "/api/v1/alerts",
                data=json.dumps({"data": f"alertname: {alertname}\nnamespace: p\npod: {pod}"}),
                content_type="application/json",
                HTTP_AUTHORIZATION=f"Bearer {api_token}",
            )

    def listed() -> tuple[int, list[dict]]:
        with CaptureQueriesContext(connection) as queries:
            response = client.get("/api/v1/sessions", HTTP_AUTHORIZATION=f"Bearer {api_token}")
        assert response.status_code == 200
        return len(queries), response.json()["sessions"]

    storm("A")
    storm("B")
    few, rows = listed()
    assert len(rows) == 2
    for name in "CDEF":
        storm(name)
    many, rows = listed()
    assert len(rows) == 6
    assert SessionRepeats.objects.filter(count=2).count() == 6
    assert many == few
    assert all("repeat_count" not in row for row in rows)  # the detail's, not the list's
