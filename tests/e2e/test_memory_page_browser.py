"""The memory page in the browser (issue 21): a staff member finds a lesson by searching,
edits it, and its history says who did it. Real daphne and Chromium."""

from __future__ import annotations

import re

import pytest

from tests.e2e.harness import USERNAME, demo_provider, deployment, launch_browser, log_in

pytestmark = pytest.mark.e2e

SETUP = (
    "from django.contrib.auth import get_user_model\n"
    "from llm.embeddings import LocalHashingEmbedder\n"
    "from sessions.services.memory import memory_create\n"
    f"get_user_model().objects.filter(username={USERNAME!r}).update(is_staff=True)\n"
    "e = LocalHashingEmbedder()\n"
    "memory_create(embedder=e, content='DNS fails when CoreDNS is evicted',"
    " category='semantic', valence='neutral')\n"
    "m = memory_create(embedder=e, content='payments pods need 1Gi of memory',"
    " category='semantic', valence='positive')\n"
    "print(m.id)\n"
)


def test_a_staff_member_edits_a_memory_and_its_history_shows_it(tmp_path, playwright):
    with deployment(tmp_path, provider=demo_provider(chunk_delay=0)) as tarsy:
        memory_id = tarsy.manage("shell", "-c", SETUP).split()[-1]
        browser = launch_browser(playwright)
        page = browser.new_page()
        try:
            log_in(page, tarsy.base_url)
            page.click("header.topbar nav >> text=Memory")
            page.wait_for_url(f"{tarsy.base_url}/memories/")
            assert page.locator("tr.memory-row").count() == 2

            # The search box filters in place (htmx) and the URL follows.
            page.fill("#memory-q", "payments")
            page.wait_for_url(re.compile(r".*/memories/\?q=payments$"))
            page.wait_for_function("document.querySelectorAll('tr.memory-row').length === 1")
            page.click(f'tr[data-memory-id="{memory_id}"] a')
            page.wait_for_url(f"{tarsy.base_url}/memories/{memory_id}/")

            page.fill("#id_content", "payments pods need 2Gi of memory since v3")
            page.select_option("#id_valence", "negative")
            page.click("#memory-edit-form button[type=submit]")
            page.wait_for_selector("#memory-messages >> text=Memory saved.")
            assert "2Gi of memory since v3" in page.text_content("#memory-content")
            edited = page.locator('tr.memory-event[data-kind="edited"]')
            assert edited.count() == 1
            assert edited.locator("td.actor").text_content() == USERNAME
            assert "positive → negative" in edited.text_content()

            rows = tarsy.query(
                "SELECT kind, actor FROM alert_sessions_memoryevent WHERE memory_ref = %s "
                "ORDER BY id",
                (memory_id,),
            )
            assert rows == [("created", ""), ("edited", USERNAME)]
        except Exception:
            print(tarsy.log_tail())
            raise
        finally:
            browser.close()
