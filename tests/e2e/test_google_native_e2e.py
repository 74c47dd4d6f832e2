"""An investigation on the ``google-native`` backend, end to end.

Real daphne and qcluster processes, the real google-genai SDK in the worker talking
HTTP to the fake Gemini API (a process of its own), the demo MCP server answering the
tool calls, and headless Chromium watching the thinking stream in before the answer.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.harness import ROOT, deployment, fake_gemini, launch_browser, log_in
from tests.llm.fakes import gemini as g

pytestmark = pytest.mark.e2e

MODEL = "gemini-2.5-flash"
KEY_ENV = "E2E_GEMINI_KEY"
KEY = "e2e-gemini-key-not-a-secret-7f3a"
SIGNATURE = b"e2e-turn-1-signature:\xfb\xff\xfe\x00"  # base64 and base64url differ here

ALERT = """alert: PodCrashLooping
namespace: payments
deployment: payments-api
message: payments-api pods keep restarting"""

# Turn 1: thinking streamed slowly (8 x 0.25 s), a sentence, then two parallel calls.
THOUGHTS_1 = [
    "The alert says payments-api pods keep restarting in the payments namespace. ",
    "A crash loop can come from a bad image, a failing probe or a missing secret. ",
    "Before guessing I should see the pods themselves: ",
    "their restart counts and how long ago they last crashed. ",
    "The namespace events will show probe failures and back-offs, ",
    "and whether a new replica set was rolled out just before. ",
    "Both questions are independent, ",
    "so I can ask for the pods and the events at the same time.",
]
TEXT_1 = "I'll look at the pods and the recent events in payments first."
# Turn 2: more thinking, then the final answer in three chunks.
THOUGHTS_2 = [
    "Both payments-api pods are in CrashLoopBackOff after the 2.14.0 rollout, ",
    "and the events show back-offs but no image pull errors. ",
    "The container starts and exits: configuration it needs at start-up is missing. ",
    "DATABASE_PASSWORD was dropped from the deployment in this release.",
]
FINAL_PARTS = [
    "Root cause: payments-api crash-loops since the 2.14.0 rollout ",
    "because the container exits at start-up: DATABASE_PASSWORD is not set. ",
    "Fix: restore the DATABASE_PASSWORD secret reference on deployment/payments-api.",
]
FINAL_TEXT = "".join(FINAL_PARTS)
CALLS = [
    ("kubernetes__get_pods", {"namespace": "payments"}),
    ("kubernetes__get_events", {"namespace": "payments"}),
]
USAGE_1 = g.usage(1200, 45, thoughts=310)
USAGE_2 = g.usage(2600, 120, thoughts=420)
USAGE_3 = g.usage(400, 40)
# The executive summary that ends every session: one more call, no tools.
SUMMARY = "payments-api crash-loops since the 2.14.0 rollout because DATABASE_PASSWORD is unset."


def gemini_script() -> list[dict[str, Any]]:
    turn_1 = [
        *(g.response(g.thought(part), model=MODEL) for part in THOUGHTS_1),
        g.response(g.text(TEXT_1), model=MODEL),
        g.response(
            # Gemini 2.5 signs the first function call of a step and sends no call ids.
            g.function_call(CALLS[0][0], CALLS[0][1], signature=SIGNATURE),
            g.function_call(CALLS[1][0], CALLS[1][1]),
            finish_reason="STOP",
            usage_metadata=USAGE_1,
            model=MODEL,
        ),
    ]
    turn_2 = [
        *(g.response(g.thought(part), model=MODEL) for part in THOUGHTS_2),
        *(g.response(g.text(part), model=MODEL) for part in FINAL_PARTS[:-1]),
        g.response(
            g.text(FINAL_PARTS[-1]), finish_reason="STOP", usage_metadata=USAGE_2, model=MODEL
        ),
    ]
    summary = [
        g.response(g.text(SUMMARY), finish_reason="STOP", usage_metadata=USAGE_3, model=MODEL)
    ]
    return [
        {"chunks": turn_1, "delay": [0.25] * len(THOUGHTS_1) + [0.1, 0.1]},
        {"chunks": turn_2, "delay": [0.25] * len(THOUGHTS_2) + [0.1] * len(FINAL_PARTS)},
        {"chunks": summary, "delay": 0.05},
    ]


def write_config(tmp_path: Path) -> Path:
    """The bundled tarsy.yaml with every agent on the google-native backend."""
    config = yaml.safe_load((ROOT / "config" / "tarsy.yaml").read_text())
    config["defaults"]["llm_backend"] = "google-native"
    path = tmp_path / "tarsy.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


# The first thinking item that is streaming with text, while the session is still
# running and before any final analysis exists: streamed, not loaded afterwards.
THINKING_STREAMING = """() => {
  const status = document.querySelector('#session-status');
  if (!status || status.dataset.status === 'completed') return null;
  if (document.querySelector('#timeline .item.final_analysis')) return null;
  for (const item of document.querySelectorAll(
      '#timeline .item.llm_thinking[data-status="streaming"]')) {
    const text = item.querySelector('.text.thinking').textContent.trim();
    if (text) return {id: item.id, text: text};
  }
  return null;
}"""

# The same item, still streaming and still before the answer, with more text than before.
THINKING_GREW = """([id, before]) => {
  const status = document.querySelector('#session-status');
  if (!status || status.dataset.status === 'completed') return null;
  if (document.querySelector('#timeline .item.final_analysis')) return null;
  const item = document.getElementById(id);
  if (!item || item.dataset.status !== 'streaming') return null;
  const text = item.querySelector('.text.thinking').textContent.trim();
  return text.length > before.length ? text : null;
}"""


def field(mapping: dict[str, Any], camel: str) -> Any:
    """A request field under either spelling: the SDK sends some nested keys snake_case."""
    snake = "".join(f"_{c.lower()}" if c.isupper() else c for c in camel)
    return mapping.get(camel, mapping.get(snake))


def recorded_interactions(tarsy) -> list[dict[str, Any]]:
    code = (
        "import json\nfrom sessions.models import LLMInteraction\n"
        "print(json.dumps(list(LLMInteraction.objects.order_by('id').values("
        "'backend', 'provider', 'model_name', 'thinking', 'response_text', "
        "'input_tokens', 'output_tokens', 'thinking_tokens', 'total_tokens', 'error_code'))))\n"
    )
    return json.loads(tarsy.manage("shell", "-c", code).strip().splitlines()[-1])


def test_google_native_investigation_streams_thinking_live(tmp_path, playwright):
    with fake_gemini(tmp_path, gemini_script()) as gemini:
        provider = {
            "name": "gemini",
            "type": "google",
            "model": MODEL,
            "api_key_env": KEY_ENV,
            "base_url": gemini.url,
            "is_default": True,
        }
        extra_env = {"TARSY_CONFIG": str(write_config(tmp_path)), KEY_ENV: KEY}
        with deployment(tmp_path, provider=provider, extra_env=extra_env) as tarsy:
            browser = launch_browser(playwright)
            page = browser.new_page()
            try:
                log_in(page, tarsy.base_url)
                assert page.locator("#demo-banner").count() == 0

                page.click("text=Submit alert")
                page.select_option("#id_alert_type", "PodCrashLooping")
                page.fill("#id_data", ALERT)
                page.click("#alert-form button[type=submit]")
                page.wait_for_url("**/sessions/*/")
                page.wait_for_selector('#live-state[data-state="live"]', timeout=30_000)

                # Thinking arrives chunk by chunk while the session runs, before the answer.
                seen = page.wait_for_function(
                    THINKING_STREAMING, timeout=60_000, polling=50
                ).json_value()
                thoughts = ("".join(THOUGHTS_1).strip(), "".join(THOUGHTS_2).strip())
                assert seen["text"] in thoughts[0] or seen["text"] in thoughts[1]
                grown = page.wait_for_function(
                    THINKING_GREW, arg=[seen["id"], seen["text"]], timeout=30_000, polling=50
                ).json_value()
                assert grown.startswith(seen["text"])

                page.wait_for_selector('#session-status[data-status="completed"]', timeout=60_000)
                timeline = page.locator("#timeline .item")
                assert timeline.evaluate_all("items => items.map(i => i.dataset.eventType)") == [
                    "llm_thinking",
                    "llm_response",
                    "llm_tool_call",
                    "llm_tool_call",
                    "llm_thinking",
                    "final_analysis",
                    "executive_summary",
                ]
                assert page.locator('#timeline .item[data-status="streaming"]').count() == 0

                thinking = page.locator("#timeline .item.llm_thinking .text.thinking")
                assert [t.strip() for t in thinking.all_text_contents()] == list(thoughts)
                assert TEXT_1 in page.text_content("#timeline .item.llm_response")
                final = page.text_content("#timeline .item.final_analysis .text").strip()
                assert final == FINAL_TEXT
                assert "payments-api" in final
                assert "DATABASE_PASSWORD" in final

                # Both calls ran against the demo MCP server under their canonical names.
                tool_calls = page.locator("#timeline .item.llm_tool_call")
                assert tool_calls.locator(".tool-name").all_text_contents() == [
                    "kubernetes.get_pods",
                    "kubernetes.get_events",
                ]
                for index in range(2):
                    call = tool_calls.nth(index)
                    assert call.get_attribute("data-status") == "completed"
                    assert json.loads(call.locator("pre.arguments").text_content()) == {
                        "namespace": "payments"
                    }
                pods, events = (_open_result(tool_calls.nth(n)) for n in range(2))
                assert "payments-api-7d9f8b6c5d-x2k4p" in pods
                assert "CrashLoopBackOff" in pods
                assert "Back-off restarting failed container payments-api" in events

                # What arrived live is exactly what a fresh render shows.
                live_timeline = page.inner_text("#timeline")
                page.reload()
                page.wait_for_selector("#timeline .item.final_analysis")
                assert page.inner_text("#timeline") == live_timeline

                # A real provider: no demo banner, neither global nor for this session (the
                # fresh render knows the session's executions and their backends).
                assert page.locator("#demo-banner").count() == 0
                assert page.locator(".banner.demo").count() == 0

                requests = gemini.wait_for_requests(3)
                assert_requests(requests[:2])
                summary_request = requests[2]["body"]
                assert "tools" not in summary_request  # one call, no tools
                assert "Investigation to summarise" in json.dumps(summary_request["contents"])
                interactions = recorded_interactions(tarsy)
                assert_interactions(interactions[:2])
                assert interactions[2]["response_text"] == SUMMARY
                assert KEY not in tarsy.log_tail(lines=100_000)
            except BaseException:
                print(tarsy.log_tail())
                print(gemini.log_tail())
                raise
            finally:
                browser.close()


def assert_requests(requests: list[dict[str, Any]]) -> None:
    """What google-genai in the worker put on the wire."""
    assert len(requests) == 2, [r["path"] for r in requests]
    first, second = (request["body"] for request in requests)
    for request in requests:
        assert request["path"] == f"/v1beta/models/{MODEL}:streamGenerateContent"
        assert request["query"] == {"alt": ["sse"]}  # the key went in a header, not the URL

    # The demo MCP server's tools, declared under API-safe server__tool names.
    for body in (first, second):
        [tool] = body["tools"]
        names = {declaration["name"] for declaration in tool["functionDeclarations"]}
        assert {
            "kubernetes__get_pods",
            "kubernetes__get_events",
            "kubernetes__describe_pod",
            "kubernetes__get_pod_logs",
            "kubernetes__get_deployments",
        } <= names
        assert not any("." in name for name in names)
        thinking = field(body["generationConfig"], "thinkingConfig")
        assert field(thinking, "thinkingBudget") == 24576
        assert field(thinking, "includeThoughts") is True
    assert "payments-api pods keep restarting" in json.dumps(first["contents"])

    # Turn 2 replays turn 1: the text, both calls (the first with its signature back),
    # then both results in one user content. Thoughts themselves are not sent back.
    contents = second["contents"]
    model_turns = [c for c in contents if c["role"] == "model"]
    assert len(model_turns) == 1
    model_index = contents.index(model_turns[0])
    parts = model_turns[0]["parts"]
    assert not any(part.get("thought") for content in contents for part in content["parts"])
    assert [part["text"] for part in parts if "text" in part] == [TEXT_1]
    calls = [part for part in parts if "functionCall" in part]
    assert [(c["functionCall"]["name"], c["functionCall"]["args"]) for c in calls] == CALLS
    assert g.decode_signature(calls[0]["thoughtSignature"]) == SIGNATURE
    assert "thoughtSignature" not in calls[1]

    results = contents[model_index + 1]
    assert results["role"] == "user"
    responses = [part["functionResponse"] for part in results["parts"]]
    assert [r["name"] for r in responses] == ["kubernetes__get_pods", "kubernetes__get_events"]
    # Gemini 2.5 sent no ids; each result answers its call under the id TARSy gave it.
    assert [r.get("id") for r in responses] == [c["functionCall"].get("id") for c in calls]
    assert "payments-api-7d9f8b6c5d-x2k4p" in responses[0]["response"]["result"]
    assert "Back-off restarting" in responses[1]["response"]["result"]
    assert contents[model_index + 2 :] == []


def assert_interactions(interactions: list[dict[str, Any]]) -> None:
    """The worker recorded both turns with Gemini's thought token counts."""
    assert [i["backend"] for i in interactions] == ["google-native", "google-native"]
    assert {i["model_name"] for i in interactions} == {MODEL}
    assert [i["error_code"] for i in interactions] == ["", ""]
    assert [i["thinking"] for i in interactions] == ["".join(THOUGHTS_1), "".join(THOUGHTS_2)]
    assert interactions[1]["response_text"] == FINAL_TEXT
    for interaction, usage in zip(interactions, (USAGE_1, USAGE_2), strict=True):
        assert interaction["input_tokens"] == usage["promptTokenCount"]
        assert interaction["thinking_tokens"] == usage["thoughtsTokenCount"]
        assert interaction["output_tokens"] == (
            usage["candidatesTokenCount"] + usage["thoughtsTokenCount"]
        )
        assert interaction["total_tokens"] == usage["totalTokenCount"]


def _open_result(call) -> str:
    """A tool call's result: opened (a long one loads then), read, closed again."""
    call.locator("details.result > summary").click()
    text = call.locator(".result .body-loaded pre").text_content()
    call.locator("details.result > summary").click()
    return text
