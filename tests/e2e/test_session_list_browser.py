"""The session list on a laptop screen (issue 22): the first history row above the fold
at 1366x768 in light and dark, summaries as plain text, chips; a queued and a running
session cancelled from their panel rows after confirming. Real daphne, qcluster and
Chromium."""

from __future__ import annotations

import json
import textwrap

import pytest

from tests.e2e.harness import deployment, launch_browser, log_in

pytestmark = pytest.mark.e2e

LAPTOP = {"width": 1366, "height": 768}

SEED = textwrap.dedent(
    """
    from unittest import mock
    from sessions import services
    # Not queued: the deployment's own worker would race this seed to claim them.
    mock.patch("sessions.services.lifecycle.session_enqueue").start()
    from sessions.models import AgentExecution, Chat, ChatMessage, Stage
    for n in range(30):
        session = services.session_create(
            alert_type="kubernetes",
            alert_data=f"alert {n}",
            chain_id="kubernetes-investigation",
            author="ana",
        )
        claim = services.session_claim(session_id=session.id, worker_id="seed")
        services.session_end(
            lease=claim.lease,
            status="completed",
            final_analysis="analysis",
            executive_summary=(
                f"## Summary {n}\\n\\nThe **pod** `payments-api-{n}` ran out of *memory*; "
                "see [the runbook](https://runbooks.example/oom). " + "More words. " * 20
            ),
        )
    stage = Stage.objects.create(session=session, name="investigate", index=0,
                                 parallel_type="multi_agent", expected_agent_count=2)
    for i in (1, 2):
        AgentExecution.objects.create(session=session, stage=stage, agent_name="a", agent_index=i)
    chat = Chat.objects.create(session=session)
    ChatMessage.objects.create(chat=chat, session=session, content="why?", status="completed")
    """
)

# Where the first history row is, and what the page's first summary says.
FIRST_ROW = """() => {
  const row = document.querySelector('#session-rows tr');
  const box = row.getBoundingClientRect();
  return {top: box.top, bottom: box.bottom, scrollY: window.scrollY,
          summary: (row.querySelector('.summary-text') || {}).textContent,
          chips: [...row.querySelectorAll('.chip')].map(c => c.textContent)};
}"""


def assert_first_row_above_the_fold(page) -> dict:
    where = page.evaluate(FIRST_ROW)
    assert where["scrollY"] == 0
    assert where["top"] < LAPTOP["height"], where
    assert where["bottom"] <= LAPTOP["height"], where  # the whole row, not its top edge
    return where


def test_the_first_row_is_above_the_fold_on_a_laptop_in_light_and_dark(tmp_path, playwright):
    provider = {
        "name": "demo",
        "type": "scripted",
        "model": "demo-investigator",
        "options": {"script": "demo"},
        "is_default": True,
    }
    with deployment(tmp_path, provider=provider) as tarsy:
        tarsy.manage("shell", "-c", SEED)
        browser = launch_browser(playwright)
        page = browser.new_page(viewport=LAPTOP)
        try:
            log_in(page, tarsy.base_url)
            for theme in ("light", "dark"):
                page.evaluate("t => localStorage.setItem('tarsy-theme', t)", theme)
                page.goto(f"{tarsy.base_url}/")
                page.wait_for_selector('#live-state[data-state="live"]')
                assert page.get_attribute("html", "data-theme") == theme
                where = assert_first_row_above_the_fold(page)
                # The newest (seeded last) session: plain text, its chips.
                assert where["summary"].startswith(
                    "Summary 29 The pod payments-api-29 ran out of memory; see the runbook."
                )
                for mark in ("**", "`", "##", "]("):
                    assert mark not in where["summary"]
                assert where["chips"] == ["parallel", "chat 1"]
                # The folded filters open from the keyboard, and fold the page no more
                # than it was: the search and statuses stay on the bar.
                assert not page.is_visible("#f-per-page")
                page.focus("#more-filters > summary")
                page.keyboard.press("Enter")
                page.wait_for_selector("#f-per-page", state="visible")
                page.keyboard.press("Enter")
                page.wait_for_selector("#f-per-page", state="hidden")
        except Exception:
            print(tarsy.log_tail())
            raise
        finally:
            browser.close()


def _slow_provider(tmp_path) -> dict:
    script = tmp_path / "slow-script.json"
    words = " ".join(f"w{n}" for n in range(3000))
    # Minutes of streaming: the session is still running when the test cancels it.
    script.write_text(
        json.dumps({"chunk_delay": 0.05, "turns": [{"thinking": words, "text": "Done."}]})
    )
    return {
        "name": "slow",
        "type": "scripted",
        "model": "slow",
        "options": {"script": str(script)},
        "is_default": True,
    }


# Ended sessions written as rows (nothing queued: the slow one must be the first to run).
ENDED = textwrap.dedent(
    """
    from django.utils import timezone
    from sessions.models import AlertSession
    for n in range(3):
        AlertSession.objects.create(
            alert_type="kubernetes", alert_data="a", chain_id="kubernetes-investigation",
            status="completed", started_at=timezone.now(), completed_at=timezone.now(),
            executive_summary="done",
        )
    """
)


def submit(page, base_url: str, data: str) -> str:
    page.goto(f"{base_url}/sessions/new/")
    page.fill("#id_data", data)
    page.click("#alert-form button[type=submit]")
    page.wait_for_url("**/sessions/*/")
    return page.url.rstrip("/").rsplit("/", 1)[1]


def test_cancel_a_queued_and_a_running_session_from_their_rows(tmp_path, playwright):
    # One session at a time: the second alert waits in the queue.
    with deployment(
        tmp_path,
        provider=_slow_provider(tmp_path),
        extra_env={"TARSY_MAX_CONCURRENT_SESSIONS": "1"},
    ) as tarsy:
        browser = launch_browser(playwright)
        page = browser.new_page(viewport=LAPTOP)
        dialogs: list[str] = []
        cancels: list[str] = []
        page.on(
            "request",
            lambda r: cancels.append(r.url) if r.method == "POST" and "/cancel/" in r.url else None,
        )
        try:
            tarsy.manage("shell", "-c", ENDED)
            log_in(page, tarsy.base_url)
            running = submit(page, tarsy.base_url, "namespace: payments")
            page.wait_for_selector('#session-status[data-status="in_progress"]', timeout=30_000)
            waiting = submit(page, tarsy.base_url, "namespace: checkout")
            page.goto(f"{tarsy.base_url}/")
            page.wait_for_selector('#live-state[data-state="live"]')
            page.wait_for_selector(f"#active-{running}")
            page.wait_for_selector(f"#queued-{waiting}")
            # With a session in each panel, the history still starts on the screen.
            assert_first_row_above_the_fold(page)

            # Said no to: nothing is sent, the session still waits.
            page.once("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
            page.click(f"#queued-{waiting} .row-cancel button")
            assert len(dialogs) == 1
            assert "waiting in the queue" in dialogs[0]
            assert cancels == []
            assert page.is_visible(f"#queued-{waiting}")

            # Confirmed: the queued session leaves the queue, cancelled, into the history.
            page.once("dialog", lambda d: (dialogs.append(d.message), d.accept()))
            page.click(f"#queued-{waiting} .row-cancel button")
            page.wait_for_selector(
                f'#session-rows #session-row-{waiting} [data-status="cancelled"]', timeout=30_000
            )
            page.wait_for_selector(f"#queued-{waiting}", state="detached")
            assert cancels == [f"{tarsy.base_url}/sessions/{waiting}/cancel/"]

            # The running one: cancelling at once, then cancelled by its worker.
            page.once("dialog", lambda d: (dialogs.append(d.message), d.accept()))
            page.focus(f"#active-{running} .row-cancel button")
            page.keyboard.press("Enter")  # reachable and usable from the keyboard
            page.wait_for_function(
                "id => { const li = document.getElementById('active-' + id);"
                " return !li || !li.querySelector('.row-cancel'); }",
                arg=running,
                timeout=30_000,
            )
            page.wait_for_selector(
                f'#session-rows #session-row-{running} [data-status="cancelled"]', timeout=60_000
            )
            page.wait_for_selector(f"#active-{running}", state="detached")
            assert len(dialogs) == 3
            assert "waiting in the queue" not in dialogs[2]
            assert cancels[-1] == f"{tarsy.base_url}/sessions/{running}/cancel/"
            # What the page shows live is what a fresh render shows.
            page.reload()
            for session_id in (waiting, running):
                status = page.get_attribute(
                    f"#session-row-{session_id} [data-status]", "data-status"
                )
                assert status == "cancelled"
            assert_first_row_above_the_fold(page)
        except Exception:
            print(tarsy.log_tail())
            raise
        finally:
            browser.close()
