"""The duplicate-alert cooldown (issue 23 item 1): fingerprints, the window, the statuses
a session may be in, the SRE's override, masking of repeats, and the config's errors."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
import yaml
from django.utils import timezone
from pydantic import ValidationError

from config.schema import TarsyFile
from sessions import services
from sessions.dedup import alert_fingerprint
from sessions.models import (
    KEPT_REPEATS,
    AlertFingerprint,
    AlertRepeat,
    AlertSession,
    SessionEvent,
    SessionRepeats,
    SessionStatus,
    TimelineEvent,
)
from tests import secrets_corpus
from web.fragments import session_fragments

PASSWORD = "password=Zq7xDedupCanary01"

STORM = """alertname: PodCrashLooping
namespace: payments
deployment: payments-api
pod: payments-api-{pod}
startsAt: 2026-11-26T10:0{pod}:00Z"""


def fp(data: str, fields: tuple[str, ...] = (), submitted: str = "", alert_type="k") -> str:
    return alert_fingerprint(alert_type=alert_type, data=data, fields=fields, submitted=submitted)


# --- fingerprints -------------------------------------------------------------------------------


def test_the_named_fields_of_text_alerts_make_the_fingerprint():
    fields = ("alertname", "namespace", "deployment")
    assert fp(STORM.format(pod=1), fields) == fp(STORM.format(pod=2), fields)
    other = STORM.format(pod=1).replace("payments-api\n", "checkout\n")
    assert fp(other, fields) != fp(STORM.format(pod=1), fields)


def test_the_named_fields_are_found_anywhere_in_json():
    def webhook(pod: str, namespace: str = "payments") -> str:
        return json.dumps(
            {
                "receiver": "tarsy",
                "alerts": [
                    {
                        "labels": {
                            "alertname": "PodCrashLooping",
                            "namespace": namespace,
                            "pod": pod,
                        },
                        "startsAt": pod,
                    }
                ],
            }
        )

    fields = ("alertname", "namespace")
    assert fp(webhook("a"), fields) == fp(webhook("b"), fields)
    assert fp(webhook("a"), fields) != fp(webhook("a", "checkout"), fields)


def test_without_fields_the_whole_alert_is_normalised():
    assert fp('{"a": 1, "b": [1, 2]}') == fp('{\n  "b": [1,2],\n  "a": 1\n}')
    assert fp("pod  down\n\n  in payments ") == fp("pod down\nin payments")
    assert fp("pod down in payments") != fp("pod down in checkout")


def test_fields_none_of_which_is_found_fall_back_to_the_whole_alert():
    assert fp("pod down", ("alertname",)) == fp("pod down")
    assert fp("pod down", ("alertname",)) != fp("pod up", ("alertname",))


def test_a_submitted_fingerprint_wins_and_the_alert_type_counts():
    assert fp("pod down", submitted="incident-7") == fp("other text", submitted="incident-7")
    assert fp("pod down", submitted="incident-7") != fp("pod down", submitted="incident-8")
    assert fp("pod down", alert_type="a") != fp("pod down", alert_type="b")


def test_the_fingerprint_is_a_hash_not_the_values():
    value = fp(f"alertname: X\ndb: {PASSWORD}", ("alertname", "db"))
    assert len(value) == 64
    assert int(value, 16) >= 0
    assert "Zq7x" not in value


# --- the REST API -------------------------------------------------------------------------------


def post(client, token: str, body: dict):
    return client.post(
        "/api/v1/alerts",
        data=json.dumps(body),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )


@pytest.fixture
def dedup_on(tarsy_config):
    def use(**rule) -> None:
        tarsy_config(
            lambda config: config["defaults"].update(
                dedup={"enabled": True, "fields": ["alertname", "namespace"], **rule}
            )
        )

    use()
    return use


@pytest.mark.django_db
def test_off_unless_configured_every_alert_starts_a_session(client, api_token):
    first = post(client, api_token, {"data": STORM.format(pod=1)})
    second = post(client, api_token, {"data": STORM.format(pod=1)})
    assert first.json()["session_id"] != second.json()["session_id"]
    assert "deduplicated" not in second.json()  # TARSy's answer, unchanged
    assert AlertSession.objects.count() == 2
    assert not AlertFingerprint.objects.exists()


@pytest.mark.django_db
def test_a_repeat_is_recorded_on_the_pending_session(client, api_token, dedup_on):
    first = post(client, api_token, {"data": STORM.format(pod=1)})
    assert first.status_code == 202
    assert "deduplicated" not in first.json()
    session_id = first.json()["session_id"]
    for pod in (2, 3):
        again = post(client, api_token, {"data": STORM.format(pod=pod)})
        assert again.status_code == 202
        body = again.json()
        assert body["deduplicated"] is True
        assert body["session_id"] == session_id
        assert body["status"] == "queued"
        assert session_id in body["message"]
    assert body["repeat_count"] == 2
    assert AlertSession.objects.count() == 1
    repeats = SessionRepeats.objects.get(session_id=session_id)
    assert repeats.count == 2
    assert repeats.first_at <= repeats.last_at
    kept = list(AlertRepeat.objects.filter(session_id=session_id))
    assert [r.number for r in kept] == [1, 2]
    assert "payments-api-3" in kept[1].alert_data
    assert kept[0].author == "alice"
    # One item, updated in place, pushed live each time.
    item = TimelineEvent.objects.get(session_id=session_id, event_type="alert_repeated")
    assert item.content == "Alert repeated \u00d72"
    assert item.metadata["count"] == 2
    events = SessionEvent.objects.filter(session_id=session_id, timeline_event_id=item.id)
    assert list(events.values_list("type", flat=True)) == [
        "timeline_event.created",
        "timeline_event.completed",
    ]
    # What the session page gets live: the item, swapped in place into the session's list.
    last = events.last()
    html = session_fragments({"type": last.type, "payload": last.payload}, None)
    assert f'id="item-{item.id}"' in html
    assert 'data-upsert-into="#session-items"' in html
    assert "Alert repeated \u00d72" in html


@pytest.mark.django_db
def test_a_different_alert_starts_its_own_session(client, api_token, dedup_on):
    first = post(client, api_token, {"data": STORM.format(pod=1)})
    other = post(client, api_token, {"data": STORM.format(pod=1).replace("payments", "checkout")})
    assert other.json()["session_id"] != first.json()["session_id"]
    assert "deduplicated" not in other.json()


@pytest.mark.django_db
@pytest.mark.parametrize("status", [SessionStatus.IN_PROGRESS, SessionStatus.CANCELLING])
def test_a_running_session_takes_repeats(client, api_token, dedup_on, status):
    first = post(client, api_token, {"data": STORM.format(pod=1)}).json()["session_id"]
    AlertSession.objects.filter(id=first).update(status=status, started_at=timezone.now())
    again = post(client, api_token, {"data": STORM.format(pod=2)}).json()
    assert again["session_id"] == first
    assert again["deduplicated"] is True


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("ended_ago", "deduplicated"),
    [(timedelta(minutes=9), True), (timedelta(minutes=11), False)],
)
@pytest.mark.parametrize(
    "status", [SessionStatus.COMPLETED, SessionStatus.FAILED, SessionStatus.CANCELLED]
)
def test_an_ended_session_takes_repeats_within_the_window(
    client, api_token, dedup_on, status, ended_ago, deduplicated
):
    first = post(client, api_token, {"data": STORM.format(pod=1)}).json()["session_id"]
    AlertSession.objects.filter(id=first).update(
        status=status, completed_at=timezone.now() - ended_ago
    )
    again = post(client, api_token, {"data": STORM.format(pod=2)}).json()
    assert (again["session_id"] == first) is deduplicated
    assert again.get("deduplicated", False) is deduplicated
    if not deduplicated:
        # The fingerprint points to the new session from now on.
        third = post(client, api_token, {"data": STORM.format(pod=3)}).json()
        assert third["session_id"] == again["session_id"]
        assert third["deduplicated"] is True


@pytest.mark.django_db
def test_the_window_is_configured(client, api_token, dedup_on):
    dedup_on(window="30s")
    first = post(client, api_token, {"data": STORM.format(pod=1)}).json()["session_id"]
    AlertSession.objects.filter(id=first).update(
        status=SessionStatus.COMPLETED, completed_at=timezone.now() - timedelta(seconds=45)
    )
    assert "deduplicated" not in post(client, api_token, {"data": STORM.format(pod=2)}).json()


@pytest.mark.django_db
def test_per_alert_type_settings_override_the_defaults(client, api_token, tarsy_config):
    tarsy_config(
        lambda config: config["defaults"].update(
            dedup={"enabled": False, "alert_types": {"kubernetes": {"enabled": True}}}
        )
    )
    first = post(client, api_token, {"data": "pod down", "alert_type": "kubernetes"}).json()
    again = post(client, api_token, {"data": "pod down", "alert_type": "kubernetes"}).json()
    assert again["session_id"] == first["session_id"]
    assert again["deduplicated"] is True


@pytest.mark.django_db
def test_force_new_starts_a_new_investigation(client, api_token, dedup_on):
    first = post(client, api_token, {"data": STORM.format(pod=1)}).json()["session_id"]
    forced = post(client, api_token, {"data": STORM.format(pod=2), "force_new": True}).json()
    assert forced["session_id"] != first
    assert "deduplicated" not in forced
    # The repeats that follow go to the newest session.
    again = post(client, api_token, {"data": STORM.format(pod=3)}).json()
    assert again["session_id"] == forced["session_id"]
    assert str(AlertFingerprint.objects.get().session_id) == forced["session_id"]


@pytest.mark.django_db
def test_a_submitted_fingerprint_groups_different_alerts(client, api_token, dedup_on):
    first = post(client, api_token, {"data": "disk full", "fingerprint": "inc-1"}).json()
    again = post(client, api_token, {"data": "db slow", "fingerprint": "inc-1"}).json()
    assert again["session_id"] == first["session_id"]
    assert again["deduplicated"] is True


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("body", "text"),
    [
        ({"data": "x", "fingerprint": 5}, "'fingerprint' must be a string"),
        ({"data": "x", "fingerprint": "f" * 501}, "'fingerprint' is 501 characters"),
        ({"data": "x", "force_new": "yes"}, "'force_new' must be true or false"),
    ],
)
def test_wrong_dedup_fields_are_refused(client, api_token, dedup_on, body, text):
    response = post(client, api_token, body)
    assert response.status_code == 400
    assert text in response.json()["message"]
    assert not AlertSession.objects.exists()


@pytest.mark.django_db
def test_repeats_are_masked_and_capped_while_the_counter_counts(client, api_token, dedup_on):
    token = secrets_corpus.LINES["github_token"][1]
    data = f"alertname: Leak\nnamespace: payments\nlog: {PASSWORD}\ntoken: {token}"
    session_id = post(client, api_token, {"data": data}).json()["session_id"]
    for _ in range(KEPT_REPEATS + 3):
        assert post(client, api_token, {"data": data}).json()["deduplicated"] is True
    assert SessionRepeats.objects.get(session_id=session_id).count == KEPT_REPEATS + 3
    kept = AlertRepeat.objects.filter(session_id=session_id)
    assert kept.count() == KEPT_REPEATS
    for repeat in kept:
        assert "Zq7xDedupCanary01" not in repeat.alert_data
        assert token not in repeat.alert_data
        assert "[MASKED_" in repeat.alert_data
    fingerprint = AlertFingerprint.objects.get().fingerprint
    assert "Zq7x" not in fingerprint
    assert len(fingerprint) == 64
    item = TimelineEvent.objects.get(session_id=session_id, event_type="alert_repeated")
    assert item.content == f"Alert repeated \u00d7{KEPT_REPEATS + 3}"


@pytest.mark.django_db
def test_a_repeat_on_a_running_session_takes_the_next_place_in_its_timeline(dedup_on):
    from tests.conftest import running_session

    session, lease = running_session()
    services.timeline_event_add(lease=lease, event_type="llm_response", content="looking")
    AlertFingerprint.objects.create(fingerprint="f" * 64, session=session)
    accepted = services.alert_accept(
        alert_type="kubernetes",
        alert_data="again",
        chain_id="kubernetes-investigation",
        author="bob",
        fingerprint="f" * 64,
    )
    assert accepted.deduplicated
    assert accepted.session.id == session.id
    numbers = list(
        TimelineEvent.objects.filter(session=session).values_list("sequence_number", flat=True)
    )
    assert numbers == [1, 2]


# --- the web form -------------------------------------------------------------------------------


def csrf(browser) -> str:
    browser.get("/sessions/new/")
    return browser.cookies["csrftoken"].value


@pytest.mark.django_db
def test_the_form_redirects_a_repeat_to_its_session_with_a_message(browser_client, dedup_on):
    def submit(**extra):
        return browser_client.post(
            "/sessions/new/",
            {
                "csrfmiddlewaretoken": csrf(browser_client),
                "alert_type": "kubernetes",
                "data": STORM.format(pod=1),
                **extra,
            },
        )

    first = submit()
    assert first.status_code == 302
    again = submit()
    assert again.status_code == 302
    assert again["Location"] == first["Location"] + "?repeated=1"
    page = browser_client.get(again["Location"]).content.decode()
    assert 'id="alert-repeated"' in page
    assert "repeat \u00d71" in page
    assert "Alert repeated \u00d71" in page  # the timeline item
    forced = submit(force_new="on")
    assert forced.status_code == 302
    assert forced["Location"] != first["Location"]
    assert AlertSession.objects.count() == 2


@pytest.mark.django_db
def test_the_form_offers_the_override_only_when_the_cooldown_is_on(browser_client, tarsy_config):
    assert 'name="force_new"' not in browser_client.get("/sessions/new/").content.decode()
    tarsy_config(lambda config: config["defaults"].update(dedup={"enabled": True}))
    assert 'name="force_new"' in browser_client.get("/sessions/new/").content.decode()


# --- config -------------------------------------------------------------------------------------


def load(text: str):
    return TarsyFile.model_validate(yaml.safe_load(text)).to_config("tarsy.yaml")


def test_the_config_defaults_and_overrides():
    assert load("{}").defaults.dedup.for_alert_type("kubernetes").enabled is False
    config = load(
        "defaults:\n  dedup:\n    enabled: true\n    fields: [alertname]\n    window: 600s\n"
        "    alert_types:\n      kubernetes: {window: 2m, fields: [namespace]}\n"
    )
    rule = config.defaults.dedup.for_alert_type("kubernetes")
    assert (rule.enabled, rule.fields, rule.window) == (True, ("namespace",), 120.0)
    other = config.defaults.dedup.for_alert_type("other")
    assert (other.enabled, other.fields, other.window) == (True, ("alertname",), 600.0)
    assert load("defaults:\n  dedup:\n    window: 90\n").defaults.dedup.window == 90.0
    assert load("defaults:\n  dedup:\n    enabled: true\n").defaults.dedup.window == 600.0


@pytest.mark.parametrize(
    ("text", "key", "problem"),
    [
        ("window: soon", "defaults.dedup.window", "expected a duration"),
        ("window: 0", "defaults.dedup.window", "expected a duration"),
        ("fields: ['']", "defaults.dedup.fields", "field names may not be empty"),
        ("fields: alertname", "defaults.dedup.fields", "expected a list"),
        ("enabled: maybe", "defaults.dedup.enabled", ""),
        ("alert_types: {nope: {}}", "defaults.dedup.alert_types.nope", "unknown alert type"),
        (
            "alert_types: {kubernetes: {window: x}}",
            "defaults.dedup.alert_types.kubernetes.window",
            "expected a duration",
        ),
        ("windows: 5m", "defaults.dedup.windows", "unknown key"),
    ],
)
def test_config_errors_name_the_key(text, key, problem):
    with pytest.raises(ValidationError) as raised:
        load(f"defaults:\n  dedup:\n    {text}\n")
    message = str(raised.value)
    assert key in message
    assert problem in message
