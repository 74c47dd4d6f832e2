"""After the investigation, on a real deployment (daphne + qcluster, SQLite, one worker,
the scripted demo provider answering without delay, so the figures are TARSy's own time):

1. **Chat.** Questions asked one after another on an ended session through
   ``POST /api/v1/sessions/{id}/chat/messages``: the 202 itself; the question → the first
   item of the answer in the database (a worker picked the task up and the model's first
   delta was written); the question → the answer completed (the demo chat agent lists
   the pods once, then answers).
2. **Scoring.** A DeepInvestigation session (its chain scores automatically) completing
   → its score completed (two judge turns); then ``POST …/score`` → the re-score completed.
3. **Review.** ``PATCH /api/v1/sessions/review`` claiming, then completing, 50 sessions in
   one request (each its own compare-and-set, activity row and event); and
   ``GET /api/v1/sessions/triage/needs_review`` (a page of 20) with 2,000 sessions waiting.

The database is polled every 5 ms, so each figure is up to 5 ms late.

Usage: .venv/bin/python bench/followups.py [--questions N] [--scores N] [--reviews N]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

from bench.stats import load_average, summary
from tests.e2e.harness import demo_provider, deployment
from tests.e2e.test_faults import statuses, wait_until

DEMO = demo_provider(chunk_delay=0)
ALERT = "alert: PodCrashLooping\nnamespace: payments\ndeployment: payments-api"
QUESTION = "What would rolling back the last deployment do?"
WAITING = 2000  # sessions in the review queue for the triage figure

SEED = """
from sessions.models import AlertSession
AlertSession.objects.bulk_create(
    AlertSession(alert_type="kubernetes", alert_data="seeded", chain_id="kubernetes-investigation",
                 status="completed", review_status="needs_review", author="bench")
    for _ in range({count})
)
"""


def poll(condition, timeout: float, what: str, tarsy) -> float:
    """Seconds until ``condition()`` holds, checked every 5 ms."""
    started = time.monotonic()
    while not condition():
        if time.monotonic() - started > timeout:
            raise AssertionError(f"not within {timeout} s: {what}\n{tarsy.log_tail()}")
        time.sleep(0.005)
    return time.monotonic() - started


def submit(tarsy, token: str, alert_type: str) -> str:
    status, body = tarsy.api(
        "POST", "/api/v1/alerts", token, {"data": ALERT, "alert_type": alert_type}
    )
    assert status == 202, body
    return body["session_id"]


def completed(tarsy, token: str, alert_type: str) -> str:
    session_id = submit(tarsy, token, alert_type)
    key = session_id.replace("-", "")
    wait_until(lambda: statuses(tarsy)[key] == "completed", 120, alert_type, tarsy)
    return session_id


def chat_trials(tarsy, token: str, session_id: str, count: int) -> dict[str, list[float]]:
    figures: dict[str, list[float]] = {"accepted": [], "first": [], "answered": []}
    for _ in range(count):
        asked = time.monotonic()
        status, body = tarsy.api(
            "POST", f"/api/v1/sessions/{session_id}/chat/messages", token, {"content": QUESTION}
        )
        figures["accepted"].append((time.monotonic() - asked) * 1000)
        assert status == 202, body

        def answer_items(stage: int = int(body["stage_id"])) -> bool:
            (count_,) = tarsy.query(
                "SELECT COUNT(*) FROM alert_sessions_timelineevent t "
                "JOIN alert_sessions_agentexecution e ON t.execution_id = e.id "
                "WHERE e.stage_id = %s",
                (stage,),
            )[0]
            return count_ > 0

        def answered(message: str = body["message_id"].replace("-", "")) -> bool:
            rows = tarsy.query(
                "SELECT status FROM alert_sessions_chatmessage WHERE id = %s", (message,)
            )
            assert rows, message
            assert rows[0][0] not in ("failed", "cancelled", "timed_out"), rows
            return rows[0][0] == "completed"

        poll(answer_items, 60, "the answer's first item", tarsy)
        figures["first"].append((time.monotonic() - asked) * 1000)
        poll(answered, 60, "the answer", tarsy)
        figures["answered"].append((time.monotonic() - asked) * 1000)
    return figures


def score_status(tarsy, session_id: str) -> str | None:
    rows = tarsy.query(
        "SELECT status FROM alert_sessions_sessionscore WHERE session_id = %s "
        "ORDER BY created_at DESC LIMIT 1",
        (session_id.replace("-", ""),),
    )
    return rows[0][0] if rows else None


def scoring_trials(tarsy, token: str, count: int) -> dict[str, list[float]]:
    figures: dict[str, list[float]] = {"auto": [], "rescore": []}
    for _ in range(count):
        session_id = submit(tarsy, token, "DeepInvestigation")
        key = session_id.replace("-", "")
        wait_until(lambda k=key: statuses(tarsy)[k] == "completed", 120, "deep demo", tarsy)
        ended = time.monotonic()
        poll(lambda s=session_id: score_status(tarsy, s) == "completed", 60, "auto score", tarsy)
        figures["auto"].append((time.monotonic() - ended) * 1000)
        asked = time.monotonic()
        status, body = tarsy.api("POST", f"/api/v1/sessions/{session_id}/score", token, {})
        assert status == 202, body
        poll(lambda s=session_id: score_status(tarsy, s) == "completed", 60, "re-score", tarsy)
        figures["rescore"].append((time.monotonic() - asked) * 1000)
    return figures


def review_trials(tarsy, token: str, count: int) -> dict[str, list[float]]:
    tarsy.manage("shell", "-c", SEED.format(count=WAITING))
    figures: dict[str, list[float]] = {"claim": [], "complete": [], "triage": []}
    for _ in range(count):
        started = time.monotonic()
        status, page = tarsy.api("GET", "/api/v1/sessions/triage/needs_review?page_size=20", token)
        figures["triage"].append((time.monotonic() - started) * 1000)
        assert status == 200, page
        status, batch = tarsy.api("GET", "/api/v1/sessions/triage/needs_review?page_size=50", token)
        ids = [session["id"] for session in batch["sessions"]]
        assert len(ids) == 50, batch
        for action, extra in (("claim", {}), ("complete", {"quality_rating": "accurate"})):
            started = time.monotonic()
            status, body = tarsy.api(
                "PATCH",
                "/api/v1/sessions/review",
                token,
                {"session_ids": ids, "action": action, **extra},
            )
            figures[action].append((time.monotonic() - started) * 1000)
            assert status == 200, body
            assert all(r["success"] for r in body["results"]), body
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=20)
    parser.add_argument("--scores", type=int, default=5)
    parser.add_argument("--reviews", type=int, default=20)
    args = parser.parse_args()
    print(f"starting; {load_average()}")
    with (
        tempfile.TemporaryDirectory() as workdir,
        deployment(Path(workdir), provider=DEMO) as tarsy,
    ):
        token = tarsy.api_token()
        session_id = completed(tarsy, token, "PodCrashLooping")
        chat = chat_trials(tarsy, token, session_id, args.questions)
        scoring = scoring_trials(tarsy, token, args.scores)
        review = review_trials(tarsy, token, args.reviews)
        load = load_average()
    print()
    print(f"SQLite (WAL), 1 worker, demo provider without delay; {load}")
    print(summary("chat: POST → 202", chat["accepted"], 50.0))
    print(summary("chat: question → first answer item", chat["first"], 500.0))
    print(summary("chat: question → answer completed", chat["answered"], 2000.0))
    print(summary("scoring: session completed → scored", scoring["auto"], 2000.0))
    print(summary("scoring: POST score → scored", scoring["rescore"], 2000.0))
    print(summary("review: triage page of 20 (2,000 waiting)", review["triage"], 100.0))
    print(summary("review: claim 50 sessions in one PATCH", review["claim"], 500.0))
    print(summary("review: complete 50 sessions in one PATCH", review["complete"], 500.0))


if __name__ == "__main__":
    main()
