from __future__ import annotations

import os

import pytest

# Playwright's sync API runs an event loop in this thread; the tests never touch the
# ORM in-process (the deployment under test has its own database), so Django's guard
# against sync ORM calls from async contexts would only get in the way.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")


@pytest.fixture
def playwright():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        yield p


@pytest.fixture
def browser(playwright):
    """Debian's Chromium, headless, closed after the test."""
    from tests.e2e.harness import launch_browser

    browser = launch_browser(playwright)
    yield browser
    browser.close()
