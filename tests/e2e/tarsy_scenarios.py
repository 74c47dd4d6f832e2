"""What TARSy's end-to-end scenarios share when replayed here (issue 20): the scenario's
files, its scripted model at each provider's wire, its ``command: mock`` MCP servers, a
real deployment running its configuration unchanged, and the comparison with TARSy's
golden files. The scenarios themselves are the ``test_tarsy_*.py`` modules beside this.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.e2e.harness import Deployment, demo_provider, deployment, free_port

COMPAT = Path(__file__).parents[1] / "compat"
CONFIGS = COMPAT / "tarsy_configs"
SCENARIOS = COMPAT / "scenarios"


class Scenario:
    """``scenarios/<name>/``: the model's script (llm_script.json), the tools' results
    (mcp_tools.json) and TARSy's golden files; ``config`` is the TARSy configuration
    directory it runs (tarsy_configs/<config>/, by default ``name``). A TARSy test file
    with several tests on one configuration keeps one script per test (``script``)."""

    def __init__(
        self,
        name: str,
        tmp_path: Path,
        *,
        config: str | None = None,
        script: str | Path = "llm_script.json",
        tools: str | Path = "mcp_tools.json",
    ) -> None:
        self.name = name
        self.dir = SCENARIOS / name
        self.config = CONFIGS / (config or name)
        self.script = self.dir / script
        self.tools = self.dir / tools
        self.tmp = tmp_path
        self.record = tmp_path / "llm-calls.jsonl"

    def golden(self, what: str) -> Any:
        return json.loads((self.dir / f"{what}.golden").read_text().replace("{DURATION_MS}", "0"))

    def llm_calls(self) -> list[dict[str, Any]]:
        if not self.record.exists():
            return []
        return [json.loads(line) for line in self.record.read_text().splitlines()]


def start_fake_llm(scenario: Scenario) -> tuple[subprocess.Popen, int]:
    port = free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            str(SCENARIOS / "fake_llm.py"),
            str(port),
            str(scenario.script),
            str(scenario.record),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert process.stdout is not None
    assert process.stdout.readline().strip() == "ready"
    return process, port


def _mock_command(scenario: Scenario) -> Path:
    """``mock`` on PATH: TARSy's configurations start their MCP servers with it."""
    bin_dir = scenario.tmp / "bin"
    bin_dir.mkdir()
    mock = bin_dir / "mock"
    mock.write_text(
        f"#!/bin/sh\nexec {sys.executable} {SCENARIOS / 'mock_mcp.py'} {scenario.tools}\n"
    )
    mock.chmod(0o755)
    return bin_dir


def wait(predicate, what: str, timeout: float = 120) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def scenario_env(scenario: Scenario, port: int) -> dict[str, str]:
    """The deployment's environment: the scenario's configuration as it is, its models at
    the fake's address, ``mock`` on PATH."""
    return {
        "TARSY_CONFIG": str(scenario.config),
        "PATH": f"{_mock_command(scenario)}:{os.environ['PATH']}",
        "TARSY_GOOGLE_BASE_URL": f"http://127.0.0.1:{port}",
        "TARSY_OPENAI_BASE_URL": f"http://127.0.0.1:{port}/v1",
        "GOOGLE_API_KEY": "e2e-not-a-key",
        "OPENAI_API_KEY": "e2e-not-a-key",
        "TARSY_LLM_FIRST_CHUNK_TIMEOUT": "30",
    }


TERMINAL = ("completed", "failed", "timed_out", "cancelled")


@dataclass
class Running:
    """A scenario's deployment while it runs: TARSy's API as its tests call it."""

    scenario: Scenario
    tarsy: Deployment
    token: str

    def call(
        self, method: str, path: str, body: Any = None, expect: tuple[int, ...] = (200, 202)
    ) -> Any:
        status, answer = self.tarsy.api(method, f"/api/v1{path}", self.token, body)
        assert status in expect, (method, path, status, answer)
        return answer

    def get(self, path: str) -> Any:
        return self.call("GET", path, expect=(200,))

    def submit(self, alert_type: str, data: str, **fields: Any) -> str:
        accepted = self.call(
            "POST", "/alerts", {"alert_type": alert_type, "data": data, **fields}, expect=(202,)
        )
        return accepted["session_id"]

    def status(self, session_id: str) -> str:
        return self.get(f"/sessions/{session_id}/status")["status"]

    def wait_status(self, session_id: str, *statuses: str, timeout: float = 180) -> str:
        wanted = statuses or TERMINAL
        return wait(
            lambda: (s := self.status(session_id)) in wanted and s,
            f"session {session_id} {'/'.join(wanted)}",
            timeout=timeout,
        )

    def stage_status(self, session_id: str, stage_id: str) -> str:
        stages = self.get(f"/sessions/{session_id}")["stages"]
        return next(s["status"] for s in stages if s["id"] == stage_id)

    def ask(self, session_id: str, question: str) -> dict[str, Any]:
        """A chat question, answered (its stage ended) before this returns."""
        chat = self.call(
            "POST", f"/sessions/{session_id}/chat/messages", {"content": question}, expect=(202,)
        )
        wait(
            lambda: self.stage_status(session_id, chat["stage_id"]) not in ("pending", "active"),
            f"the answer to {question!r}",
        )
        return chat

    def outputs(self, session_id: str) -> dict[str, Any]:
        return {
            "session": self.get(f"/sessions/{session_id}"),
            "timeline": self.get(f"/sessions/{session_id}/timeline"),
            "trace": self.get(f"/sessions/{session_id}/trace"),
            "llm_calls": self.scenario.llm_calls(),
            "scenario": self.scenario,
            "log": self.tarsy.log_tail(200),
        }


@contextlib.contextmanager
def scenario_deployment(
    name: str,
    tmp_path: Path,
    extra_env: dict[str, str] | None = None,
    *,
    webs: int = 1,
    **files: Any,
) -> Iterator[Running]:
    """TARSy's configuration running unchanged, with the scenario's scripted model and
    tools (``files``: Scenario's config, script, tools; ``webs``: daphne processes on the
    one database, their URLs in ``.tarsy.web_urls``)."""
    scenario = Scenario(name, tmp_path, **files)
    fake, port = start_fake_llm(scenario)
    env = {**scenario_env(scenario, port), **(extra_env or {})}
    try:
        with deployment(tmp_path, provider=demo_provider(), extra_env=env, webs=webs) as tarsy:
            # TARSy's tests submit as "api-client" (its author when no proxy names one).
            token = tarsy.manage("create_api_token", "api-client").strip()
            yield Running(scenario, tarsy, token)
    finally:
        fake.kill()
        fake.wait()


def dump(name: str, outputs: dict[str, Any]) -> None:
    """TARSY_SCENARIO_DUMP=/tmp/x writes what a scenario saw to /tmp/x.<name>.json."""
    if where := os.environ.get("TARSY_SCENARIO_DUMP"):
        Path(f"{where}.{name}.json").write_text(
            json.dumps({k: v for k, v in outputs.items() if k != "scenario"})
        )


def run_scenario(
    name: str, tmp_path: Path, alert_type: str, data: str, questions: tuple[str, ...] = ()
) -> dict[str, Any]:
    """One of TARSy's scenarios: an alert, then the chat questions, as its test does."""
    with scenario_deployment(name, tmp_path) as run:
        session_id = run.submit(alert_type, data)
        run.wait_status(session_id)
        for question in questions:
            run.ask(session_id, question)
        outputs = run.outputs(session_id)
    dump(name, outputs)
    return outputs


def agents_by_execution(session: dict[str, Any]) -> dict[str, str]:
    names = {}
    for stage in session["stages"]:
        for execution in stage.get("executions", []):
            names[execution["execution_id"]] = execution["agent_name"]
            for child in execution.get("sub_agents", []):
                names[child["execution_id"]] = child["agent_name"]
    return names


def differences(golden: Any, ours: Any, path: str = "") -> list[str]:
    """Where ``ours`` differs from TARSy's golden value: its placeholders ({UUID},
    {TIMESTAMP}, {EXEC_ID_3}…) stand for any value; keys TARSy does not send are ours."""
    if isinstance(golden, str) and re.fullmatch(r"\{[A-Z_0-9]+\}", golden):
        return [] if ours is not None else [f"{path}: missing"]
    if isinstance(golden, dict):
        if not isinstance(ours, dict):
            return [f"{path}: {ours!r}"]
        return [
            d for key in golden for d in differences(golden[key], ours.get(key), f"{path}.{key}")
        ]
    if isinstance(golden, list):
        if not isinstance(ours, list) or len(ours) != len(golden):
            return [f"{path}: {len(ours or [])} items, TARSy {len(golden)}"]
        if golden and isinstance(golden[0], dict) and "agent_name" in golden[0]:
            # Parallel agents end in either order.
            golden = sorted(golden, key=lambda e: e["agent_name"])
            ours = sorted(ours, key=lambda e: e["agent_name"])
        return [
            d
            for i, (g, o) in enumerate(zip(golden, ours, strict=False))
            for d in differences(g, o, f"{path}[{i}]")
        ]
    return [] if golden == ours else [f"{path}: ours {ours!r}, TARSy {golden!r}"]


class SocketClient:
    """TARSy's e2e WebSocket client (``ws_client.go``): one ``/api/v1/ws`` socket of a web
    process, every message it receives kept in ``events`` (a thread reads them)."""

    def __init__(self, base_url: str, token: str) -> None:
        import threading

        from websockets.sync.client import connect

        url = base_url.replace("http://", "ws://", 1) + "/api/v1/ws"
        self._exit = contextlib.ExitStack()
        self.socket = self._exit.enter_context(
            connect(url, additional_headers={"Authorization": f"Bearer {token}"})
        )
        self.events: list[dict[str, Any]] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.wait_for(lambda e: e["type"] == "connection.established", "the socket's welcome")

    def _read(self) -> None:
        with contextlib.suppress(Exception):  # ends when the socket closes
            for message in self.socket:
                self.events.append(json.loads(message))

    def subscribe(self, channel: str) -> None:
        self.socket.send(json.dumps({"action": "subscribe", "channel": channel}))
        self.wait_for(
            lambda e: e["type"] == "subscription.confirmed" and e.get("channel") == channel,
            f"the subscription to {channel}",
        )

    def wait_for(self, matches, what: str, timeout: float = 30) -> dict[str, Any]:
        return wait(
            lambda: next((e for e in list(self.events) if matches(e)), None),
            what,
            timeout=timeout,
        )

    def stored(self) -> list[dict[str, Any]]:
        """TARSy's AssertEventsInOrder view: stored events once each, by ``db_event_id``."""
        unique = {e["db_event_id"]: e for e in list(self.events) if "db_event_id" in e}
        return [unique[key] for key in sorted(unique)]

    def close(self) -> None:
        self._exit.close()
        self._reader.join(timeout=5)


def _event_matches(event: dict[str, Any], expected: dict[str, Any]) -> bool:
    for key, want in expected.items():
        if key == "group":
            continue
        if key == "metadata":
            got = event.get("metadata") or {}
            if any(str(got.get(k)) != str(v) for k, v in want.items()):
                return False
        elif event.get(key) != want:
            return False
    return True


def events_not_in_order(actual: list[dict[str, Any]], expected: list[dict[str, Any]]) -> list:
    """TARSy's AssertEventsInOrder (helpers.go): the expected events (dicts of the fields
    to compare, ``type`` first) must appear in ``actual`` (``SocketClient.stored()``) in
    order, others in between allowed; consecutive ones with the same ``group`` in any
    order (parallel agents). Returns the expected events not found (empty: all were)."""
    missing: list[dict[str, Any]] = []
    e = a = 0
    while e < len(expected) and a < len(actual):
        if group := expected[e].get("group"):
            members = []
            while e < len(expected) and expected[e].get("group") == group:
                members.append(expected[e])
                e += 1
            matched = [False] * len(members)
            while a < len(actual) and not all(matched):
                # Those with metadata first, so a looser one cannot take their event.
                for with_metadata in (True, False):
                    found = next(
                        (
                            i
                            for i, m in enumerate(members)
                            if not matched[i]
                            and ("metadata" in m) == with_metadata
                            and _event_matches(actual[a], m)
                        ),
                        None,
                    )
                    if found is not None:
                        matched[found] = True
                        break
                a += 1
            missing += [m for m, ok in zip(members, matched, strict=True) if not ok]
            continue
        if _event_matches(actual[a], expected[e]):
            e += 1
        a += 1
    return missing + expected[e:]


def created(event_type: str, **more: Any) -> dict[str, Any]:
    """An expected ``timeline_event.created`` (``events_not_in_order``)."""
    return {"type": "timeline_event.created", "event_type": event_type, **more}


def completed(event_type: str, **more: Any) -> dict[str, Any]:
    return {"type": "timeline_event.completed", "event_type": event_type, **more}


# --- what several scenario files share --------------------------------------------------


def open_gate(run: Running, gate: str) -> None:
    """Let the fake model's calls held at ``"hold": "<gate>"`` answer."""
    record = run.scenario.record
    record.with_name(f"{record.stem}.{gate}.release").touch()


def llm_interaction_count(run: Running, session_id: str) -> int:
    """TARSy's CountLLMInteractions: the session's recorded model calls."""

    def count(execution: dict[str, Any]) -> int:
        return len(execution["llm_interactions"]) + sum(
            count(child) for child in execution.get("sub_agents", [])
        )

    trace = run.get(f"/sessions/{session_id}/trace")
    return sum(count(e) for stage in trace["stages"] for e in stage["executions"]) + len(
        trace["session_interactions"]
    )


def flatten(executions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Executions and their sub-agents', depth first."""
    found = []
    for execution in executions:
        found.append(execution)
        found.extend(flatten(execution.get("sub_agents", [])))
    return found


def without_durations(value: Any) -> Any:
    """Durations are TARSy's {DURATION_MS}: any value; ours leaves a 0 out."""
    if isinstance(value, dict):
        return {k: without_durations(v) for k, v in value.items() if k != "duration_ms"}
    if isinstance(value, list):
        return [without_durations(v) for v in value]
    return value


def tools_copy(tmp_path: Path, tools: Path) -> Path:
    """The mock MCP servers read their results from a copy the test may rewrite."""
    copy = tmp_path / "mcp_tools.json"
    copy.write_text(tools.read_text())
    return copy


def replayed(runs: dict[str, Any], name: str) -> dict[str, Any]:
    """One of a shared deployment's replays, or why it could not run."""
    outputs = runs[name]
    if "error" in outputs:
        raise AssertionError(f"{name}: {outputs['error']!r}\n{outputs['log']}")
    return outputs


def golden_interactions(directory: Path) -> list[tuple[str, dict[str, Any], list[tuple[str, str]]]]:
    """TARSy's ``trace_interactions/*.golden`` of a scenario directory: (file name, head,
    its sections in order)."""
    found = []
    for path in sorted((directory / "trace_interactions").glob("*.golden")):
        text = path.read_text().replace("{DURATION_MS}", "0")
        head, _, rest = text.partition("\n}\n")
        sections = re.findall(r"^=== (.+?) ===\n(.*?)(?=^=== |\Z)", rest, flags=re.M | re.S)
        found.append((path.name, json.loads(head + "\n}"), sections))
    return found
