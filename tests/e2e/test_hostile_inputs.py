"""No input crashes a process: the hostile corpus (tests/hostile_corpus.py) through the
real endpoints and the real worker.

Real daphne and qcluster, the scripted provider, a real stdio MCP server that returns
hostile documents. The corpus goes in as alert data (REST and the web form), as a chat
question (REST) and as MCP tool results (in the investigation and in the chat answer);
the model's answer repeats hostile Markdown with a NUL in it; broken bodies, NUL
characters and lone surrogates go to the alert API, the chat API and the forms, and a
deep frame to the WebSocket API.

Each input gets a 4xx that names the problem or is accepted; every accepted session ends
``completed`` with its Secrets masked; and afterwards daphne still answers and the
qcluster runs in the very processes it started with.
"""

from __future__ import annotations

import asyncio
import http.cookiejar
import json
import re
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from pathlib import Path

import pytest
import websockets
import yaml

from tests import hostile_corpus as corpus
from tests.e2e.harness import (
    PASSWORD,
    ROOT,
    USERNAME,
    Deployment,
    deployment,
    process_group,
)
from tests.e2e.harness import _wait_for_clusters as wait_for_clusters

pytestmark = pytest.mark.e2e

TERMINAL = ("completed", "failed", "timed_out", "cancelled")
ALERTS_BY_API = [
    "yaml flow sequence (the finding)",
    "yaml billion laughs",
    "json deep array",
]
ALERT_BY_FORM = "yaml aliased secret string"
TOOL_RESULTS = [
    "yaml flow sequence (the finding)",
    "yaml aliases deeper than the text",
    "yaml quoted brackets",
    "json lone surrogate escape",
    "json secret embedded in a string",
    "nul characters",
    "a mebibyte without a newline",
]
CHAT_QUESTION = "yaml flow sequence (the finding)"
# The model repeats what a tool returned: costly Markdown, with a NUL in it.
ANSWER = "Investigated.\n\n" + corpus.CORPUS["markdown emphasis (32 KiB)"][:8000] + " \x00 end"


def write_config(tmp_path: Path) -> Path:
    config = yaml.safe_load((ROOT / "config" / "tarsy.yaml").read_text())
    config["mcp_servers"]["hostile"] = {
        "transport": {
            "type": "stdio",
            "command": "{{.PYTHON}}",
            "args": [str(ROOT / "tests" / "e2e" / "hostile_mcp_server.py")],
        }
    }
    config["agents"]["KubernetesAgent"]["mcp_servers"] = ["hostile"]
    path = tmp_path / "tarsy.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def provider(tmp_path: Path) -> dict:
    def calls(names: list[str]) -> list[dict]:
        return [{"name": "hostile.get_document", "arguments": {"name": n}} for n in names]

    script = tmp_path / "hostile-script.yaml"
    script.write_text(
        yaml.safe_dump(
            {
                "chunk_delay": 0,
                "turns": [{"tool_calls": calls(TOOL_RESULTS)}, {"text": ANSWER}],
                "agents": {
                    "ChatAgent": {
                        "turns": [
                            {"tool_calls": calls(["yaml flow sequence in a secret"])},
                            {"text": "Answered: " + ANSWER},
                        ]
                    }
                },
            }
        )
    )
    return {
        "name": "hostile",
        "type": "scripted",
        "model": "hostile-script",
        "options": {"script": str(script)},
        "is_default": True,
    }


def post_raw(tarsy: Deployment, path: str, token: str, body: bytes) -> tuple[int, dict]:
    request = urllib.request.Request(
        f"{tarsy.base_url}{path}",
        method="POST",
        data=body,
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"null")


class Browser:
    """A logged-in user's cookies and CSRF token, for the forms (no JavaScript needed)."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.jar = http.cookiejar.CookieJar()
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.jar))
        self.post("/login/", {"username": USERNAME, "password": PASSWORD}, form_page="/login/")

    def get(self, path: str) -> tuple[int, str, str]:
        try:
            with self.opener.open(f"{self.base_url}{path}", timeout=60) as response:
                return response.status, response.geturl(), response.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.geturl(), error.read().decode(errors="replace")

    def post(self, path: str, fields: dict[str, str], *, form_page: str) -> tuple[int, str, str]:
        _, _, html = self.get(form_page)
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', html)
        assert token, f"no CSRF token on {form_page}"
        body = urllib.parse.urlencode({**fields, "csrfmiddlewaretoken": token.group(1)})
        request = urllib.request.Request(
            f"{self.base_url}{path}",
            data=body.encode(),
            headers={"Referer": f"{self.base_url}{form_page}"},
        )
        try:
            with self.opener.open(request, timeout=60) as response:
                return response.status, response.geturl(), response.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.geturl(), error.read().decode(errors="replace")


def statuses(tarsy: Deployment) -> dict[str, str]:
    return dict(tarsy.query("SELECT id, status FROM alert_sessions_alertsession"))


def wait_for(condition, timeout: float, what: str, tarsy: Deployment) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s: {what}\n{tarsy.log_tail()}")
        time.sleep(0.2)


def expect_rejected(status: int, body: dict, code: int, words: str) -> None:
    assert status == code, body
    assert words in body["error"], body


async def send_deep_frame(url: str, token: str) -> None:
    headers = {"Authorization": f"Bearer {token}"}
    async with websockets.connect(url, additional_headers=headers, max_size=None) as socket:
        json.loads(await socket.recv())  # connection.established
        await socket.send("[" * (1024 * 1024 - 64))
        await socket.send('{"action": "subscribe", "channel": "sessions"}')
        reply = json.loads(await asyncio.wait_for(socket.recv(), timeout=30))
        assert reply  # still served after the deep frame


def test_hostile_input_gets_a_4xx_or_a_completed_masked_session_and_kills_nothing(tmp_path):
    env = {"TARSY_CONFIG": str(write_config(tmp_path))}
    with deployment(tmp_path, provider=provider(tmp_path), extra_env=env) as tarsy:
        try:
            _run(tarsy)
        except Exception:
            print(tarsy.log_tail(80))
            raise


def _run(tarsy: Deployment) -> None:
    token = tarsy.api_token()
    cluster = tarsy.processes[1]
    wait_for_clusters(tarsy)  # its workers forked: the processes a crash would replace
    cluster_pids = set(process_group(cluster.pid))
    daphne_pid = tarsy.processes[0].pid
    accepted: list[str] = []

    # Alert data through the REST API: accepted, however deep.
    for name in ALERTS_BY_API:
        status, body = tarsy.api("POST", "/api/v1/alerts", token, {"data": corpus.CORPUS[name]})
        assert status == 202, (name, body)
        accepted.append(body["session_id"])

    # Bodies the API cannot take: a clear 4xx each, nothing stored.
    deep = b'{"data": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    expect_rejected(*post_raw(tarsy, "/api/v1/alerts", token, deep), 400, "nested more than 32")
    expect_rejected(
        *post_raw(tarsy, "/api/v1/alerts", token, corpus.invalid_utf8_body()),
        400,
        "not valid JSON",
    )
    nul = json.dumps({"data": "kind: Secret\x00"}).encode()
    expect_rejected(*post_raw(tarsy, "/api/v1/alerts", token, nul), 400, "NUL character")
    surrogate = b'{"data": "kind: Secret \\ud800"}'
    expect_rejected(*post_raw(tarsy, "/api/v1/alerts", token, surrogate), 400, "lone surrogate")
    too_big = json.dumps({"data": "x" * (1024 * 1024 + 1)}).encode()
    expect_rejected(*post_raw(tarsy, "/api/v1/alerts", token, too_big), 413, "limit")

    # The web form: a hostile document is accepted, a NUL is refused on the form.
    browser = Browser(tarsy.base_url)
    form = {"alert_type": "kubernetes", "data": corpus.CORPUS[ALERT_BY_FORM]}
    status, url, _ = browser.post("/sessions/new/", form, form_page="/sessions/new/")
    assert status == 200, url
    accepted.append(url.rstrip("/").rsplit("/", 1)[1])
    form["data"] = "kind: Secret\x00 here"
    status, _, html = browser.post("/sessions/new/", form, form_page="/sessions/new/")
    assert status == 400
    assert "form field 'data' contains a NUL character" in html

    # A deep frame on the WebSocket API does not end the socket, let alone daphne.
    ws_url = tarsy.base_url.replace("http://", "ws://") + "/api/v1/ws"
    asyncio.run(send_deep_frame(ws_url, token))

    ids = {uuid.UUID(session).hex for session in accepted}
    wait_for(
        lambda: all(statuses(tarsy).get(i) in TERMINAL for i in ids),
        150,
        "every accepted session ended",
        tarsy,
    )
    assert {i: statuses(tarsy)[i] for i in ids} == dict.fromkeys(ids, "completed")

    # A chat question: the hostile document is accepted; NUL and lone surrogates are not.
    first = accepted[0]
    chat = f"/api/v1/sessions/{first}/chat/messages"
    question = corpus.CORPUS[CHAT_QUESTION]
    expect_rejected(
        *post_raw(tarsy, chat, token, json.dumps({"content": "why\x00"}).encode()),
        400,
        "NUL character",
    )
    expect_rejected(
        *post_raw(tarsy, chat, token, b'{"content": "why \\udfff"}'), 400, "lone surrogate"
    )
    status, _, html = browser.post(
        f"/sessions/{first}/chat/messages/", {"content": "why\x00"}, form_page=f"/sessions/{first}/"
    )
    assert status == 400
    assert "NUL character" in html
    status, body = tarsy.api("POST", chat, token, {"content": question})
    assert status == 202, body
    wait_for(
        lambda: (
            tarsy.query(
                "SELECT status FROM alert_sessions_chatmessage WHERE id = %s",
                (uuid.UUID(body["message_id"]).hex,),
            )
            == [("completed",)]
        ),
        90,
        "the chat question answered",
        tarsy,
    )

    # The pages that show all of it render, in daphne.
    for session in accepted:
        status, _, html = browser.get(f"/sessions/{session}/")
        assert status == 200
        assert "Investigated." in html
    status, body = tarsy.api("GET", f"/api/v1/sessions/{first}/timeline", token)
    assert status == 200

    # Nothing died: daphne answers, the qcluster runs in the processes it started with.
    status, health = tarsy.api("GET", "/api/v1/health", token)
    assert status == 200, health
    assert tarsy.processes[0].poll() is None
    assert tarsy.processes[0].pid == daphne_pid
    assert cluster.poll() is None
    assert set(process_group(cluster.pid)) == cluster_pids

    # Masked, not withheld: the tool results are there, the planted value is not.
    results = tarsy.query(
        "SELECT content FROM alert_sessions_timelineevent WHERE event_type = 'llm_tool_call'"
    )
    assert len(results) == len(accepted) * len(TOOL_RESULTS) + 1
    assert all("[MASKED:" not in content for (content,) in results)  # none withheld
    assert any("[MASKED_SECRET_VALUE]" in content for (content,) in results)
    stored = b"".join(
        path.read_bytes()
        for path in tarsy.data_dir.iterdir()
        if path.name.startswith("tarsy.sqlite3")
    ).decode("utf-8", errors="replace")
    leaked = [value for value in corpus.FORBIDDEN if value in stored]
    assert not leaked, leaked
