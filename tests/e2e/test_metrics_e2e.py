"""/metrics of a real deployment: the LLM calls a qcluster worker made for a session show
up in daphne's /metrics, read from the database they share."""

from __future__ import annotations

import time
import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.harness import DEMO_ALERT, demo_provider, deployment

pytestmark = pytest.mark.e2e

METRICS_TOKEN = "e2e-metrics-token-0123456789"


def scrape(base_url: str, token: str) -> dict[tuple[str, frozenset], float]:
    request = urllib.request.Request(
        f"{base_url}/metrics", headers={"Authorization": f"Bearer {token}"}
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        text = response.read().decode()
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_a_workers_llm_calls_show_up_in_daphnes_metrics(tmp_path):
    with deployment(
        tmp_path,
        provider=demo_provider(chunk_delay=0),
        extra_env={"TARSY_METRICS_TOKEN": METRICS_TOKEN},
    ) as tarsy:
        try:
            with pytest.raises(urllib.error.HTTPError) as refused:
                scrape(tarsy.base_url, "not-the-token")
            assert refused.value.code == 401

            status, body = tarsy.api(
                "POST",
                "/api/v1/alerts",
                tarsy.api_token(),
                {"alert_type": "PodCrashLooping", "data": DEMO_ALERT},
            )
            assert status == 202, body
            session_hex = body["session_id"].replace("-", "")
            deadline = time.monotonic() + 90
            while time.monotonic() < deadline:
                [(state,)] = tarsy.query(
                    "SELECT status FROM alert_sessions_alertsession WHERE id = %s",
                    (session_hex,),
                )
                if state == "completed":
                    break
                time.sleep(0.3)
            assert state == "completed"

            [(calls, input_tokens)] = tarsy.query(
                "SELECT COUNT(*), SUM(input_tokens) FROM alert_sessions_llminteraction "
                "WHERE provider = 'demo' AND model_name = 'demo-investigator'"
            )
            assert calls >= 2
            demo = frozenset({("provider", "demo"), ("model", "demo-investigator")})
            # The database part may be cached for a few seconds.
            deadline = time.monotonic() + 15
            while True:
                samples = scrape(tarsy.base_url, METRICS_TOKEN)
                reported = samples.get(("tarsy_llm_call_duration_seconds_count", demo))
                if reported == calls or time.monotonic() > deadline:
                    break
                time.sleep(1)
            assert reported == calls
            input_kind = frozenset({*demo, ("kind", "input")})
            assert samples[("tarsy_llm_tokens_total", input_kind)] == input_tokens
            assert samples[("tarsy_sessions", frozenset({("status", "completed")}))] == 1
            assert samples[("tarsy_worker_clusters", frozenset())] == 1
            assert samples[("tarsy_database_up", frozenset())] == 1
        except Exception:
            print(tarsy.log_tail())
            raise
