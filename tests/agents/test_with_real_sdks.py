"""Agents on real SDKs against wire-format fakes: OpenAI answers 401 and Gemini
(google-native) takes over; an agent's native tools reach Gemini's request."""

from __future__ import annotations

import pytest

from llm.models import LLMProvider
from sessions import services
from sessions.models import LLMInteraction, TimelineEvent
from tests.llm.conftest import fake_gemini  # noqa: F401 - fixture
from tests.llm.fakes import gemini
from tests.llm.fakes.fixtures import openai_server  # noqa: F401 - fixture
from tests.llm.fakes.openai_chat import openai_error
from worker.tasks import run_session

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_401_on_openai_falls_back_to_gemini(
    openai_server,  # noqa: F811 - fixture
    fake_gemini,  # noqa: F811 - fixture
    tarsy_config,
    scripted_summaries,
    monkeypatch,
):
    monkeypatch.setenv("TEST_OPENAI_KEY", "sk-test-not-real")
    monkeypatch.setenv("TEST_GEMINI_KEY", "gemini-test-not-real")
    openai_server.enqueue(openai_error(401, "Incorrect API key provided"))
    fake_gemini.enqueue(
        gemini.stream(
            gemini.response(gemini.thought("The pods first.")),
            gemini.response(
                gemini.function_call("kubernetes__get_pods", {"namespace": "payments"}),
                usage_metadata=gemini.usage(50, 10, thoughts=5),
            ),
        ),
        gemini.stream(
            gemini.response(gemini.text("payments-api is in CrashLoopBackOff.")),
            gemini.response(gemini.text(""), usage_metadata=gemini.usage(90, 12)),
        ),
    )
    LLMProvider.objects.create(
        name="openai",
        type="openai",
        model="gpt-fake",
        api_key_env="TEST_OPENAI_KEY",
        base_url=openai_server.base_url,
        is_default=True,
    )
    LLMProvider.objects.create(
        name="gemini",
        type="google",
        model="gemini-2.5-flash",
        api_key_env="TEST_GEMINI_KEY",
        base_url=fake_gemini.base_url,
    )

    def fallback_to_gemini(config):
        config["defaults"]["fallback_providers"] = [
            {"provider": "gemini", "backend": "google-native"}
        ]
        scripted_summaries(config)

    tarsy_config(fallback_to_gemini)
    session = services.session_create(
        alert_type="kubernetes",
        alert_data="namespace: payments",
        chain_id="kubernetes-investigation",
        author="t",
    )

    assert run_session(str(session.id)) == "completed"

    session.refresh_from_db()
    assert session.final_analysis == "payments-api is in CrashLoopBackOff."
    assert len(openai_server.requests) == 1  # auth errors are not retried
    fallback = TimelineEvent.objects.get(session=session, event_type="provider_fallback")
    assert "'openai' (langchain, gpt-fake) failed" in fallback.content
    assert "[auth_error]" in fallback.content
    assert "sk-test-not-real" not in fallback.content
    tool = TimelineEvent.objects.get(session=session, event_type="llm_tool_call")
    assert tool.metadata["tool_name"] == "kubernetes.get_pods"
    assert "payments-api" in tool.content  # the demo MCP server really answered
    # Gemini got the tool's result back as a functionResponse on its second turn.
    second = fake_gemini.bodies[1]
    responses = [
        part["functionResponse"]
        for content in second["contents"]
        for part in content["parts"]
        if "functionResponse" in part
    ]
    assert responses[0]["name"] == "kubernetes__get_pods"
    assert "payments-api" in str(responses[0]["response"])
    calls = list(
        LLMInteraction.objects.filter(session=session)
        .exclude(interaction_type="executive_summary")
        .values_list("provider", "backend", "error_code")
    )
    assert calls == [
        ("openai", "langchain", "auth_error"),
        ("gemini", "google-native", ""),
        ("gemini", "google-native", ""),
    ]
    execution = session.executions.get(stage__stage_type="investigation")
    assert (execution.llm_provider, execution.original_llm_provider) == ("gemini", "openai")


def test_an_agents_native_tools_reach_gemini_when_it_has_no_mcp_tools(
    fake_gemini,  # noqa: F811 - fixture
    tarsy_config,
    scripted_summaries,
    monkeypatch,
):
    monkeypatch.setenv("TEST_GEMINI_KEY", "gemini-test-not-real")
    fake_gemini.enqueue(gemini.stream(gemini.response(gemini.text("Searched; nothing wrong."))))
    LLMProvider.objects.create(
        name="gemini",
        type="google",
        model="gemini-2.5-flash",
        api_key_env="TEST_GEMINI_KEY",
        base_url=fake_gemini.base_url,
        is_default=True,
    )

    def no_mcp_but_search(config):
        config["defaults"]["llm_backend"] = "google-native"
        agent = config["agents"]["KubernetesAgent"]
        agent["mcp_servers"] = []
        agent["native_tools"] = ["google_search"]
        # Memory's tools are function tools too: native tools reach Gemini without any.
        config["defaults"]["memory"] = {"enabled": False}
        scripted_summaries(config)

    tarsy_config(no_mcp_but_search)
    session = services.session_create(
        alert_type="kubernetes", alert_data="d", chain_id="kubernetes-investigation", author="t"
    )
    assert run_session(str(session.id)) == "completed"
    [body] = fake_gemini.bodies
    tools = body.get("tools") or []
    assert any("googleSearch" in tool or "google_search" in tool for tool in tools), tools


def test_an_unreachable_base_url_is_named_in_the_error(tarsy_config, monkeypatch):
    from llm.registry import get_backend
    from tests.e2e.harness import free_port
    from tests.llm.conftest import Sleeps

    monkeypatch.setenv("TEST_OPENAI_KEY", "sk-test-not-real")
    monkeypatch.setattr(get_backend("langchain"), "_sleep", Sleeps())  # retries never wait
    url = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    LLMProvider.objects.create(
        name="local-vllm",
        type="openai",
        model="qwen",
        api_key_env="TEST_OPENAI_KEY",
        base_url=url,
        is_default=True,
    )
    session = services.session_create(
        alert_type="kubernetes",
        alert_data="pod down",
        chain_id="kubernetes-investigation",
        author="t",
    )
    assert run_session(str(session.id)) == "failed"
    session.refresh_from_db()
    for text in (
        session.error_message,
        TimelineEvent.objects.filter(session=session, event_type="error").first().content,
    ):
        assert "[connection_error]" in text
        assert "'local-vllm'" in text
        assert f"could not connect to {url}" in text
