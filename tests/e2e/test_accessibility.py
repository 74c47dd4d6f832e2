"""Accessibility audit (issue 22): axe-core finds no serious or critical problem on any of
the app's own pages, in the light and the dark theme, and the skip link is the first Tab
stop and takes the keyboard past the navigation to the page's content.

One deployment on the scripted demo: a deep investigation (parallel agents, synthesis,
executive summary) that completed, was scored and answered a chat question, and a memory.
axe-core is the npm package of tests/npm/package.json (bin/test installs it); it runs in
the page (``add_script_tag``), on the page as a user sees it once htmx has settled.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.harness import (
    PASSWORD,
    USERNAME,
    demo_provider,
    deployment,
    launch_browser,
    log_in,
    submit_alert,
)

pytestmark = pytest.mark.e2e

AXE = Path(__file__).resolve().parents[1] / "npm" / "node_modules" / "axe-core" / "axe.min.js"
BLOCKING = ("serious", "critical")

MEMORY = (
    "from django.contrib.auth import get_user_model\n"
    "from llm.embeddings import LocalHashingEmbedder\n"
    "from sessions.services.memory import memory_create\n"
    f"get_user_model().objects.filter(username={USERNAME!r}).update(is_staff=True)\n"
    "m = memory_create(embedder=LocalHashingEmbedder(), content='payments pods need 1Gi of"
    " memory', category='semantic', valence='positive')\n"
    "print(m.id)\n"
)

# htmx has nothing left to load or swap (the chat box loads itself after the page; a
# loader that swaps nothing, such as the trace's marks, stays in place once it has loaded).
SETTLED = """() => document.readyState === 'complete' && !document.querySelector(
  '[hx-trigger="load"]:not([hx-swap="none"]), .htmx-request, .htmx-swapping, .htmx-settling,'
  + ' .htmx-added')"""

UNSETTLED = """() => [document.readyState, ...[...document.querySelectorAll(
  '[hx-trigger="load"]:not([hx-swap="none"]), .htmx-request, .htmx-swapping, .htmx-settling,'
  + ' .htmx-added')]
  .map(e => e.outerHTML.slice(0, 200))]"""

RUN_AXE = """async () => {
  const result = await axe.run(document, {resultTypes: ['violations']});
  return result.violations.map(v => ({
    id: v.id, impact: v.impact, help: v.help,
    nodes: v.nodes.slice(0, 4).map(n => n.target.join(' ') + (n.failureSummary
      ? ' — ' + n.failureSummary.split('\\n').slice(1, 2).join('').trim() : '')),
    count: v.nodes.length,
  }));
}"""


# The first element of the page that Tab can reach (document order; no positive tabindex
# is used anywhere).
FIRST_TAB_STOP = """() => [...document.querySelectorAll(
  'a[href], button, input, select, textarea, summary, [tabindex]')]
  .find(e => e.tabIndex >= 0 && !e.disabled && !e.closest('[hidden]')
    && e.getAttribute('type') !== 'hidden').outerHTML"""


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> Iterator[dict[str, Any]]:
    """One deployment and one browser for the module (the ``playwright`` fixture is per
    test): the tests only read."""
    from playwright.sync_api import sync_playwright

    if not AXE.exists():
        pytest.fail(f"{AXE} is missing: bin/test installs tests/npm/package.json")
    tmp_path = tmp_path_factory.mktemp("accessibility")
    with (
        deployment(tmp_path, provider=demo_provider(chunk_delay=0.01)) as tarsy,
        sync_playwright() as playwright,
    ):
        browser = launch_browser(playwright)
        try:
            page = browser.new_page()
            log_in(page, tarsy.base_url)
            session_id = submit_alert(page, tarsy.base_url, "DeepInvestigation")
            page.wait_for_selector('#session-status[data-status="completed"]', timeout=120_000)
            page.wait_for_selector('#score-badge[data-score-status="completed"]', timeout=90_000)
            page.wait_for_selector("#chat-send:not([disabled])", timeout=30_000)
            page.fill("#chat-content", "Why does payments-api keep restarting?")
            page.click("#chat-send")
            page.wait_for_selector(
                '.stage[data-stage-type="chat"] .stage-header[data-status="completed"]',
                timeout=60_000,
            )
            page.close()
            memory_id = tarsy.manage("shell", "-c", MEMORY).split()[-1]
            yield {
                "tarsy": tarsy,
                "browser": browser,
                "session": session_id,
                "memory": memory_id,
            }
        except Exception:
            print(tarsy.log_tail())
            raise
        finally:
            browser.close()


def app_pages(demo: dict[str, Any]) -> list[tuple[str, str]]:
    session, memory = demo["session"], demo["memory"]
    return [
        ("session list", "/"),
        ("new alert", "/sessions/new/"),
        ("session (scored, with chat)", f"/sessions/{session}/"),
        ("trace", f"/sessions/{session}/trace/"),
        ("triage", "/triage/"),
        ("system", "/system/"),
        ("usage", "/usage/"),
        ("memories", "/memories/"),
        ("memory", f"/memories/{memory}/"),
    ]


def audit(page, url: str) -> list[dict[str, Any]]:
    response = page.goto(url)
    assert response is not None
    assert response.status == 200, url
    try:
        page.wait_for_function(SETTLED, timeout=30_000)
    except Exception as exc:
        busy = page.evaluate(UNSETTLED)
        raise AssertionError(f"{url} did not settle: {busy}") from exc
    page.add_script_tag(path=str(AXE))
    return page.evaluate(RUN_AXE)


def themed_context(browser, theme: str):
    context = browser.new_context(viewport={"width": 1366, "height": 768})
    # What the theme toggle stores; base.html's head applies it before the first paint.
    context.add_init_script(
        f"try {{ localStorage.setItem('tarsy-theme', '{theme}') }} catch (e) {{}}"
    )
    return context


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_axe_finds_nothing_serious_on_any_app_page(demo, theme):
    tarsy = demo["tarsy"]
    context = themed_context(demo["browser"], theme)
    findings: dict[str, list[dict[str, Any]]] = {}
    unaudited: list[str] = []
    try:
        page = context.new_page()
        findings["login"] = audit(page, f"{tarsy.base_url}/login/")
        assert page.evaluate("document.documentElement.getAttribute('data-theme')") == theme
        log_in(page, tarsy.base_url)
        for name, path in app_pages(demo):
            try:
                findings[name] = audit(page, tarsy.base_url + path)
            except AssertionError as exc:  # audit the other pages all the same
                unaudited.append(f"{name}: {exc}")
                continue
            assert page.evaluate("document.documentElement.getAttribute('data-theme')") == theme
    finally:
        context.close()
    report = "\n".join(
        f"[{theme}] {name}: {v['impact']} {v['id']} (on {v['count']}) {v['help']}: "
        + "; ".join(v["nodes"])
        for name, violations in findings.items()
        for v in violations
    )
    print(report or f"[{theme}] no axe findings")
    assert not unaudited, unaudited
    assert len(findings) == len(app_pages(demo)) + 1
    blocking = [
        (name, v["id"])
        for name, violations in findings.items()
        for v in violations
        if v["impact"] in BLOCKING
    ]
    assert not blocking, report


@pytest.mark.parametrize("where", ["list", "session"])
def test_the_skip_link_is_the_first_tab_stop_and_jumps_to_the_content(demo, where):
    tarsy = demo["tarsy"]
    context = demo["browser"].new_context(viewport={"width": 1366, "height": 768})
    try:
        page = context.new_page()
        log_in(page, tarsy.base_url)
        if where == "session":
            page.goto(f"{tarsy.base_url}/sessions/{demo['session']}/")
        page.wait_for_function(SETTLED, timeout=30_000)
        link = page.locator("a.skip-link")
        # Hidden above the page until it has the focus.
        assert link.bounding_box()["y"] + link.bounding_box()["height"] <= 0
        page.keyboard.press("Tab")
        focused = page.evaluate(
            "[document.activeElement.className, document.activeElement.textContent]"
        )
        assert focused == ["skip-link", "Skip to content"]
        box = page.evaluate(
            "[JSON.stringify(document.querySelector('a.skip-link').getBoundingClientRect()),"
            " window.scrollY]"
        )
        assert box[0].startswith('{"x":'), box
        assert '"y":-' not in box[0], box
        page.keyboard.press("Enter")
        page.wait_for_function("document.activeElement.id === 'main'")
        # The next Tab stop is the content's first control, not the navigation's.
        page.keyboard.press("Tab")
        inside = page.evaluate(
            "document.getElementById('main').contains(document.activeElement)"
            " && document.activeElement !== document.getElementById('main')"
        )
        assert inside
        assert page.evaluate("!document.querySelector('header').contains(document.activeElement)")
    finally:
        context.close()


def test_the_login_page_skip_link_reaches_the_form(demo):
    """Logged out, the first Tab stop is the skip link too, and the form follows it."""
    context = demo["browser"].new_context()
    try:
        page = context.new_page()
        page.goto(f"{demo['tarsy'].base_url}/login/")
        # The username field has the focus (autofocus); from the top of the page, the
        # first Tab stop is the skip link.
        assert page.evaluate("document.activeElement.id") == "id_username"
        first = page.evaluate(FIRST_TAB_STOP)
        assert first == '<a class="skip-link" href="#main">Skip to content</a>'
        page.focus("a.skip-link")
        page.keyboard.press("Enter")
        page.wait_for_function("document.activeElement.id === 'main'")
        page.keyboard.press("Tab")
        assert page.evaluate("document.activeElement.id") == "id_username"
        page.keyboard.type(USERNAME)
        page.keyboard.press("Tab")
        page.keyboard.type(PASSWORD)
        page.keyboard.press("Enter")
        page.wait_for_url(f"{demo['tarsy'].base_url}/")
    finally:
        context.close()


def test_the_audit_sees_a_contrast_problem_when_there_is_one(demo):
    """The audit can fail: grey text on the dark theme's card is a serious finding."""
    context = themed_context(demo["browser"], "dark")
    try:
        page = context.new_page()
        log_in(page, demo["tarsy"].base_url)
        page.wait_for_function(SETTLED, timeout=30_000)
        page.evaluate(
            """() => { const p = document.createElement('p');
            p.id = 'faint'; p.textContent = 'barely readable';
            p.style.color = '#3a4150'; p.style.background = 'var(--card-bg)';
            document.getElementById('main').prepend(p); }"""
        )
        page.add_script_tag(path=str(AXE))
        found = [(v["id"], v["impact"], v["nodes"]) for v in page.evaluate(RUN_AXE)]
        assert any(
            rule == "color-contrast" and impact == "serious" and any("#faint" in n for n in nodes)
            for rule, impact, nodes in found
        ), found
    finally:
        context.close()
