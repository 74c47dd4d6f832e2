"""Every text field of our models says where its text comes from, and text from outside
is masked where it enters, before anything stores, shows or sends it.

``FIELDS`` classifies each ``CharField``, ``TextField`` and ``JSONField`` of this
repository's apps. The walk fails for a field nobody has classified (a field added later
must say where its text comes from) and for a classified field that has gone:

- ``OUTSIDE``: text a client, a person, a server or a provider sent; masked (or, where a
  masked value would not work, refused) at the one entry point named.
- ``INTERNAL``: written only by our code with values it makes or checks against the
  configuration: ids, statuses, choices, hashes, names from tarsy.yaml.
- ``DERIVED``: built only from text that was masked already (copies, search text, event
  payloads, the conversation sent to the model).
- ``MODEL``: what the LLM wrote. It reads only masked text, so it can only repeat masked
  text, and it is kept as written: masking it would change the model's own conversation,
  and streamed text reaches browsers before a mask could run over the whole of it. Two
  ways round the premise are known: Gemini's native tools (search, URL context, code
  execution) read pages and run code the masking never sees, and the model can decode
  an encoding the masking does not recognise. What leaves TARSy for Slack is therefore
  masked again (worker/slack.py).
- ``IDENTIFIER``: a name or id another system gave its own thing (an MCP tool's name, a
  provider's tool-call id, a Slack message's ``ts``), kept verbatim because it is sent
  back verbatim.

Each ``OUTSIDE`` field is planted with canary secrets through its real entry point (the
REST API, the web form, the admin, or the service the worker calls) by a scenario below
(``@plants``); the scenario checks that the canary arrived masked, then looks for it in
every text field of the database, every API answer and every page about the sessions.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from django.apps import apps
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import models
from django.test import Client
from mcp.types import Tool

from agents.tools.mcp_hub import record_health
from llm.models import LLMProvider
from sessions import services
from sessions.models import (
    AlertSession,
    ChatMessage,
    FeedbackReflection,
    LLMInteraction,
    MCPInteraction,
    MemoryEvent,
    SlackMessage,
    TimelineEvent,
)
from sessions.services import scoring as score_services
from sessions.services.reflection import feedback_reflection_end
from tests import secrets_corpus
from tests.conftest import running_session
from tests.sessions.slack_server import LocalSlack
from worker import slack
from worker.tasks import run_session

pytestmark = pytest.mark.django_db

CANARY = secrets_corpus.CANARY  # in every planted value, in no masked one
PASSWORD = "password=Zq7xFieldCanary01"  # masked for its name
TOKEN = secrets_corpus.LINES["github_token"][1]  # masked for its shape
MASKED = "[MASKED_"

OUTSIDE, INTERNAL, DERIVED, MODEL, IDENTIFIER = (
    "outside",
    "internal",
    "derived",
    "model",
    "identifier",
)


@dataclass(frozen=True)
class Source:
    kind: str
    how: str  # OUTSIDE: where it is masked; otherwise why it needs no masking


def outside(entry: str) -> Source:
    return Source(OUTSIDE, entry)


def internal(why: str) -> Source:
    return Source(INTERNAL, why)


def derived(why: str) -> Source:
    return Source(DERIVED, why)


def model(why: str = "the LLM's words") -> Source:
    return Source(MODEL, why)


def identifier(why: str) -> Source:
    return Source(IDENTIFIER, why)


STATUS = internal("a status of the model's choices")
WORKER = internal("host:pid of our worker")
# Who did something: a trusted proxy's identity header (masked as it comes in), else the
# username of an account an operator made (admin, create_api_token).
WHO = outside("sessions.auth.proxy_identity")
ERROR = "; our words quoting a server, a provider or an exception"

S = "alert_sessions"
FIELDS: dict[str, Source] = {
    f"{S}.AlertSession.alert_type": internal("intake refuses alert types not in tarsy.yaml"),
    f"{S}.AlertSession.alert_data": outside("sessions.intake.validate_alert"),
    f"{S}.AlertSession.runbook": outside("sessions.intake.validate_alert"),
    f"{S}.AlertSession.mcp_selection": outside(
        "sessions.intake.validate_mcp_selection: servers must be configured, tools masked"
    ),
    f"{S}.AlertSession.chain_id": internal("a chain of tarsy.yaml"),
    f"{S}.AlertSession.status": STATUS,
    f"{S}.AlertSession.author": WHO,
    f"{S}.AlertSession.final_analysis": model(),
    f"{S}.AlertSession.error_message": outside("sessions.services.lifecycle.session_end" + ERROR),
    f"{S}.AlertSession.executive_summary": model(),
    f"{S}.AlertSession.executive_summary_error": outside(
        "sessions.services.lifecycle.session_end" + ERROR
    ),
    f"{S}.AlertSession.cancelled_by": WHO,
    f"{S}.AlertSession.cancel_reason": outside("sessions.services.lifecycle.session_cancel"),
    f"{S}.AlertSession.worker_id": WORKER,
    f"{S}.AlertSession.runbook_url": outside(
        "sessions.intake._runbook_url: refused when it looks like it holds a secret (a masked "
        "URL could not be fetched)"
    ),
    f"{S}.AlertSession.slack_message_fingerprint": outside("sessions.intake.validate_alert"),
    f"{S}.AlertSession.review_status": STATUS,
    f"{S}.AlertSession.assignee": WHO,
    f"{S}.AlertSession.quality_rating": internal("one of QualityRating, checked"),
    f"{S}.AlertSession.action_taken": outside("sessions.services.review._steps"),
    f"{S}.AlertSession.investigation_feedback": outside("sessions.services.review._steps"),
    f"{S}.AlertSession.feedback_edited_by": WHO,
    f"{S}.AlertSession.budget": derived(
        "numbers: the configured limits, lowered by the alert's own numbers "
        "(sessions.intake.alert_budget refuses anything else)"
    ),
    f"{S}.AlertSession.budget_stop": derived("our words and numbers (sessions.budget.stop_reason)"),
    f"{S}.InvestigationMemory.content": model(
        "a Reflector's lesson, masked again where it is kept (services.memory.memory_create)"
    ),
    f"{S}.InvestigationMemory.category": internal("one of MemoryCategory, checked"),
    f"{S}.InvestigationMemory.valence": internal("one of MemoryValence, checked"),
    f"{S}.InvestigationMemory.project": internal("our project name"),
    f"{S}.InvestigationMemory.alert_type": internal("the source session's"),
    f"{S}.InvestigationMemory.chain_id": internal("the source session's"),
    f"{S}.InvestigationMemory.embedding_model": internal("our embedder's name"),
    f"{S}.MemoryEvent.memory_ref": internal("a memory's UUID"),
    f"{S}.MemoryEvent.kind": STATUS,
    f"{S}.MemoryEvent.actor": WHO,
    f"{S}.MemoryEvent.details": derived(
        "a memory's masked content (cut), its choices and numbers, a checked rating"
    ),
    f"{S}.Stage.name": internal("a stage of tarsy.yaml, or one of our fixed names"),
    f"{S}.Stage.stage_type": STATUS,
    f"{S}.Stage.parallel_type": STATUS,
    f"{S}.Stage.success_policy": internal("from tarsy.yaml"),
    f"{S}.Stage.status": STATUS,
    f"{S}.Stage.error_message": outside("sessions.services.records.stage_close" + ERROR),
    f"{S}.AgentExecution.agent_name": internal("an agent of tarsy.yaml"),
    f"{S}.AgentExecution.task": model("the orchestrating model's words to its sub-agent"),
    f"{S}.AgentExecution.status": STATUS,
    f"{S}.AgentExecution.cancel_reason": outside("sessions.services.lifecycle.execution_cancel"),
    f"{S}.AgentExecution.llm_backend": internal("a backend name of llm/registry.py"),
    f"{S}.AgentExecution.llm_provider": internal("an LLMProvider's name"),
    f"{S}.AgentExecution.model_name": internal("an LLMProvider's model"),
    f"{S}.AgentExecution.original_llm_provider": internal("an LLMProvider's name"),
    f"{S}.AgentExecution.original_llm_backend": internal("a backend name of llm/registry.py"),
    f"{S}.AgentExecution.original_model_name": internal("an LLMProvider's model"),
    f"{S}.AgentExecution.final_analysis": model(),
    f"{S}.AgentExecution.error_message": outside(
        "sessions.services.records.execution_close" + ERROR
    ),
    f"{S}.TimelineEvent.event_type": STATUS,
    f"{S}.TimelineEvent.status": STATUS,
    # Tool results, questions, errors and provider fallbacks are masked where each item
    # is made; the model's own items (thinking, responses, analyses) are MODEL.
    f"{S}.TimelineEvent.content": outside(
        "agents.controller (tool results, provider fallbacks), "
        "sessions.services.chat.chat_message_send (questions), session_end and "
        "chat_message_end (errors), sessions.services.steering.steering_note_add (notes)"
    ),
    f"{S}.TimelineEvent.metadata": model(
        "tool-call arguments, grounding and code the model ran; the rest ids and names"
    ),
    f"{S}.Message.role": STATUS,
    f"{S}.Message.content": outside(
        "agents.controller._run_tool (tool results); prompts hold masked alerts, runbooks "
        "and questions; the assistant's messages are MODEL"
    ),
    f"{S}.Message.tool_calls": model("the tool calls the model asked for"),
    f"{S}.Message.tool_call_id": identifier("the provider's id of a tool call"),
    f"{S}.Message.tool_name": identifier("an MCP server's name for its tool"),
    f"{S}.LLMInteraction.interaction_type": STATUS,
    f"{S}.LLMInteraction.provider": internal("an LLMProvider's name"),
    f"{S}.LLMInteraction.backend": internal("a backend name of llm/registry.py"),
    f"{S}.LLMInteraction.model_name": internal("an LLMProvider's model"),
    f"{S}.LLMInteraction.request_messages": derived("the conversation, as Message keeps it"),
    f"{S}.LLMInteraction.tools": identifier("the MCP tools' names offered to the model"),
    f"{S}.LLMInteraction.response_text": model(),
    f"{S}.LLMInteraction.thinking": model(),
    f"{S}.LLMInteraction.tool_calls": model("the tool calls the model asked for"),
    f"{S}.LLMInteraction.error_code": internal("our classification of a provider's error"),
    f"{S}.LLMInteraction.error_message": outside(
        "sessions.services.records.llm_interaction_create: the provider's own words"
    ),
    f"{S}.MCPInteraction.interaction_type": STATUS,
    f"{S}.MCPInteraction.server_name": internal("an MCP server of tarsy.yaml"),
    f"{S}.MCPInteraction.tool_name": identifier("an MCP server's name for its tool"),
    f"{S}.MCPInteraction.arguments": model("the arguments the model gave the tool"),
    f"{S}.MCPInteraction.result": outside("agents.controller._run_tool (tool_results.mask)"),
    f"{S}.MCPInteraction.available_tools": identifier("an MCP server's names for its tools"),
    f"{S}.SessionEvent.type": STATUS,
    f"{S}.SessionEvent.payload": derived(
        "copies of the fields each event announces; stream chunks are MODEL text"
    ),
    f"{S}.WorkerCluster.host": internal("socket.gethostname() of our worker"),
    f"{S}.MCPServerHealth.server_id": internal("an MCP server of tarsy.yaml"),
    f"{S}.MCPServerHealth.tools": outside(
        "agents.tools.mcp_hub.record_health: descriptions masked, names are IDENTIFIERs"
    ),
    f"{S}.MCPServerHealth.error": outside(
        "agents.tools.mcp_hub.record_health: the server's stderr"
    ),
    f"{S}.ApiToken.token_hash": internal("SHA-256 of a token we generated"),
    f"{S}.ApiToken.prefix": internal("the first characters of a token we generated"),
    f"{S}.SessionSearch.body": derived("the session's masked and model texts"),
    f"{S}.ReviewActivity.actor": WHO,
    f"{S}.ReviewActivity.action": STATUS,
    f"{S}.ReviewActivity.from_status": STATUS,
    f"{S}.ReviewActivity.to_status": STATUS,
    f"{S}.ReviewActivity.quality_rating": internal("one of QualityRating, checked"),
    f"{S}.ReviewActivity.note": derived("a copy of the session's masked action_taken"),
    f"{S}.ReviewActivity.investigation_feedback": derived("a copy of the session's, masked"),
    f"{S}.Chat.created_by": WHO,
    f"{S}.ChatMessage.content": outside("sessions.services.chat.chat_message_send"),
    f"{S}.ChatMessage.author": WHO,
    f"{S}.ChatMessage.status": STATUS,
    f"{S}.ChatMessage.error_message": outside("sessions.services.chat.chat_message_end" + ERROR),
    f"{S}.ChatMessage.cancelled_by": WHO,
    f"{S}.ChatMessage.worker_id": WORKER,
    f"{S}.SessionScore.status": STATUS,
    f"{S}.SessionScore.score_analysis": model(),
    f"{S}.SessionScore.tool_improvement_report": model(),
    f"{S}.SessionScore.failure_tags": internal("only terms of agents.scoring.FAILURE_TAGS"),
    f"{S}.SessionScore.prompt_hash": internal("SHA-256 of the scoring prompt"),
    f"{S}.SessionScore.score_triggered_by": WHO,
    f"{S}.SessionScore.error_message": outside("sessions.services.scoring._end" + ERROR),
    f"{S}.SessionScore.worker_id": WORKER,
    f"{S}.FeedbackReflection.status": STATUS,
    f"{S}.FeedbackReflection.triggered_by": WHO,
    f"{S}.FeedbackReflection.feedback": derived("a copy of the session's, masked"),
    f"{S}.FeedbackReflection.quality_rating": internal("one of QualityRating, checked"),
    f"{S}.FeedbackReflection.error_message": outside("sessions.services.reflection._end" + ERROR),
    f"{S}.FeedbackReflection.worker_id": WORKER,
    f"{S}.SlackMessage.kind": STATUS,
    f"{S}.SlackMessage.status": STATUS,
    f"{S}.SlackMessage.channel": internal("system.slack.channel of tarsy.yaml"),
    f"{S}.SlackMessage.thread_ts": identifier("Slack's id of the alert's message"),
    f"{S}.SlackMessage.ts": identifier("Slack's id of the message we posted"),
    f"{S}.SlackMessage.error": outside("worker.slack.deliver: Slack's answer"),
    # An operator's input in the admin, kept and shown as typed: refused when it looks
    # like a secret, since a masked URL or name would not work.
    "llm.LLMProvider.name": outside("llm.models.LLMProvider.clean (refused)"),
    "llm.LLMProvider.type": internal("one of ProviderType, checked"),
    "llm.LLMProvider.model": outside("llm.models.LLMProvider.clean (refused)"),
    "llm.LLMProvider.api_key_env": outside("llm.models.LLMProvider.clean (refused)"),
    "llm.LLMProvider.base_url": outside("llm.models.LLMProvider.clean (refused)"),
    "llm.LLMProvider.project_env": outside("llm.models.LLMProvider.clean (refused)"),
    "llm.LLMProvider.location_env": outside("llm.models.LLMProvider.clean (refused)"),
    "llm.LLMProvider.native_tools": internal("only names of llm.types.NATIVE_TOOLS, checked"),
    "llm.LLMProvider.options": outside("llm.models.LLMProvider.clean (refused)"),
    # The duplicate-alert cooldown (issue 23).
    f"{S}.AlertFingerprint.fingerprint": internal("a keyed hash (sessions/dedup.py)"),
    f"{S}.AlertRepeat.alert_data": outside("sessions.intake.validate_alert"),
    f"{S}.AlertRepeat.author": WHO,
    # Mid-run steering (issue 23).
    f"{S}.SteeringNote.text": outside("sessions.services.steering.steering_note_add"),
    f"{S}.SteeringNote.author": WHO,
}


def our_models() -> Iterator[type[models.Model]]:
    """The concrete models of the apps whose package is a folder of this repository."""
    for config in apps.get_app_configs():
        if (settings.BASE_DIR / config.name.split(".")[0]).is_dir():
            yield from (m for m in config.get_models() if not m._meta.proxy)


def text_fields() -> dict[str, tuple[type[models.Model], str]]:
    """``app_label.Model.field`` → (model, field name), for every field that holds text."""
    return {
        f"{model._meta.label}.{field.name}": (model, field.name)
        for model in our_models()
        for field in model._meta.concrete_fields
        if isinstance(field, models.CharField | models.TextField | models.JSONField)
    }


def test_every_text_field_is_classified():
    unclassified = sorted(set(text_fields()) - set(FIELDS))
    assert not unclassified, (
        f"classify {unclassified} in FIELDS (tests/test_outside_fields.py): where does its "
        "text come from? Outside text must be masked where it enters, and planted by a "
        "scenario here."
    )


def test_no_classified_field_has_gone():
    gone = sorted(set(FIELDS) - set(text_fields()))
    assert not gone, f"{gone} no longer exist: remove them from FIELDS"


# --- the scenarios that plant canaries --------------------------------------------------------


def plants(*labels: str) -> Callable:
    """Marks a scenario as planting canaries in these fields, through their entry points."""

    def mark(test: Callable) -> Callable:
        test.plants = labels
        return test

    return mark


def planted() -> set[str]:
    return {label for test in list(globals().values()) for label in getattr(test, "plants", ())}


def test_every_outside_field_is_planted_by_a_scenario():
    outside_fields = {label for label, source in FIELDS.items() if source.kind == OUTSIDE}
    assert sorted(outside_fields - planted()) == []
    assert sorted(planted() - outside_fields) == []


def stored_values(label: str) -> list[str]:
    model_class, name = text_fields()[label]
    return [
        value if isinstance(value, str) else json.dumps(value)
        for value in model_class.objects.values_list(name, flat=True)
    ]


def assert_arrived_masked(*labels: str) -> None:
    """The canary reached each field, masked: the scenario planted what it says."""
    for label in labels:
        values = stored_values(label)
        assert any(MASKED in value for value in values), f"{label}: {values}"


def database_leaks() -> list[str]:
    return [
        f"the database: {label}"
        for label in text_fields()
        if any(CANARY in value for value in stored_values(label))
    ]


def api_leaks(client: Client, token: str) -> list[str]:
    """Every GET of the REST API about the sessions there are."""
    paths = [
        "/api/v1/sessions",
        "/api/v1/sessions/active",
        "/api/v1/sessions/filter-options",
        "/api/v1/system/mcp-servers",
        "/api/v1/system/warnings",
        *(
            f"/api/v1/sessions/triage/{group}"
            for group in ("investigating", "needs_review", "in_progress", "reviewed")
        ),
    ]
    for session_id in AlertSession.objects.values_list("id", flat=True):
        paths += [
            f"/api/v1/sessions/{session_id}{tail}"
            for tail in ("", "/summary", "/status", "/timeline", "/review-activity", "/score")
        ]
    return _leaks(client, paths, HTTP_AUTHORIZATION=f"Bearer {token}")


def page_leaks(browser: Client) -> list[str]:
    """Every page about the sessions there are, and the parts htmx loads into them."""
    paths = ["/", "/triage/", "/system/", "/usage/"]
    for session_id in AlertSession.objects.values_list("id", flat=True):
        paths += [
            f"/sessions/{session_id}/",
            f"/sessions/{session_id}/trace/",
            f"/sessions/{session_id}/trace/marks/",
            f"/sessions/{session_id}/chat/",
            f"/sessions/new/?from={session_id}",
        ]
        paths += [
            f"/sessions/{session_id}/trace/llm/{i}/"
            for i in LLMInteraction.objects.filter(session_id=session_id).values_list(
                "id", flat=True
            )
        ]
        paths += [
            f"/sessions/{session_id}/trace/mcp/{i}/"
            for i in MCPInteraction.objects.filter(session_id=session_id).values_list(
                "id", flat=True
            )
        ]
    paths += [f"/items/{i}/body/?all=1" for i in TimelineEvent.objects.values_list("id", flat=True)]
    # The memory page, and each memory's (with its audit history).
    paths += ["/memories/?deprecated=all"]
    paths += [
        f"/memories/{ref}/"
        for ref in MemoryEvent.objects.values_list("memory_ref", flat=True).distinct()
    ]
    return _leaks(browser, paths)


def _leaks(client: Client, paths: list[str], **headers: str) -> list[str]:
    found = []
    for path in paths:
        response = client.get(path, **headers)
        # A session nobody has scored has no score; everything else must be there to read.
        assert response.status_code == 200 or path.endswith("/score"), (path, response)
        if CANARY in response.content.decode():
            found.append(path)
    return found


def assert_canary_nowhere(client: Client, token: str, browser: Client) -> None:
    assert database_leaks() + api_leaks(client, token) + page_leaks(browser) == []


def post_alert(client: Client, body: dict[str, Any], **headers: str):
    return client.post(
        "/api/v1/alerts", data=json.dumps(body), content_type="application/json", **headers
    )


def bearer(token: str) -> dict[str, str]:
    return {"HTTP_AUTHORIZATION": f"Bearer {token}"}


def csrf_token(browser: Client) -> str:
    browser.get("/sessions/new/")
    return browser.cookies["csrftoken"].value


@plants(
    f"{S}.AlertSession.alert_data",
    f"{S}.AlertSession.runbook",
    f"{S}.AlertSession.slack_message_fingerprint",
    f"{S}.AlertSession.mcp_selection",
)
def test_an_alert_is_masked_before_it_is_stored(client, api_token, browser_client):
    response = post_alert(
        client,
        {
            "data": f"pod payments-api crash-loops; its log says {PASSWORD}",
            "runbook": f"Restart it with GITHUB_TOKEN={TOKEN} set",
            "slack_message_fingerprint": f"[FIRING:1] db login {PASSWORD}",
            # Never listed by a worker, the server takes any tool name.
            "mcp": {"servers": [{"name": "kubernetes", "tools": [TOKEN]}]},
        },
        **bearer(api_token),
    )
    assert response.status_code == 202, response.content
    assert_arrived_masked(
        f"{S}.AlertSession.alert_data",
        f"{S}.AlertSession.runbook",
        f"{S}.AlertSession.slack_message_fingerprint",
        f"{S}.AlertSession.mcp_selection",
    )
    assert_canary_nowhere(client, api_token, browser_client)


@plants(f"{S}.AlertSession.alert_data", f"{S}.AlertSession.slack_message_fingerprint")
def test_the_web_form_masks_an_alert_the_same_way(client, api_token, browser_client, tarsy_config):
    # The form offers a fingerprint only when Slack is on.
    tarsy_config(
        lambda config: config.setdefault("system", {}).update(
            slack={"enabled": True, "channel": "C0ALERTS"}
        )
    )
    response = browser_client.post(
        "/sessions/new/",
        {
            "csrfmiddlewaretoken": csrf_token(browser_client),
            "alert_type": "kubernetes",
            "data": f"pod payments-api crash-loops; {PASSWORD}",
            "slack_message_fingerprint": f"alert with {TOKEN}",
        },
    )
    assert response.status_code == 302, response.content.decode()[-2000:]
    assert_arrived_masked(
        f"{S}.AlertSession.alert_data", f"{S}.AlertSession.slack_message_fingerprint"
    )
    assert_canary_nowhere(client, api_token, browser_client)


@plants(f"{S}.AlertRepeat.alert_data", f"{S}.AlertRepeat.author")
def test_a_repeated_alert_is_kept_masked(client, api_token, browser_client, settings, tarsy_config):
    settings.TARSY_TRUSTED_PROXIES = ["127.0.0.1"]  # the test client's address
    tarsy_config(lambda config: config["defaults"].update(dedup={"enabled": True}))
    proxy = {"HTTP_X_FORWARDED_USER": TOKEN}
    body = {"data": f"pod payments-api crash-loops; its log says {PASSWORD}"}
    first = post_alert(client, body, **proxy)
    again = post_alert(client, body, **proxy)
    assert again.json()["deduplicated"] is True, again.content
    assert again.json()["session_id"] == first.json()["session_id"]
    assert_arrived_masked(f"{S}.AlertRepeat.alert_data", f"{S}.AlertRepeat.author")
    assert_canary_nowhere(client, api_token, browser_client)


@plants(f"{S}.SteeringNote.text", f"{S}.SteeringNote.author")
def test_a_steering_note_and_its_author_are_kept_masked(
    client, api_token, browser_client, settings
):
    settings.TARSY_TRUSTED_PROXIES = ["127.0.0.1"]  # the test client's address
    session, _ = running_session()
    response = client.post(
        f"/api/v1/sessions/{session.id}/steer",
        data=json.dumps({"text": f"the pool's config says {PASSWORD}"}),
        content_type="application/json",
        HTTP_X_FORWARDED_USER=TOKEN,
    )
    assert response.status_code == 202, response.content
    assert_arrived_masked(f"{S}.SteeringNote.text", f"{S}.SteeringNote.author")
    assert_canary_nowhere(client, api_token, browser_client)


@plants(f"{S}.AlertSession.runbook_url")
def test_a_runbook_url_holding_a_secret_is_refused(client, api_token, browser_client):
    url = f"https://github.com/org/runbooks/blob/main/pods.md?token={TOKEN}"
    response = post_alert(client, {"data": "pod down", "runbook": url}, **bearer(api_token))
    assert response.status_code == 400
    assert "looks like a secret" in response.json()["message"]
    assert CANARY not in response.content.decode()
    assert not AlertSession.objects.exists()
    assert_canary_nowhere(client, api_token, browser_client)


@plants(
    f"{S}.AlertSession.author",
    f"{S}.AlertSession.cancelled_by",
    f"{S}.AlertSession.cancel_reason",
    f"{S}.AlertSession.assignee",
    f"{S}.AlertSession.action_taken",
    f"{S}.AlertSession.investigation_feedback",
    f"{S}.AlertSession.feedback_edited_by",
    f"{S}.ReviewActivity.actor",
    f"{S}.Chat.created_by",
    f"{S}.ChatMessage.content",
    f"{S}.ChatMessage.author",
    f"{S}.ChatMessage.cancelled_by",
    f"{S}.SessionScore.score_triggered_by",
    f"{S}.FeedbackReflection.triggered_by",
    f"{S}.TimelineEvent.content",
)
def test_who_acts_through_a_trusted_proxy_and_what_they_write_are_masked(
    client, api_token, browser_client, settings, tarsy_config
):
    settings.TARSY_TRUSTED_PROXIES = ["127.0.0.1"]  # the test client's address
    # Memory on: the review's feedback queues a feedback Reflector, named for its reviewer.
    tarsy_config(lambda config: config["defaults"].update(memory={"enabled": True}))
    proxy = {"HTTP_X_FORWARDED_USER": TOKEN}

    def send(method: str, path: str, body: dict[str, Any]) -> None:
        response = getattr(client, method)(
            f"/api/v1{path}", data=json.dumps(body), content_type="application/json", **proxy
        )
        assert response.status_code in (200, 202), (path, response.content)

    response = post_alert(client, {"data": "pod down"}, **proxy)
    session_id = response.json()["session_id"]
    send("post", f"/sessions/{session_id}/cancel", {"reason": f"duplicate; {PASSWORD}"})
    notes = {"action_taken": f"rotated {PASSWORD}", "investigation_feedback": f"saw {TOKEN}"}
    for change in (
        {"action": "reopen"},  # a cancelled session starts reviewed
        {"action": "claim"},
        {"action": "complete", "quality_rating": "accurate", **notes},
        {"action": "update_feedback", **notes},
    ):
        send("patch", "/sessions/review", {"session_ids": [session_id], **change})
    send("post", f"/sessions/{session_id}/chat/messages", {"content": f"why? {PASSWORD}"})
    send("post", f"/sessions/{session_id}/cancel", {})  # stops the queued answer
    send("post", f"/sessions/{session_id}/score", {})

    assert ChatMessage.objects.get().status == "cancelled"
    assert_arrived_masked(
        *test_who_acts_through_a_trusted_proxy_and_what_they_write_are_masked.plants
    )
    assert_canary_nowhere(client, api_token, browser_client)


@plants(f"{S}.AgentExecution.cancel_reason", f"{S}.AlertSession.cancel_reason")
def test_cancel_reasons_from_the_api_and_the_page_are_masked(client, api_token, browser_client):
    session, lease = running_session()
    stage = services.stage_start(lease=lease, name="investigation", index=0)
    execution = services.execution_start(
        lease=lease,
        stage=stage,
        agent_name="KubernetesAgent",
        agent_index=1,
        llm_backend="scripted",
        llm_provider="demo",
        model_name="demo",
    )
    response = client.post(
        f"/api/v1/sessions/{session.id}/executions/{execution.id}/cancel",
        data=json.dumps({"reason": f"stuck on {PASSWORD}"}),
        content_type="application/json",
        **bearer(api_token),
    )
    assert response.status_code == 200, response.content
    response = browser_client.post(
        f"/sessions/{session.id}/cancel/",
        {"reason": f"wrong alert {TOKEN}"},
        HTTP_X_CSRFTOKEN=csrf_token(browser_client),
        HTTP_HX_REQUEST="true",
    )
    assert response.status_code == 200, response.content
    assert AlertSession.objects.get().status == "cancelling"
    assert_arrived_masked(f"{S}.AgentExecution.cancel_reason", f"{S}.AlertSession.cancel_reason")
    assert_canary_nowhere(client, api_token, browser_client)


@plants(
    f"{S}.AlertSession.error_message",
    f"{S}.AlertSession.executive_summary_error",
    f"{S}.Stage.error_message",
    f"{S}.AgentExecution.error_message",
    f"{S}.LLMInteraction.error_message",
    f"{S}.ChatMessage.error_message",
    f"{S}.SessionScore.error_message",
    f"{S}.FeedbackReflection.error_message",
)
def test_errors_are_masked_where_they_are_stored(client, api_token, browser_client, tarsy_config):
    """What the worker writes when things fail, through the services it calls: each error
    quotes what a server or an exception said."""
    session, lease = running_session()
    stage = services.stage_start(lease=lease, name="investigation", index=0)
    execution = services.execution_start(
        lease=lease,
        stage=stage,
        agent_name="KubernetesAgent",
        agent_index=1,
        llm_backend="scripted",
        llm_provider="demo",
        model_name="demo",
    )
    services.llm_interaction_create(
        lease=lease,
        execution=execution,
        provider="demo",
        backend="scripted",
        error_code="auth_error",
        error_message=f"Incorrect API key provided: {TOKEN}",
    )
    services.execution_finish(
        lease=lease, execution=execution, status="failed", error_message=f"boom: {PASSWORD}"
    )
    services.stage_finish(
        lease=lease, stage=stage, status="failed", error_message=f"agent failed: {PASSWORD}"
    )
    services.session_end(
        lease=lease,
        status="failed",
        error_message=f"Internal error: ValueError: {PASSWORD}",
        executive_summary_error=f"provider said {TOKEN}",
        explain=True,
    )
    session.refresh_from_db()
    message = services.chat_message_send(session=session, content="why?", author="alice")
    chat_lease = services.chat_message_claim(message_id=message.id, worker_id="test-worker")
    services.chat_message_end(
        lease=chat_lease, status="failed", error_message=f"MCP stderr: {PASSWORD}", explain=True
    )
    score = services.score_request(session_id=session.id, triggered_by="alice")
    score_lease = services.score_claim(score_id=score.id, worker_id="test-worker")
    score_services.score_fail(
        lease=score_lease, execution=None, error_message=f"Internal error: {TOKEN}"
    )
    tarsy_config(lambda config: config["defaults"].update(memory={"enabled": True}))
    services.review_apply(
        session_id=session.id,
        change=services.ReviewChange(
            action="complete", quality_rating="accurate", investigation_feedback="limits"
        ),
        actor="alice",
    )
    reflection = FeedbackReflection.objects.get(session=session)
    reflection_lease = services.feedback_reflection_claim(
        reflection_id=reflection.id, worker_id="test-worker"
    )
    feedback_reflection_end(
        lease=reflection_lease, status="failed", error_message=f"Internal error: {TOKEN}"
    )
    assert_arrived_masked(*test_errors_are_masked_where_they_are_stored.plants)
    assert_canary_nowhere(client, api_token, browser_client)


@plants(f"{S}.MCPServerHealth.tools", f"{S}.MCPServerHealth.error")
@pytest.mark.django_db(transaction=True)  # record_health closes its connection, as a thread
def test_an_mcp_servers_listing_and_stderr_are_masked(client, api_token, browser_client):
    tool = Tool(
        name="get_pods", description=f"Lists pods (signs in with {PASSWORD})", inputSchema={}
    )
    record_health("kubernetes", tools={tool.name: tool})
    record_health("github", error=f"server exited; stderr: GITHUB_TOKEN={TOKEN}")
    assert_arrived_masked(f"{S}.MCPServerHealth.tools", f"{S}.MCPServerHealth.error")
    assert_canary_nowhere(client, api_token, browser_client)


@plants(
    f"{S}.MCPInteraction.result",
    f"{S}.Message.content",
    f"{S}.TimelineEvent.content",
    f"{S}.LLMInteraction.error_message",
)
@pytest.mark.django_db(transaction=True)
def test_the_worker_masks_tool_results_and_provider_errors(
    client, api_token, browser_client, scripted_provider, write_script, tarsy_config
):
    """A real session on the scripted model: its provider fails with an error quoting a
    key, the fallback calls a real MCP server whose tool returns a Kubernetes Secret."""

    def change(config: dict) -> None:
        config["mcp_servers"]["planted"] = {
            "transport": {
                "type": "stdio",
                "command": "{{.PYTHON}}",
                "args": [str(settings.BASE_DIR / "tests" / "e2e" / "planted_mcp_server.py")],
            }
        }
        config["agents"]["KubernetesAgent"]["mcp_servers"] = ["planted"]
        config["defaults"]["fallback_providers"] = ["backup"]

    tarsy_config(change)
    scripted_provider(
        [{"error": {"code": "auth_error", "message": f"bad key: Authorization: Bearer {TOKEN}"}}]
    )
    LLMProvider.objects.create(
        name="backup",
        type="scripted",
        model="backup-model",
        options={
            "script": write_script(
                [
                    {"tool_calls": [{"name": "planted.get_secret", "arguments": {"name": "db"}}]},
                    {"text": "The database credentials were rotated."},
                ]
            )
        },
    )
    response = post_alert(client, {"data": "pod payments-api crash-loops"}, **bearer(api_token))
    assert run_session(response.json()["session_id"]) == "completed"
    assert TimelineEvent.objects.filter(event_type="provider_fallback").exists()
    assert_arrived_masked(*test_the_worker_masks_tool_results_and_provider_errors.plants)
    assert_canary_nowhere(client, api_token, browser_client)


@plants(f"{S}.SlackMessage.error")
def test_slacks_answer_is_masked(client, api_token, browser_client, tarsy_config, monkeypatch):
    stand_in = LocalSlack(fail_with=f"invalid_auth {PASSWORD}")
    try:
        tarsy_config(
            lambda config: config.setdefault("system", {}).update(
                slack={
                    "enabled": True,
                    "token_env": "TEST_SLACK_TOKEN",
                    "channel": "C0ALERTS",
                    "api_url": stand_in.base_url,
                }
            )
        )
        monkeypatch.setenv("TEST_SLACK_TOKEN", "xoxb-test")
        response = post_alert(
            client, {"data": "pod down", "slack_message_fingerprint": "7f3a"}, **bearer(api_token)
        )
        message = slack.deliver(response.json()["session_id"], SlackMessage.Kind.START)
    finally:
        stand_in.close()
    assert message.status == "failed"
    assert_arrived_masked(f"{S}.SlackMessage.error")
    assert_canary_nowhere(client, api_token, browser_client)


@plants(*(label for label in FIELDS if label.startswith("llm.") and FIELDS[label].kind == OUTSIDE))
def test_the_admin_refuses_a_provider_holding_a_secret(client, api_token, browser_client):
    admin = Client()
    admin.force_login(get_user_model().objects.create_superuser("root", "", None))
    typed = {
        "name": TOKEN,  # a valid slug
        "model": f"gpt {PASSWORD}",
        "api_key_env": TOKEN,  # a valid variable name: the key pasted in its place
        "base_url": "https://user:Zq7xUrlPass@llm.example.com/v1",
        "project_env": secrets_corpus.LINES["stripe_key"][1],
        "location_env": TOKEN,
        "options": json.dumps({"api_key": "Zq7xOptionsKey"}),
    }
    response = admin.post(
        "/admin/llm/llmprovider/add/",
        {"type": "openai", "native_tools": "[]", "enabled": "on", **typed},
    )
    assert response.status_code == 200  # the form again, with what is wrong
    errors = response.context["adminform"].form.errors
    assert sorted(errors) == sorted(typed)
    assert all("looks like it holds a secret" in " ".join(errors[field]) for field in typed)
    assert not LLMProvider.objects.exists()
    assert CANARY not in admin.get("/admin/llm/llmprovider/").content.decode()
    assert_canary_nowhere(client, api_token, browser_client)


@plants(f"{S}.MemoryEvent.actor")
def test_who_rates_a_sessions_lessons_through_a_trusted_proxy_is_masked_in_their_audit(
    client, api_token, browser_client, settings, user
):
    from llm.embeddings import LocalHashingEmbedder

    settings.TARSY_TRUSTED_PROXIES = ["127.0.0.1"]  # the test client's address
    proxy = {"HTTP_X_FORWARDED_USER": TOKEN}
    session_id = post_alert(client, {"data": "pod down"}, **proxy).json()["session_id"]
    memory = services.memory_create(
        embedder=LocalHashingEmbedder(),
        content=f"the registry wants {PASSWORD}",
        category="semantic",
        valence="positive",
        source_session=AlertSession.objects.get(id=session_id),
    )
    cancelled = client.post(
        f"/api/v1/sessions/{session_id}/cancel", data="{}", content_type="application/json", **proxy
    )
    assert cancelled.status_code == 200, cancelled.content
    for change in (
        {"action": "reopen"},  # a cancelled session starts reviewed
        {"action": "claim"},
        {"action": "complete", "quality_rating": "accurate"},
    ):
        response = client.patch(
            "/api/v1/sessions/review",
            data=json.dumps({"session_ids": [session_id], **change}),
            content_type="application/json",
            **proxy,
        )
        assert response.status_code == 200, response.content
    # A staff member's edit through the API: the new content is masked in the audit too.
    user.is_staff = True
    user.save()
    edited = client.patch(
        f"/api/v1/memories/{memory.id}",
        data=json.dumps({"content": f"now {PASSWORD}"}),
        content_type="application/json",
        **bearer(api_token),
    )
    assert edited.status_code == 200, edited.content
    assert MemoryEvent.objects.filter(memory=memory, kind="review_adjusted").exists()
    assert_arrived_masked(f"{S}.MemoryEvent.actor", f"{S}.MemoryEvent.details")
    assert_canary_nowhere(client, api_token, browser_client)


def test_the_canaries_are_unambiguous_secrets():
    """The scenarios depend on the masking recognising these, however it changes."""
    from masking import mask_alert, mask_text

    for canary in (PASSWORD, TOKEN, f"GITHUB_TOKEN={TOKEN}"):
        assert CANARY not in mask_alert(canary)
        assert CANARY not in mask_text(canary)
