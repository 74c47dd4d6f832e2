"""The review workflow in a real browser: an investigation ends and its session page's
review panel says it needs review (live); on the triage page a reviewer claims it, then
completes it with a rating from the Mine tab, and acknowledges the rest in bulk; the
session page, still open in another tab, follows each step live. Real daphne, qcluster
and Chromium."""

from __future__ import annotations

import textwrap

import pytest

from tests.e2e.harness import USERNAME, demo_provider, deployment, launch_browser, log_in

pytestmark = pytest.mark.e2e

SEED = textwrap.dedent(
    """
    from unittest import mock
    from sessions import services
    # Not queued: the deployment's own worker would race this seed to claim them.
    mock.patch("sessions.services.lifecycle.session_enqueue").start()
    for n in range(2):
        session = services.session_create(
            alert_type="kubernetes",
            alert_data=f"seeded alert {n}",
            chain_id="kubernetes-investigation",
            author="seed",
        )
        claim = services.session_claim(session_id=session.id, worker_id="seed")
        services.session_end(lease=claim.lease, status="completed", final_analysis="seeded")
    """
)


def review_status(page) -> str:
    return page.get_attribute("#review-title .review-status", "data-review-status")


def triage_rows(page) -> list[str]:
    return page.locator("#triage-rows tr").evaluate_all(
        "rows => rows.map(r => r.id.replace('triage-row-', ''))"
    )


def test_claim_and_complete_a_review_from_the_triage_page(tmp_path, playwright):
    with deployment(tmp_path, provider=demo_provider(chunk_delay=0.005)) as tarsy:
        tarsy.manage("shell", "-c", SEED)
        browser = launch_browser(playwright)
        context = browser.new_context()
        session_page = context.new_page()
        try:
            log_in(session_page, tarsy.base_url)
            session_page.goto(f"{tarsy.base_url}/sessions/new/")
            session_page.select_option("#id_alert_type", "kubernetes")
            session_page.fill("#id_data", "alert: PodCrashLooping\nnamespace: payments")
            session_page.click("#alert-form button[type=submit]")
            session_page.wait_for_url("**/sessions/*/")
            session_id = session_page.url.rstrip("/").rsplit("/", 1)[1]
            assert "starts when the investigation ends" in session_page.text_content(
                "#review-panel"
            )

            # The investigation ends: the panel turns to "needs review" without a reload.
            session_page.wait_for_selector(
                '#session-status[data-status="completed"]', timeout=120_000
            )
            session_page.wait_for_selector(
                '#review-title [data-review-status="needs_review"]', timeout=15_000
            )
            assert session_page.is_visible("#review-claim")

            triage = context.new_page()
            triage.goto(f"{tarsy.base_url}/")
            triage.click("#nav-triage")
            triage.wait_for_url("**/triage/")
            waiting = triage_rows(triage)
            assert session_id in waiting
            assert len(waiting) == 3

            # Claim one row: the list swaps in place and says what happened.
            triage.click(f'#triage-row-{session_id} button[data-action="claim"]')
            triage.wait_for_selector("#triage-done")
            assert triage.text_content("#triage-done") == "1 session claimed."
            assert session_id not in triage_rows(triage)
            assert triage.text_content("#tab-mine .count") == "1"
            # The session page, open in the other tab, followed the claim live.
            session_page.wait_for_selector(
                '#review-title [data-review-status="in_progress"]', timeout=15_000
            )
            assert session_page.text_content("#review-assignee") == USERNAME

            # Complete it from the Mine tab: tick it, choose the action and a rating.
            triage.click("#tab-mine")
            triage.wait_for_url("**/triage/?tab=mine")
            assert triage_rows(triage) == [session_id]
            triage.check(f'#triage-row-{session_id} input[name="session_ids"]')
            triage.select_option("#bulk-action", "complete")
            triage.select_option("#bulk-rating", "partially_accurate")
            triage.fill("#bulk-feedback", "found the crash loop, missed the OOM kill")
            triage.click("#bulk-apply")
            triage.wait_for_selector("#triage-done")
            assert triage.text_content("#triage-done") == "1 session completed."
            assert triage_rows(triage) == []

            # Acknowledge the seeded sessions in bulk, all of the page at once.
            triage.click("#tab-needs_review")
            triage.wait_for_url("**/triage/?tab=needs_review")
            triage.check("#triage-select-all")
            triage.select_option("#bulk-action", "acknowledge")
            triage.click("#bulk-apply")
            triage.wait_for_selector("#triage-done")
            assert triage.text_content("#triage-done") == "2 sessions acknowledged."
            assert triage_rows(triage) == []
            triage.click("#tab-reviewed")
            triage.wait_for_url("**/triage/?tab=reviewed")
            assert len(triage_rows(triage)) == 3

            # The session page shows the review and its log, live.
            session_page.wait_for_selector(
                '#review-title [data-review-status="reviewed"]', timeout=15_000
            )
            assert (
                session_page.get_attribute("#review-rating .quality-rating", "data-quality-rating")
                == "partially_accurate"
            )
            assert "missed the OOM kill" in session_page.text_content("#review-feedback")
            steps = session_page.locator("#review-activity li").evaluate_all(
                "items => items.map(i => i.dataset.action)"
            )
            assert steps == ["claim", "complete"]

            # What the browser did is what the database and the API hold.
            token = tarsy.api_token()
            status, body = tarsy.api("GET", f"/api/v1/sessions/{session_id}/review-activity", token)
            assert status == 200
            assert [(a["actor"], a["action"]) for a in body["activities"]] == [
                (USERNAME, "claim"),
                (USERNAME, "complete"),
            ]
            assert tarsy.query(
                "SELECT review_status, assignee, quality_rating FROM alert_sessions_alertsession "
                "WHERE id = %s",
                (session_id.replace("-", ""),),
            ) == [("reviewed", USERNAME, "partially_accurate")]
        except Exception:
            print(tarsy.log_tail())
            raise
        finally:
            browser.close()
