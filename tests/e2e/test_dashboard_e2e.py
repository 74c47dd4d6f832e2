"""The dashboard in a real browser: the list's filters, search, sort and pages in the URL
(back restores them); a session moving Queued → Active → History live on a filtered
page; Markdown on load and live, with hostile HTML inert; re-submit. Real daphne,
qcluster and Chromium."""

from __future__ import annotations

import os
import re
import signal
import textwrap
import time

import pytest
import yaml

from tests.e2e.harness import demo_provider, deployment, launch_browser, log_in, normalized

pytestmark = pytest.mark.e2e

SEED = textwrap.dedent(
    """
    from unittest import mock
    from sessions import services
    # Not queued: the deployment's own worker would race this seed to claim them.
    mock.patch("sessions.services.lifecycle.session_enqueue").start()
    from sessions.models import AlertSession
    authors = ["ana", "ben", "cho"]
    for n in range(36):
        session = services.session_create(
            alert_type="kubernetes",
            alert_data=f"alert {n}: " + ("zebra crossing outage" if n % 9 == 0 else "disk pressure"),
            chain_id="kubernetes-investigation",
            author=authors[n % 3],
        )
        claim = services.session_claim(session_id=session.id, worker_id="seed")
        services.session_end(
            lease=claim.lease,
            status="failed" if n % 4 == 0 else "completed",
            final_analysis=f"analysis {n}",
        )
    """
)

XSS = '<script>window.__xss = 1</script><img src=x onerror="window.__xss = 2">'
ANALYSIS = (
    "## Root cause\n\nThe pod runs out of **memory** " + XSS + "\n\n"
    "- see [the runbook](javascript:window.__xss=3)\n- `kubectl top pod`\n"
)


def rows(page) -> list[str]:
    return page.locator("#session-rows tr").evaluate_all("rs => rs.map(r => r.id)")


def wait_for_query(page, pattern: str) -> None:
    page.wait_for_function(
        "p => new RegExp(p).test(decodeURIComponent(location.search))", arg=pattern
    )


def wait_for_count(page, count: str) -> None:
    page.wait_for_function(
        "t => document.querySelector('#history-count').textContent.trim() === t", arg=count
    )


def wait_for_swap(page, previous: list[str]) -> None:
    page.wait_for_function(
        "prev => JSON.stringify([...document.querySelectorAll('#session-rows tr')].map(r => r.id))"
        " !== prev",
        arg=str(previous).replace("'", '"'),
    )


def test_filters_search_sort_and_pages_live_in_the_url(tmp_path, playwright):
    with deployment(tmp_path, provider=demo_provider()) as tarsy:
        tarsy.manage("shell", "-c", SEED)
        browser = launch_browser(playwright)
        page = browser.new_page()
        try:
            log_in(page, tarsy.base_url)
            page.goto(f"{tarsy.base_url}/")
            assert len(rows(page)) == 25  # the default page size
            assert "36 sessions" in page.text_content("#history-count")

            # Search: typed, applied without a reload, in the URL, matches marked.
            before = rows(page)
            page.fill("#q", "zebra")
            wait_for_query(page, "q=zebra")
            wait_for_swap(page, before)
            assert len(rows(page)) == 4  # n = 0, 9, 18, 27
            marks = page.locator("#session-rows mark").all_text_contents()
            assert marks
            assert {m.lower() for m in marks} == {"zebra"}

            # A status filter on top of it.
            before = rows(page)
            page.check('input[name="status"][value="failed"]')
            wait_for_query(page, "status=failed")
            wait_for_swap(page, before)
            assert len(rows(page)) == 1  # of 0, 9, 18 and 27, only 0 failed
            searched_and_failed = page.url
            # The address is the server's canonical one: no empty parameters.
            assert searched_and_failed.endswith("/?status=failed&q=zebra")

            # Clear the search, sort by author, 10 per page, page 2.
            page.fill("#q", "")
            wait_for_query(page, "^\\?status=failed$")
            # Each state on screen before the next action: under load the next request
            # could otherwise overtake this one, and Back would restore what it replaced.
            wait_for_count(page, "9 sessions match")
            page.uncheck('input[name="status"][value="failed"]')
            wait_for_query(page, "^$")
            page.wait_for_function("document.querySelectorAll('#session-rows tr').length === 25")
            page.click('th a.sort:text("Author")')
            wait_for_query(page, "sort=author")
            page.wait_for_selector('th[aria-sort="ascending"] a:text("Author")')
            authors = page.locator("#session-rows tr td:nth-child(4)").all_text_contents()
            assert authors == sorted(authors)
            page.click("#more-filters > summary")  # the rarer filters are folded away
            page.select_option("#f-per-page", "10")
            wait_for_query(page, "per_page=10")
            page.wait_for_function("document.querySelectorAll('#session-rows tr').length === 10")
            assert "sort=author" in page.url  # the sort survived the filter change
            page.click('nav.pagination a[rel="next"]')
            wait_for_query(page, "page=2")
            page.wait_for_selector("text=page 2 of 4")

            # Back, step by step, restores each state, form included.
            for query, count in [
                ("^\\?sort=author&per_page=10$", "36 sessions · page 1 of 4"),
                ("^\\?sort=author$", "36 sessions · page 1 of 2"),
                ("^$", "36 sessions · page 1 of 2"),
                ("^\\?status=failed$", "9 sessions match"),
                ("^\\?status=failed&q=zebra$", "1 session matches"),
            ]:
                page.go_back()
                wait_for_query(page, query)
                wait_for_count(page, count)
            assert page.url == searched_and_failed
            assert len(rows(page)) == 1
            assert page.input_value("#q") == "zebra"
            assert page.is_checked('input[name="status"][value="failed"]')
            assert page.input_value("#f-per-page") == "25"

            # The link, opened afresh, is the same view.
            page.goto(f"{tarsy.base_url}/")
            page.goto(searched_and_failed)
            assert len(rows(page)) == 1
            assert page.input_value("#q") == "zebra"
        except Exception:
            print(tarsy.log_tail())
            raise
        finally:
            browser.close()


def test_a_session_moves_from_queued_to_active_to_a_filtered_history_live(tmp_path, playwright):
    with deployment(tmp_path, provider=demo_provider(chunk_delay=0.02)) as tarsy:
        token = tarsy.api_token()
        browser = launch_browser(playwright)
        page = browser.new_page()
        try:
            log_in(page, tarsy.base_url)
            page.goto(f"{tarsy.base_url}/?status=completed&alert_type=kubernetes")
            page.wait_for_selector('#live-state[data-state="live"]')
            # No worker: the session waits in the queue.
            qcluster = list(tarsy.commands).index("qcluster")
            os.killpg(tarsy.processes[qcluster].pid, signal.SIGKILL)
            tarsy.processes[qcluster].wait(timeout=15)
            status, body = tarsy.api(
                "POST",
                "/api/v1/alerts",
                token,
                {"alert_type": "kubernetes", "data": "namespace: payments"},
            )
            assert status == 202
            session_id = body["session_id"]
            page.wait_for_selector(f"#queued-panel #queued-{session_id}", timeout=15_000)
            assert "#1" in page.text_content(f"#queued-{session_id}")

            tarsy.restart("qcluster")
            page.wait_for_selector(f"#active-panel #active-{session_id}", timeout=60_000)
            assert page.locator(f"#queued-{session_id}").count() == 0
            elapsed = page.text_content(f"#active-{session_id} .elapsed")
            time.sleep(1.5)
            assert page.text_content(f"#active-{session_id} .elapsed") != elapsed  # ticking

            row = f'#session-rows #session-row-{session_id} [data-status="completed"]'
            page.wait_for_selector(row, timeout=90_000)
            assert page.locator(f"#active-{session_id}").count() == 0
            # It matches the filters, so it is at the top of the history.
            assert rows(page)[0] == f"session-row-{session_id}"
        except Exception:
            print(tarsy.log_tail())
            raise
        finally:
            browser.close()


def _script(tmp_path) -> str:
    path = tmp_path / "markdown-script.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "chunk_delay": 0.03,
                "turns": [
                    {
                        "text": "Checking the pods.",
                        "tool_calls": [
                            {"name": "kubernetes.get_pods", "arguments": {"namespace": "payments"}}
                        ],
                    },
                    {"text": ANALYSIS},
                ],
            }
        )
    )
    return str(path)


def _normalized(html: str) -> str:
    """A page's live part, whatever differs only in time: the socket's state, the event
    cursor, ticking clocks, and what htmx leaves on live-inserted elements."""
    html = re.sub(r'<span id="live-state"[^>]*>.*?</span>', "", html)
    html = re.sub(r'data-last-event-id="\d+"', "", html)
    html = re.sub(r'(<span class="elapsed"[^>]*>)[^<]*', r"\1", html)
    return normalized(re.sub(r"\s+", " ", html))


def test_markdown_renders_on_load_and_live_and_hostile_html_stays_inert(tmp_path, playwright):
    provider = {
        "name": "scripted-md",
        "type": "scripted",
        "model": "script",
        "options": {"script": _script(tmp_path)},
        "is_default": True,
    }
    with deployment(tmp_path, provider=provider) as tarsy:
        browser = launch_browser(playwright)
        page = browser.new_page()
        dialogs = []
        page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        try:
            log_in(page, tarsy.base_url)
            page.goto(f"{tarsy.base_url}/sessions/new/")
            page.fill("#id_data", f"namespace: payments\nnote: {XSS} [x](javascript:alert(1))")
            page.click("#alert-form button[type=submit]")
            page.wait_for_url("**/sessions/*/")
            session_url = page.url
            page.wait_for_selector('#session-status[data-status="completed"]', timeout=90_000)

            # Live: the completed analysis arrived as Markdown.
            analysis = page.locator(".item.final_analysis .markdown")
            assert analysis.locator("h2").text_content() == "Root cause"
            assert analysis.locator("strong").text_content() == "memory"
            assert analysis.locator("code").text_content() == "kubectl top pod"
            live_html = _normalized(page.inner_html("#live-root"))

            # Nothing hostile ran or became an element, live or on load.
            for _ in range(2):
                assert page.evaluate("window.__xss") is None
                assert page.locator("#live-root img").count() == 0
                assert page.locator("#live-root script").count() == 0
                hrefs = page.locator("#live-root a").evaluate_all("as => as.map(a => a.href)")
                assert not [h for h in hrefs if h.lower().startswith("javascript")]
                assert XSS in page.text_content(".alert-data pre")  # shown as text
                page.reload()
                page.wait_for_selector(".item.final_analysis .markdown h2")
                # The chat box loads itself after the page (hx-trigger="load"): on a
                # loaded machine that GET can still be in flight here.
                page.wait_for_selector("#chat-box[aria-labelledby]", state="attached")
            assert dialogs == []

            # A fresh render is the same HTML as the page that followed the run live.
            assert _normalized(page.inner_html("#live-root")) == live_html

            # The tool result is not in the page until it is opened.
            page.click(".item.llm_tool_call details.result summary")
            page.wait_for_selector(".item.llm_tool_call .body-loaded pre")

            # A deep link opens its item (and what hides it) and scrolls to it.
            item_id = page.get_attribute(".item.llm_tool_call", "id")
            page.goto(f"{tarsy.base_url}/")
            page.goto(f"{session_url}#{item_id}")
            page.wait_for_selector(f"#{item_id} details.result[open] .body-loaded pre")
            assert page.evaluate(
                "id => { const r = document.getElementById(id).getBoundingClientRect();"
                " return r.top > -2 && r.top < window.innerHeight; }",  # sub-pixel scroll
                item_id,
            )

            # Re-submit: the form comes pre-filled; submitting starts a new session.
            page.click("#resubmit-link")
            page.wait_for_selector("#resubmit-note")
            assert XSS in page.input_value("#id_data")
            page.click("#alert-form button[type=submit]")
            page.wait_for_url("**/sessions/*/")
            assert page.url != session_url
            page.wait_for_selector('#session-status[data-status="completed"]', timeout=90_000)
            assert XSS in page.text_content(".alert-data pre")
        except Exception:
            print(tarsy.log_tail())
            raise
        finally:
            browser.close()
