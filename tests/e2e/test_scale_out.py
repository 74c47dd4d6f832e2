"""Two web hosts and two worker hosts sharing one PostgreSQL database.

Two daphne processes (A and B) and two qclusters run against a fresh database. Alerts
sent to either web process run exactly once, on either worker; a browser on A follows a
session, and the session list, live whoever runs them; a cancel sent to B stops a
worker's session at once.
"""

from __future__ import annotations

import difflib
import re
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.e2e.harness import (
    DEMO_ALERT,
    demo_provider,
    launch_browser,
    log_in,
    normalized,
    postgres_server_url,
    scaled_deployment,
)

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        postgres_server_url() is None,
        reason="the scale-out test needs PostgreSQL: set TARSY_TEST_POSTGRES_URL (or "
        "DATABASE_URL) to postgres://user:password@host:5432/db for a role that may "
        "CREATE DATABASE",
    ),
]

ALERTS = 20
TERMINAL = ("completed", "failed", "cancelled", "timed_out")

STREAMING_TEXT_WHILE_RUNNING = """() => {
  const status = document.querySelector('#session-status');
  const streaming = [...document.querySelectorAll('#timeline .item[data-status="streaming"]')]
    .filter(item => item.textContent.trim().length > 20);
  return status && status.dataset.status === 'in_progress' && streaming.length > 0
    ? streaming[0].textContent.trim() : null;
}"""

SETTLED = """() => !document.querySelector(
  '#chat-box[hx-trigger="load"], .htmx-request, .htmx-swapping, .htmx-settling, .htmx-added')"""


@pytest.fixture(scope="module")
def tarsy(tmp_path_factory):
    env = {
        "TARSY_WORKERS": "2",
        # Keep every event-log row until the end of the test: it is the evidence.
        "TARSY_EVENT_RETENTION": "3600",
    }
    with scaled_deployment(
        tmp_path_factory.mktemp("scale"),
        provider=demo_provider(chunk_delay=0.04),
        server_url=postgres_server_url(),
        webs=2,
        clusters=2,
        extra_env=env,
    ) as deployment:
        yield deployment


@pytest.fixture(scope="module")
def token(tarsy):
    return tarsy.api_token()


def submit(tarsy, token: str, base_url: str, data: str = DEMO_ALERT) -> str:
    status, body = tarsy.api(
        "POST",
        "/api/v1/alerts",
        token,
        {"data": data, "alert_type": "PodCrashLooping"},
        base_url=base_url,
    )
    assert status == 202, body
    return body["session_id"]


def session_status(tarsy, session_id: str) -> str:
    return tarsy.query(
        "SELECT status FROM alert_sessions_alertsession WHERE id = %s", (session_id,)
    )[0][0]


def wait_for_terminal(tarsy, session_ids: list[str], timeout: float) -> dict[str, str]:
    deadline = time.monotonic() + timeout
    while True:
        rows = tarsy.query(
            "SELECT id, status FROM alert_sessions_alertsession WHERE id = ANY(%s::uuid[])",
            (session_ids,),
        )
        statuses = dict(rows)
        if len(statuses) == len(session_ids) and all(s in TERMINAL for s in statuses.values()):
            return statuses
        if time.monotonic() > deadline:
            raise AssertionError(f"sessions still running after {timeout} s: {statuses}")
        time.sleep(0.5)


def page_html(page) -> str:
    """The session page's live part, without what differs only in time: the socket's
    state, the event cursor and ticking clocks. A fresh render loads its chat box
    after the page: wait for that, and for htmx to settle."""
    page.wait_for_function(SETTLED)
    html = page.inner_html("#live-root")
    html = re.sub(r'<span id="live-state"[^>]*>.*?</span>', "", html)
    html = re.sub(r'data-last-event-id="\d+"', "", html)
    html = re.sub(r'(<span class="elapsed"[^>]*>)[^<]*', r"\1", html)
    return normalized(re.sub(r"\s+", " ", html))


def assert_same_page(live: str, fresh: str) -> None:
    """The page as the live path left it equals a fresh render; else the lines that differ."""
    if live != fresh:
        diff = difflib.unified_diff(
            live.replace("><", ">\n<").splitlines(),
            fresh.replace("><", ">\n<").splitlines(),
            "live",
            "fresh render",
            lineterm="",
        )
        pytest.fail("the live page differs from a fresh render:\n" + "\n".join(diff))


def session_list(page) -> dict[str, object]:
    """The session list's live part: its panels, its count and its rows (as a set: live,
    a session that ends goes to the top; a fresh render orders by submission)."""
    page.wait_for_function(SETTLED)
    rows = page.eval_on_selector_all("#session-rows tr", "rows => rows.map(r => r.outerHTML)")
    return {
        "panels": normalized(re.sub(r"\s+", " ", page.inner_html(".panels"))),
        "count": page.text_content("#history-count"),
        "rows": sorted(normalized(re.sub(r"\s+", " ", row)) for row in rows),
    }


def test_alerts_sent_to_both_web_processes_run_once_each_across_both_clusters(tarsy, token):
    web_a, web_b = tarsy.web_urls
    targets = [web_a if n % 2 == 0 else web_b for n in range(ALERTS)]
    with ThreadPoolExecutor(max_workers=ALERTS) as pool:
        session_ids = list(
            pool.map(
                lambda args: submit(tarsy, token, args[1], f"{DEMO_ALERT}\nreplica: {args[0]}"),
                enumerate(targets),
            )
        )
    assert len(set(session_ids)) == ALERTS
    try:
        statuses = wait_for_terminal(tarsy, session_ids, timeout=400)
    except AssertionError:
        print(tarsy.log_tail())
        raise
    assert set(statuses.values()) == {"completed"}, statuses
    authors = tarsy.query(
        "SELECT DISTINCT author FROM alert_sessions_alertsession WHERE id = ANY(%s::uuid[])",
        (session_ids,),
    )
    assert authors == [("e2e-client",)]

    ids = [sid.replace("-", "") for sid in session_ids]
    # Claimed once: one in_progress and one completed status event per session.
    status_events = Counter(
        (session, status)
        for session, status in tarsy.query(
            "SELECT session_id, payload->>'status' FROM alert_sessions_sessionevent "
            "WHERE type = 'session.status' AND session_id = ANY(%s::uuid[])",
            (session_ids,),
        )
    )
    for session in ids:
        assert status_events[(session, "in_progress")] == 1, session
        assert status_events[(session, "completed")] == 1, session

    # One set of stages, each with the executions it expected, and one final analysis.
    stages = tarsy.query(
        "SELECT s.session_id, s.index, s.name, s.expected_agent_count, "
        "(SELECT count(*) FROM alert_sessions_agentexecution e WHERE e.stage_id = s.id) "
        "FROM alert_sessions_stage s WHERE s.session_id = ANY(%s::uuid[]) ORDER BY 1, 2",
        (session_ids,),
    )
    chains = {session: [] for session in ids}
    for session, _index, name, expected, executions in stages:
        assert executions == expected, (session, name, executions)
        chains[session].append(name)
    assert {tuple(names) for names in chains.values()} == {("investigation", "Executive Summary")}
    final_analyses = Counter(
        session
        for (session,) in tarsy.query(
            "SELECT session_id FROM alert_sessions_timelineevent "
            "WHERE event_type = 'final_analysis' AND session_id = ANY(%s::uuid[])",
            (session_ids,),
        )
    )
    assert all(final_analyses[session] == 1 for session in ids), final_analyses
    assert all(
        analysis
        for (analysis,) in tarsy.query(
            "SELECT final_analysis FROM alert_sessions_alertsession WHERE id = ANY(%s::uuid[])",
            (session_ids,),
        )
    )

    # Every timeline item was announced once, and each streamed one completed once.
    items = {
        item
        for (item,) in tarsy.query(
            "SELECT id FROM alert_sessions_timelineevent WHERE session_id = ANY(%s::uuid[])",
            (session_ids,),
        )
    }
    announced = Counter(
        item
        for (item,) in tarsy.query(
            "SELECT timeline_event_id FROM alert_sessions_sessionevent "
            "WHERE type = 'timeline_event.created' AND session_id = ANY(%s::uuid[])",
            (session_ids,),
        )
    )
    completed = Counter(
        item
        for (item,) in tarsy.query(
            "SELECT timeline_event_id FROM alert_sessions_sessionevent "
            "WHERE type = 'timeline_event.completed' AND session_id = ANY(%s::uuid[])",
            (session_ids,),
        )
    )
    assert set(announced) == items
    assert set(announced.values()) == {1}
    assert set(completed.values()) == {1}

    # Both worker hosts took part; each session names the one that ran it.
    clusters = tarsy.worker_clusters()
    ran_on = Counter(
        clusters.get(worker, f"unknown worker {worker}")
        for (worker,) in tarsy.query(
            "SELECT worker_id FROM alert_sessions_alertsession WHERE id = ANY(%s::uuid[])",
            (session_ids,),
        )
    )
    print(f"sessions per cluster: {dict(ran_on)}")
    assert set(ran_on) == {"qcluster-1", "qcluster-2"}, ran_on
    assert tarsy.query("SELECT func, result FROM django_q_task WHERE NOT success") == []


def test_a_browser_on_one_web_process_follows_a_session_sent_to_the_other(tarsy, token, playwright):
    web_a, web_b = tarsy.web_urls
    browser = launch_browser(playwright)
    page = browser.new_page()
    try:
        log_in(page, web_a)
        session_id = submit(tarsy, token, web_b)
        # Company for it: every worker busy, both web processes taking alerts.
        others = [submit(tarsy, token, url) for url in (web_a, web_b, web_a)]
        page.goto(f"{web_a}/sessions/{session_id}/")
        page.wait_for_selector('#live-state[data-state="live"]')

        # Text arrives while the session is still running: streamed, not loaded.
        streamed = page.wait_for_function(STREAMING_TEXT_WHILE_RUNNING, timeout=60_000)
        assert streamed.json_value()

        page.wait_for_selector('#session-status[data-status="completed"]', timeout=90_000)
        page.wait_for_selector("#executive-summary", timeout=10_000)
        assert "payments-api" in page.text_content("#timeline .item.final_analysis")
        assert page.locator('#timeline .item[data-status="streaming"]').count() == 0
        (worker,) = tarsy.query(
            "SELECT worker_id FROM alert_sessions_alertsession WHERE id = %s", (session_id,)
        )[0]
        assert tarsy.worker_clusters()[worker] in ("qcluster-1", "qcluster-2")

        # What arrived live is exactly what a fresh render shows.
        live = page_html(page)
        page.reload()
        page.wait_for_selector("#timeline .item.final_analysis")
        assert_same_page(live, page_html(page))
        wait_for_terminal(tarsy, others, timeout=120)
    except Exception:
        print(tarsy.log_tail())
        raise
    finally:
        browser.close()


def test_a_cancel_sent_to_one_web_process_stops_the_worker_within_two_seconds(
    tarsy, token, playwright
):
    web_a, web_b = tarsy.web_urls
    browser = launch_browser(playwright)
    page = browser.new_page()
    try:
        log_in(page, web_a)
        session_id = submit(tarsy, token, web_a)
        page.goto(f"{web_a}/sessions/{session_id}/")
        page.wait_for_function(STREAMING_TEXT_WHILE_RUNNING, timeout=60_000)

        posted = time.monotonic()
        status, body = tarsy.api(
            "POST", f"/api/v1/sessions/{session_id}/cancel", token, base_url=web_b
        )
        assert status == 200, body
        while session_status(tarsy, session_id) != "cancelled":
            assert time.monotonic() - posted < 10, session_status(tarsy, session_id)
            time.sleep(0.02)
        stopped_after = time.monotonic() - posted
        page.wait_for_selector('#session-status[data-status="cancelled"]', timeout=10_000)
        shown_after = time.monotonic() - posted
        print(
            f"cancel: cancelled in the database after {stopped_after:.2f} s, "
            f"on the page after {shown_after:.2f} s"
        )
        assert stopped_after < 2
        # The live path adds tenths of a second (measured 0.25-0.6 s on two busy cores).
        assert shown_after - stopped_after < 1

        # The worker wrote nothing more: no open item, no new event.
        assert not tarsy.query(
            "SELECT id FROM alert_sessions_timelineevent "
            "WHERE session_id = %s AND status = 'streaming'",
            (session_id,),
        )
        count = "SELECT count(*) FROM alert_sessions_sessionevent WHERE session_id = %s"
        events = tarsy.query(count, (session_id,))[0][0]
        time.sleep(1.5)
        assert tarsy.query(count, (session_id,))[0][0] == events

        live = page_html(page)
        page.reload()
        page.wait_for_selector('#session-status[data-status="cancelled"]')
        assert_same_page(live, page_html(page))
    except Exception:
        print(tarsy.log_tail())
        raise
    finally:
        browser.close()


def test_the_session_list_on_one_web_process_follows_sessions_sent_to_both(tarsy, playwright):
    web_a, web_b = tarsy.web_urls
    # An author of its own, and the list filtered to it: the other tests' sessions stay out.
    author = "list-client"
    token = tarsy.manage("create_api_token", author).strip()
    browser = launch_browser(playwright)
    page = browser.new_page()
    try:
        log_in(page, web_a)
        page.goto(f"{web_a}/?author={author}")
        page.wait_for_selector('#live-state[data-state="live"]')
        session_ids = [submit(tarsy, token, url) for url in (web_a, web_b, web_a, web_b)]
        wait_for_terminal(tarsy, session_ids, timeout=180)
        page.wait_for_function(
            "n => document.querySelectorAll('#session-rows tr').length === n",
            arg=len(session_ids),
            timeout=10_000,
        )
        live = session_list(page)
        page.reload()
        page.wait_for_selector('#live-state[data-state="live"]')
        fresh = session_list(page)
        for live_row, fresh_row in zip(live["rows"], fresh["rows"], strict=True):
            assert_same_page(live_row, fresh_row)
        assert live["panels"] == fresh["panels"]
        assert live["count"] == fresh["count"]
    except Exception:
        print(tarsy.log_tail())
        raise
    finally:
        browser.close()
