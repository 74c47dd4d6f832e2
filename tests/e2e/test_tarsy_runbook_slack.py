"""TARSy's ``test/e2e/runbook_test.go`` and ``slack_test.go``, replayed here.

Runbooks: TestE2E_RunbookURL (an alert's runbook URL on an allowed domain is stored,
fetched and the session completes), TestE2E_RunbookURL_InvalidDomain (a URL on another
domain is refused with 400 before anything runs), TestE2E_RunbookListEndpoint (no
``repo_url``: ``GET /runbooks`` is ``[]``) and TestE2E_RunbookFallback (no runbook: none
is stored and the session completes).

Slack: TestE2E_SlackNotifications (an alert with a fingerprint gets a start and an end
message, both in the thread of the channel message holding the fingerprint) and
TestE2E_SlackNoFingerprint (without one, only the end message, in the channel).

Ours besides: a runbook on GitHub is fetched raw through TARSY_GITHUB_RAW_URL (an egress
gateway; here a fake raw-content server) with the GitHub token, which the other runbook
host never gets.

One deployment runs them all, one session at a time, on TARSy's ``concurrency``
configuration with the keys TARSy's tests set in Go added to a copy of its tarsy.yaml
(scenarios/runbook-slack/system.yaml): the runbook allowlist and Slack's token, channel
and API URL. The runbook is served, and Slack's Web API answered, by local HTTP fakes in
this process that the deployment's worker reaches over HTTP.
"""

from __future__ import annotations

import json
import shutil
import threading
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.tarsy_scenarios import CONFIGS, SCENARIOS, Running, scenario_deployment, wait

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

CUSTOM_RUNBOOK = (
    "# Custom Runbook\n\n1. Check pod logs\n2. Restart the deployment\n3. Verify metrics"
)
CHANNEL = "C99TEST"
TOKEN = "xoxb-test-token"
FINGERPRINT = "Pod nginx-xyz OOMKilled in namespace production"
THREAD_TS = "1700000000.000001"
GITHUB_TOKEN = "ghp_" + "E2E" * 12
GITHUB_RUNBOOK = "https://github.com/acme/runbooks/blob/main/k8s/oom.md"


class _Fake(ThreadingHTTPServer):
    """An HTTP server on a free local port, in a thread of the test process."""

    daemon_threads = True

    def __init__(self, handler: type[BaseHTTPRequestHandler]) -> None:
        super().__init__(("127.0.0.1", 0), handler)
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.05})
        self.thread.daemon = True
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def recorded(self) -> list[dict[str, Any]]:
        with self.lock:
            return list(self.requests)

    def close(self) -> None:
        self.shutdown()
        self.server_close()


class _Quiet(BaseHTTPRequestHandler):
    server: _Fake

    def log_message(self, *args: Any) -> None:
        pass

    def reply(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class RunbookHost(_Quiet):
    """TARSy's httptest server: the custom runbook, as text/plain, at any path. (Also
    GitHub's raw content here, behind TARSY_GITHUB_RAW_URL.)"""

    def do_GET(self) -> None:
        with self.server.lock:
            self.server.requests.append(
                {"path": self.path, "auth": self.headers.get("Authorization")}
            )
        self.reply(200, CUSTOM_RUNBOOK.encode(), "text/plain")


class SlackAPI(_Quiet):
    """TARSy's mockSlackServer at Slack's Web API wire: ``chat.postMessage`` recorded and
    answered ``ok`` with a fresh ``ts``; ``conversations.history`` answers one message
    holding the fingerprint (ts THREAD_TS)."""

    def do_GET(self) -> None:
        self.answer(urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query))

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()
        if self.headers.get("Content-Type", "").startswith("application/json"):
            self.answer(json.loads(raw or "{}"))
        else:
            self.answer(urllib.parse.parse_qs(raw))

    def answer(self, fields: dict[str, Any]) -> None:
        # Form fields come as lists of one; JSON ones as they are.
        fields = {
            k: v[0] if isinstance(v, list) and k != "blocks" else v for k, v in fields.items()
        }
        method = urllib.parse.urlsplit(self.path).path.rsplit("/", 1)[-1]
        with self.server.lock:
            self.server.requests.append(
                {"method": method, "auth": self.headers.get("Authorization"), **fields}
            )
            n = sum(r["method"] == "chat.postMessage" for r in self.server.requests)
        if method == "chat.postMessage":
            body = {"ok": True, "channel": fields.get("channel"), "ts": f"1234567890.{n:06d}"}
        elif method == "conversations.history":
            body = {
                "ok": True,
                "messages": [{"type": "message", "text": FINGERPRINT, "ts": THREAD_TS}],
            }
        else:
            body = {"ok": False, "error": "unknown_method"}
        self.reply(200, json.dumps(body).encode(), "application/json")


def _blocks(call: dict[str, Any]) -> str:
    """The message's blocks as one JSON text, for substring checks (TARSy's decodeBlocks)."""
    blocks = call.get("blocks")
    if isinstance(blocks, list) and blocks and isinstance(blocks[0], str):
        blocks = json.loads(blocks[0])  # a form field: the JSON text
    return json.dumps(blocks)


@dataclass
class Deployed:
    run: Running
    runbooks: _Fake
    github: _Fake
    slack: _Fake
    sessions: dict[str, str] = field(default_factory=dict)  # test's name -> session id
    calls: dict[str, int] = field(default_factory=dict)  # test's name -> LLM calls made

    def llm_calls(self) -> int:
        return len(self.run.scenario.llm_calls())

    def session(self, name: str, alert_type: str, data: str, **fields: Any) -> str:
        """One of TARSy's sessions, waited for; the model calls it made are counted."""
        before = self.llm_calls()
        session_id = self.run.submit(alert_type, data, **fields)
        assert self.run.wait_status(session_id) == "completed", self.run.tarsy.log_tail(80)
        self.sessions[name] = session_id
        self.calls[name] = self.llm_calls() - before
        return session_id

    def posted(self, session_id: str) -> list[dict[str, Any]]:
        """The Slack messages about a session (its dashboard link names it)."""
        return [
            call
            for call in self.slack.recorded()
            if call["method"] == "chat.postMessage" and session_id in _blocks(call)
        ]

    def stored(self, session_id: str, column: str) -> Any:
        [(value,)] = self.run.tarsy.query(
            f"SELECT {column} FROM alert_sessions_alertsession WHERE id = ?",
            (session_id.replace("-", ""),),
        )
        return value


def _config_with_settings(tmp_path: Path) -> Path:
    """TARSy's concurrency configuration, copied, with the settings its tests set in Go
    appended to tarsy.yaml: nothing of TARSy's file is changed."""
    copy = tmp_path / "concurrency-with-runbooks-and-slack"
    shutil.copytree(CONFIGS / "concurrency", copy)
    tarsy_yaml = copy / "tarsy.yaml"
    added = (SCENARIOS / "runbook-slack" / "system.yaml").read_text()
    tarsy_yaml.write_text(tarsy_yaml.read_text() + "\n" + added)
    return copy


@pytest.fixture(scope="module")
def deployed(tmp_path_factory) -> Iterator[Deployed]:
    """The sessions run in the order of the script (scenarios/runbook-slack/
    llm_script.json, two calls each): runbook URL, fallback, Slack with a fingerprint,
    Slack without, GitHub runbook."""
    tmp_path = tmp_path_factory.mktemp("runbook-slack")
    runbooks, github, slack = _Fake(RunbookHost), _Fake(RunbookHost), _Fake(SlackAPI)
    env = {
        "TARSY_CONFIG": str(_config_with_settings(tmp_path)),
        "SLACK_BOT_TOKEN": TOKEN,
        "E2E_SLACK_API_URL": f"{slack.url}/",
        "E2E_GITHUB_TOKEN": GITHUB_TOKEN,
        "TARSY_GITHUB_RAW_URL": f"{github.url}/raw",
    }
    try:
        with scenario_deployment("runbook-slack", tmp_path, env, config="concurrency") as run:
            yield Deployed(run, runbooks, github, slack)
    finally:
        runbooks.close()
        github.close()
        slack.close()


@pytest.fixture(scope="module")
def ran(deployed) -> Deployed:
    runbook_url = f"{deployed.runbooks.url}/runbook.md"
    deployed.session(
        "runbook_url", "test-concurrency", "Pod OOMKilled in production", runbook=runbook_url
    )
    deployed.session("fallback", "test-concurrency", "Pod OOMKilled")
    deployed.session(
        "slack",
        "test-concurrency",
        "Pod OOMKilled",
        slack_message_fingerprint=FINGERPRINT,
    )
    deployed.session("slack_no_fingerprint", "test-concurrency", "Pod OOMKilled")
    deployed.session("github", "test-concurrency", "Pod OOMKilled", runbook=GITHUB_RUNBOOK)
    return deployed


# --- runbook_test.go -----------------------------------------------------------------


def test_a_runbook_url_on_an_allowed_domain_is_stored_fetched_and_followed(ran):
    session_id = ran.sessions["runbook_url"]
    runbook_url = f"{ran.runbooks.url}/runbook.md"
    assert ran.stored(session_id, "runbook_url") == runbook_url
    session = ran.run.get(f"/sessions/{session_id}")
    assert session["status"] == "completed"
    assert session["runbook_url"] == runbook_url
    assert session["final_analysis"] == "Investigation with custom runbook complete."
    assert ran.calls["runbook_url"] == 2  # the investigation and the executive summary
    # Beyond TARSy's asserts: the runbook was fetched, and the investigation read it.
    # Not GitHub: no GitHub token.
    assert ran.runbooks.recorded() == [{"path": "/runbook.md", "auth": None}]
    investigation = json.dumps(ran.run.scenario.llm_calls()[0]["body"])
    assert "## Runbook" in investigation
    assert "2. Restart the deployment" in investigation


def test_a_runbook_url_on_another_domain_is_refused_before_anything_runs(ran):
    before_calls, before_sessions = ran.llm_calls(), ran.run.get("/sessions")["pagination"]
    status, answer = ran.run.tarsy.api(
        "POST",
        "/api/v1/alerts",
        ran.run.token,
        {
            "alert_type": "test-concurrency",
            "data": "Pod CrashLoopBackOff",
            "runbook": "https://evil.com/malicious-runbook.md",
        },
    )
    assert status == 400, answer
    assert "evil.com" in json.dumps(answer)
    assert ran.run.get("/sessions")["pagination"] == before_sessions  # no session made
    assert ran.llm_calls() == before_calls


def test_the_runbook_list_is_empty_without_a_repository(ran):
    before = ran.llm_calls()
    assert ran.run.get("/runbooks") == []
    assert ran.llm_calls() == before


def test_a_session_without_a_runbook_completes_without_one(ran):
    session_id = ran.sessions["fallback"]
    # TARSy stores NULL; ours stores "" (a blank text column) and answers null the same.
    assert ran.stored(session_id, "runbook_url") == ""
    session = ran.run.get(f"/sessions/{session_id}")
    assert session["status"] == "completed"
    assert session["runbook_url"] is None
    assert ran.calls["fallback"] == 2
    investigation = json.dumps(ran.run.scenario.llm_calls()[2]["body"])
    assert "## Runbook" not in investigation
    assert "Pod OOMKilled in production" not in investigation  # not the first session


def test_a_github_runbook_is_fetched_raw_through_the_github_base_url_with_the_token(ran):
    session_id = ran.sessions["github"]
    session = ran.run.get(f"/sessions/{session_id}")
    assert (session["status"], session["runbook_url"]) == ("completed", GITHUB_RUNBOOK)
    assert ran.github.recorded() == [
        {"path": "/raw/acme/runbooks/main/k8s/oom.md", "auth": f"Bearer {GITHUB_TOKEN}"}
    ]
    investigation = json.dumps(ran.run.scenario.llm_calls()[8]["body"])
    assert "2. Restart the deployment" in investigation
    assert GITHUB_TOKEN not in json.dumps(ran.run.get(f"/sessions/{session_id}/timeline"))


# --- slack_test.go -------------------------------------------------------------------


def test_a_fingerprinted_alert_gets_a_start_and_an_end_message_in_its_thread(ran):
    session_id = ran.sessions["slack"]
    assert ran.stored(session_id, "slack_message_fingerprint") == FINGERPRINT
    detail = ran.run.get(f"/sessions/{session_id}")
    assert detail["slack_message_fingerprint"] == FINGERPRINT
    wait(lambda: len(ran.posted(session_id)) >= 2, "the start and end messages")
    posted = ran.posted(session_id)
    assert len(posted) == 2
    start, end = (_blocks(call) for call in posted)
    assert [(c["channel"], c["thread_ts"]) for c in posted] == [(CHANNEL, THREAD_TS)] * 2
    assert all(call["auth"] == f"Bearer {TOKEN}" for call in posted)
    # TARSy's texts are "Processing started" and "Analysis Complete"; ours say
    # "Investigating" and "Investigation complete" (our own wording, docs/usage.md).
    assert "Investigating" in start
    assert "Investigation complete" in end
    assert "Executive summary of investigation." in end
    assert "test-dashboard" in start
    assert "test-dashboard" in end
    # The thread was found in the channel's history, by the fingerprint.
    history = [c for c in ran.slack.recorded() if c["method"] == "conversations.history"]
    assert history
    assert all(c["channel"] == CHANNEL for c in history)


def test_an_alert_without_a_fingerprint_gets_only_the_end_message_unthreaded(ran):
    session_id = ran.sessions["slack_no_fingerprint"]
    # The end message is posted after the session ends: it may come a little later.
    wait(lambda: ran.posted(session_id), "the end message", timeout=10)
    [end] = ran.posted(session_id)
    assert end["channel"] == CHANNEL
    assert not end.get("thread_ts")
    assert "Investigation complete" in _blocks(end)
    assert "Executive summary." in _blocks(end)
    assert "slack_message_fingerprint" not in ran.run.get(f"/sessions/{session_id}")


def test_sessions_without_a_fingerprint_never_search_the_channel(ran):
    # Every other session of this module came without one: one end message each, none
    # threaded, and only the fingerprinted session looked the thread up.
    for name in ("runbook_url", "fallback", "slack_no_fingerprint", "github"):
        session_id = ran.sessions[name]
        wait(lambda sid=session_id: ran.posted(sid), f"{name}'s end message", timeout=10)
        assert [bool(c.get("thread_ts")) for c in ran.posted(session_id)] == [False], name
    history = [c for c in ran.slack.recorded() if c["method"] == "conversations.history"]
    assert len(history) == 1
