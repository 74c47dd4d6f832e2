"""The demo says what it does (issue 22): the banner and the new-alert form say that the
demo investigates the bundled demo cluster whatever the alert says; every page starts
with a skip link to its content."""

from __future__ import annotations

import re

import pytest

from llm.models import LLMProvider, ProviderType

pytestmark = pytest.mark.django_db


def test_the_form_says_what_the_demo_investigates(browser_client, demo_provider):
    page = browser_client.get("/sessions/new/").content.decode()
    note = re.search(r'<p class="notice" id="demo-form-note">(.*?)</p>', page, re.S)
    assert note, page
    text = " ".join(note.group(1).split())
    assert "scripted demo model" in text
    assert "bundled demo cluster" in text
    assert "whatever the alert says" in text
    assert "<code>payments</code> if none" in text
    # The form's note comes before the alert's fields.
    assert page.index('id="demo-form-note"') < page.index('name="data"')


def test_the_banner_says_what_the_demo_investigates(browser_client, demo_provider):
    page = browser_client.get("/").content.decode()
    banner = re.search(
        r'<div class="banner demo" id="demo-banner" role="region" aria-label="Demo mode">(.*?)</div>',
        page,
        re.S,
    )
    assert banner, page
    text = " ".join(banner.group(1).split())
    assert "Whatever an alert says, the demo investigates the <strong>bundled demo cluster" in text
    assert "not your systems" in text


def test_no_demo_words_with_a_real_default_provider(browser_client, demo_provider):
    demo_provider.is_default = False
    demo_provider.save()
    LLMProvider.objects.create(
        name="gemini", type=ProviderType.GOOGLE, model="gemini-2.5-flash", is_default=True
    )
    page = browser_client.get("/sessions/new/").content.decode()
    assert 'id="demo-form-note"' not in page
    assert 'id="demo-banner"' not in page


@pytest.mark.parametrize("path", ["/", "/sessions/new/", "/system/", "/usage/", "/login/"])
def test_the_skip_link_comes_first_and_targets_main(browser_client, demo_provider, path):
    client = browser_client
    if path == "/login/":
        client.logout()
    page = client.get(path).content.decode()
    body = page[page.index("<body") :]
    first_link = re.search(r"<(a|button|input|select|textarea)\b[^>]*>", body)
    assert first_link, body
    assert first_link.group(0) == '<a class="skip-link" href="#main">'
    assert body.count('<main id="main" tabindex="-1">') == 1
