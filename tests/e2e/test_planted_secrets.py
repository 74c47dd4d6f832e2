"""Planted secrets never leave the door: every format of tests/secrets_corpus.py, in the
alert, its runbook and a real MCP server's tool results, and none of them reaches the
database file, the logs, a WebSocket frame, a page, the API or the requests the LLM
receives.

Real daphne and qcluster, the real google-genai SDK talking to the fake Gemini process
(which records every request it gets), a real stdio MCP server, headless Chromium.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests import secrets_corpus
from tests.e2e.harness import ROOT, deployment, fake_gemini, launch_browser, log_in
from tests.llm.fakes import gemini as g

pytestmark = pytest.mark.e2e

MODEL = "gemini-2.5-flash"
KEY_ENV = "E2E_GEMINI_KEY"
ANSWER = "The payments database credentials were rotated; the pods use the old ones."
FORBIDDEN = [*secrets_corpus.forbidden(), *secrets_corpus.DOCUMENT_VALUES, "Zq7xStderrPass"]


def write_config(tmp_path: Path) -> Path:
    config = yaml.safe_load((ROOT / "config" / "tarsy.yaml").read_text())
    config["defaults"]["llm_backend"] = "google-native"
    config["mcp_servers"]["planted"] = {
        "transport": {
            "type": "stdio",
            "command": "{{.PYTHON}}",
            "args": [str(ROOT / "tests" / "e2e" / "planted_mcp_server.py")],
        }
    }
    config["agents"]["KubernetesAgent"]["mcp_servers"] = ["kubernetes", "planted"]
    path = tmp_path / "tarsy.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def gemini_script() -> list[dict[str, Any]]:
    return [
        {
            "chunks": [
                g.response(g.thought("The alert mentions credentials; let me look."), model=MODEL),
                g.response(
                    g.function_call("planted__dump_everything", {}),
                    g.function_call("planted__get_secret", {"name": "db-credentials"}),
                    finish_reason="STOP",
                    usage_metadata=g.usage(100, 10),
                    model=MODEL,
                ),
            ],
            "delay": 0.05,
        },
        {
            "chunks": [
                g.response(
                    g.text(ANSWER),
                    finish_reason="STOP",
                    usage_metadata=g.usage(900, 20),
                    model=MODEL,
                )
            ],
            "delay": 0.05,
        },
        {  # the executive summary that ends every session
            "chunks": [
                g.response(
                    g.text("Credentials were rotated."),
                    finish_reason="STOP",
                    usage_metadata=g.usage(50, 5),
                    model=MODEL,
                )
            ],
            "delay": 0.05,
        },
    ]


def leaks(where: str, text: str) -> list[str]:
    return [f"{where}: {value}" for value in FORBIDDEN if value in text]


def test_no_planted_secret_reaches_storage_logs_pages_sockets_api_or_the_llm(tmp_path, playwright):
    alert = secrets_corpus.plain_text() + "\n" + secrets_corpus.documents_by_shape()["json"]
    runbook = secrets_corpus.documents_by_shape()["env file"] + secrets_corpus.KUBECONFIG
    with fake_gemini(tmp_path, gemini_script()) as gemini:
        provider = {
            "name": "gemini",
            "type": "google",
            "model": MODEL,
            "api_key_env": KEY_ENV,
            "base_url": gemini.url,
            "is_default": True,
        }
        env = {"TARSY_CONFIG": str(write_config(tmp_path)), KEY_ENV: "e2e-key-not-a-secret"}
        with deployment(tmp_path, provider=provider, extra_env=env) as tarsy:
            browser = launch_browser(playwright)
            page = browser.new_page()
            frames: list[str] = []
            page.on(
                "websocket",
                lambda socket: socket.on("framereceived", lambda frame: frames.append(str(frame))),
            )
            try:
                log_in(page, tarsy.base_url)
                page.click("text=Submit alert")
                page.select_option("#id_alert_type", "PodCrashLooping")
                page.fill("#id_data", alert)
                page.fill("#id_runbook", runbook)
                page.click("#alert-form button[type=submit]")
                page.wait_for_url("**/sessions/*/")
                page.wait_for_selector('#session-status[data-status="completed"]', timeout=90_000)
                session_id = page.url.rstrip("/").rsplit("/", 1)[1]
                assert ANSWER in page.text_content("#timeline .item.final_analysis")
                tool_results = page.locator("#timeline .item.llm_tool_call").all_text_contents()
                assert len(tool_results) == 2
                # Masked, not withheld: the evidence around the secrets is still there.
                assert "[MASKED_SECRET_VALUE]" in " ".join(tool_results)
                assert "db-credentials" in " ".join(tool_results)

                page.reload()
                page.wait_for_selector("#timeline .item.final_analysis")
                session_page = page.content()
                page.goto(f"{tarsy.base_url}/")
                list_page = page.content()
            except Exception:
                print(tarsy.log_tail())
                raise
            finally:
                browser.close()

            token = tarsy.api_token()
            api = [
                tarsy.api("GET", f"/api/v1/sessions/{session_id}", token)[1],
                tarsy.api("GET", f"/api/v1/sessions/{session_id}/timeline", token)[1],
                tarsy.api("GET", "/api/v1/sessions", token)[1],
            ]
            requests = gemini.requests()
            assert len(requests) == 3  # the tool results went to the model, masked
            database = b"".join(
                path.read_bytes()
                for path in tarsy.data_dir.iterdir()
                if path.name.startswith("tarsy.sqlite3")
            )
            logs = "".join(
                path.read_text(errors="replace") for path in tarsy.data_dir.glob("*.log")
            )
            logs += gemini.log.read_text(errors="replace")

    assert "[MASKED_" in json.dumps(requests)
    found = [
        *leaks("database file", database.decode("utf-8", errors="replace")),
        *leaks("logs", logs),
        *leaks("WebSocket frames", "\n".join(frames)),
        *leaks("session page", session_page),
        *leaks("session list", list_page),
        *leaks("API", json.dumps(api)),
        *leaks("LLM requests", json.dumps(requests)),
    ]
    assert not found, "\n".join(found)
    assert frames  # the page did follow the session live
