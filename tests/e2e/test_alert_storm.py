"""An alert storm against a real deployment (issue 23 item 1): 50 identical alerts sent at
once from 10 clients through the REST API start exactly one investigation; the other 49
are recorded on it as repeats, and every answer names that one session.

On SQLite (one daphne, one qcluster) always; on PostgreSQL (two daphne processes, two
qclusters sharing a fresh database) when ``TARSY_TEST_POSTGRES_URL`` is set.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

from tests.e2e.harness import (
    DEMO_ALERT,
    ROOT,
    Deployment,
    demo_provider,
    deployment,
    postgres_server_url,
    scaled_deployment,
)

pytestmark = pytest.mark.e2e

ALERTS = 50
CLIENTS = 10
TERMINAL = ("completed", "failed", "cancelled", "timed_out")


def write_config(tmp_path: Path) -> Path:
    config = yaml.safe_load((ROOT / "config" / "tarsy.yaml").read_text())
    config.setdefault("defaults", {})["dedup"] = {
        "enabled": True,
        "fields": ["alertname", "namespace", "deployment"],
        "window": "10m",
    }
    path = tmp_path / "tarsy.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def storm(tarsy: Deployment) -> list[tuple[int, dict]]:
    """``ALERTS`` alerts of one storm (the same alert from different pods), sent from
    ``CLIENTS`` threads at once, spread over every web process."""
    token = tarsy.api_token()
    urls = tarsy.web_urls or [tarsy.base_url]

    def send(n: int) -> tuple[int, dict]:
        data = f"{DEMO_ALERT}\npod: payments-api-{n}\nstartsAt: 2026-11-26T10:{n:02d}:00Z"
        body = {"data": data}
        return tarsy.api("POST", "/api/v1/alerts", token, body, base_url=urls[n % len(urls)])

    with ThreadPoolExecutor(CLIENTS) as pool:
        return list(pool.map(send, range(ALERTS)))


def check_storm(tarsy: Deployment) -> None:
    answers = storm(tarsy)
    assert [status for status, _ in answers] == [202] * ALERTS, answers
    named = {body["session_id"] for _, body in answers}
    sessions = tarsy.query("SELECT id FROM alert_sessions_alertsession")
    assert len(sessions) == 1, (named, sessions)
    (session_id,) = sessions[0]
    assert {value.replace("-", "") for value in named} == {session_id}
    firsts = [body for _, body in answers if not body.get("deduplicated")]
    assert len(firsts) == 1, firsts
    counts = sorted(body["repeat_count"] for _, body in answers if body.get("deduplicated"))
    assert counts == list(range(1, ALERTS))  # each repeat counted once, none lost
    assert tarsy.query("SELECT count FROM alert_sessions_sessionrepeats") == [(ALERTS - 1,)]
    kept = tarsy.query("SELECT number, alert_data FROM alert_sessions_alertrepeat ORDER BY number")
    assert [number for number, _ in kept] == list(range(1, ALERTS))
    pods = {line for _, data in kept for line in data.splitlines() if line.startswith("pod: ")}
    assert len(pods) == ALERTS - 1  # every repeat's own payload
    item = tarsy.query(
        "SELECT content FROM alert_sessions_timelineevent WHERE event_type = 'alert_repeated'"
    )
    assert item == [(f"Alert repeated \u00d7{ALERTS - 1}",)]
    # The one investigation runs to its end, and no other starts.
    deadline = time.monotonic() + 120
    while True:
        (status,) = tarsy.query("SELECT status FROM alert_sessions_alertsession")[0]
        if status in TERMINAL or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert status == "completed", tarsy.log_tail()
    assert len(tarsy.query("SELECT id FROM alert_sessions_alertsession")) == 1
    assert (
        tarsy.query("SELECT COUNT(*) FROM alert_sessions_stage WHERE stage_type = 'investigation'")[
            0
        ][0]
        >= 1
    )


def test_an_alert_storm_starts_one_investigation_on_sqlite(tmp_path):
    env = {"TARSY_CONFIG": str(write_config(tmp_path))}
    with deployment(tmp_path, provider=demo_provider(chunk_delay=0), extra_env=env) as tarsy:
        check_storm(tarsy)


@pytest.mark.skipif(
    postgres_server_url() is None,
    reason="set TARSY_TEST_POSTGRES_URL to postgres://user:password@host:5432/db for a role "
    "that may CREATE DATABASE to run the storm on PostgreSQL",
)
def test_an_alert_storm_starts_one_investigation_on_postgresql(tmp_path):
    server_url = postgres_server_url()
    assert server_url is not None
    env = {"TARSY_CONFIG": str(write_config(tmp_path)), "TARSY_WORKERS": "2"}
    with scaled_deployment(
        tmp_path,
        provider=demo_provider(chunk_delay=0),
        server_url=server_url,
        webs=2,
        clusters=2,
        extra_env=env,
    ) as tarsy:
        check_storm(tarsy)
