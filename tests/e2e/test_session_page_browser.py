"""The session page at 3 a.m. (issue 22): it follows the live investigation, pauses when
the reader scrolls up and resumes on "Jump to live", jumps to the answer at the end;
share links open a stage or an item (one that arrives after the page loaded too); find
in a 2,000-item session counts, steps and updates live; a live parallel investigation
logs no console error or warning. Real daphne, qcluster and Chromium (1366x768)."""

from __future__ import annotations

import json

import pytest

from bench.find_in_session import SEED, agent_of, mark, rows
from tests.e2e.harness import deployment, log_in, submit_alert

pytestmark = pytest.mark.e2e

VIEWPORT = {"width": 1366, "height": 768}
FINAL_WORD = "quokkaroot"  # only in the final answer: find counts it when it arrives


def _words(n: int, turn: int) -> str:
    return " ".join(f"t{turn}w{k}" for k in range(n))


def _turns(tool: str, count: int) -> list[dict]:
    turns: list[dict] = [
        {
            "thinking": _words(25, turn),
            "text": f"Checking, step {turn}. " + _words(15, turn),
            "tool_calls": [{"name": tool, "arguments": {"namespace": "payments"}}],
        }
        for turn in range(count)
    ]
    turns.append({"text": f"Root cause: {FINAL_WORD}, the memory limit. " + _words(40, 99)})
    return turns


def _script() -> dict:
    """KubernetesAgent (PodCrashLooping) calls a tool 8 times; the deep demo's two agents
    4 times each, with the tools their MCP servers have."""
    return {
        "chunk_delay": 0.03,
        "turns": _turns("kubernetes.get_pods", 8),
        "agents": {
            "WorkloadAgent": {"turns": _turns("workloads.get_pods", 4)},
            "ChangeAgent": {"turns": _turns("changes.get_events", 4)},
        },
    }


@pytest.fixture(scope="module")
def tarsy(tmp_path_factory):
    root = tmp_path_factory.mktemp("sessionpage")
    script = root / "script.json"
    script.write_text(json.dumps(_script()))
    provider = {
        "name": "slow",
        "type": "scripted",
        "model": "slow",
        "options": {"script": str(script)},
        "is_default": True,
    }
    with deployment(root, provider=provider) as dep:
        yield dep


def new_page(browser, tarsy):
    page = browser.new_page(viewport=VIEWPORT)
    log_in(page, tarsy.base_url)
    return page


# The newest item (ids grow as items are created) is on screen, below the sticky bar.
NEWEST_IN_VIEW = """() => {
  const items = [...document.querySelectorAll('#timeline article.item')];
  if (!items.length) return null;
  const newest = items.reduce((a, b) =>
    parseInt(a.id.slice(5)) > parseInt(b.id.slice(5)) ? a : b);
  const r = newest.getBoundingClientRect();
  return r.bottom > 0 && r.top < window.innerHeight ? parseInt(newest.id.slice(5)) : null;
}"""
ITEM_COUNT = "() => document.querySelectorAll('#timeline article.item').length"
TERMINAL = "#session-status[data-status=completed], #session-status[data-status=failed]"


def test_it_follows_the_live_run_pauses_resumes_and_jumps_to_the_answer(tarsy, browser):
    page = new_page(browser, tarsy)
    try:
        submit_alert(page, tarsy.base_url, "PodCrashLooping")
        page.wait_for_selector('#live-state[data-state="live"]', timeout=30_000)
        # Nothing empty stands in front of the investigation: its first item starts
        # within the first screen (measured from the top of the page).
        first_top = page.wait_for_function(
            "() => { const i = document.querySelector('#timeline article.item');"
            " return i ? i.getBoundingClientRect().top + window.scrollY : null; }",
            timeout=30_000,
        ).json_value()
        assert first_top < VIEWPORT["height"]
        assert page.is_hidden("#review-panel")
        assert page.is_hidden("#scoring")

        # It follows: the page grows past the screen and the newest item stays in view.
        page.wait_for_function(
            f"() => window.scrollY > 200 && ({NEWEST_IN_VIEW})() !== null", timeout=60_000
        )
        seen = page.evaluate(NEWEST_IN_VIEW)
        page.wait_for_function(
            f"() => {{ const n = ({NEWEST_IN_VIEW})(); return n !== null && n > {seen}; }}",
            timeout=30_000,
        )
        assert page.is_visible("#follow-state")
        assert page.is_hidden("#jump-live")

        # The reader scrolls up: following stops, the page stays where they are.
        page.mouse.move(683, 400)
        page.mouse.wheel(0, -20_000)
        page.wait_for_selector("#jump-live", state="visible")
        page.wait_for_function("() => window.scrollY === 0")
        count = page.evaluate(ITEM_COUNT)
        page.wait_for_function(f"() => ({ITEM_COUNT})() >= {count + 2}", timeout=30_000)
        assert page.evaluate("window.scrollY") == 0
        assert page.evaluate("window.tarsySession.isFollowing()") is False

        # "Jump to live" resumes.
        page.click("#jump-live")
        page.wait_for_function(
            f"() => window.tarsySession.isFollowing() && window.scrollY > 200"
            f" && ({NEWEST_IN_VIEW})() !== null"
        )
        assert page.is_hidden("#jump-live")

        # It ends: the answer is at the top, one click away from the bottom.
        page.wait_for_selector(TERMINAL, timeout=90_000)
        page.wait_for_selector("#jump-answer", state="visible")
        assert page.is_hidden("#jump-live")
        assert page.is_hidden("#follow-state")
        page.evaluate("window.scrollTo(0, document.documentElement.scrollHeight)")
        page.click("#jump-answer")
        page.wait_for_function(
            "() => { const a = document.querySelector('#session-answer');"
            " const r = a.getBoundingClientRect();"
            " return document.activeElement === a && r.top >= -1 && r.top < 100; }"
        )
        answer = page.text_content("#session-answer")
        assert FINAL_WORD in answer
        top = page.evaluate(
            "document.querySelector('#session-answer').compareDocumentPosition("
            "document.querySelector('#timeline')) & Node.DOCUMENT_POSITION_FOLLOWING"
        )
        assert top
    except Exception:
        print(tarsy.log_tail())
        raise


FOCUSED = """id => {
  const item = document.getElementById(id);
  if (!item || document.activeElement !== item || !item.classList.contains('deep-linked'))
    return false;
  const r = item.getBoundingClientRect();
  return r.bottom > 0 && r.top < window.innerHeight;
}"""


def test_a_share_link_opens_an_item_even_one_that_arrives_after_load(tarsy, browser):
    page = new_page(browser, tarsy)
    try:
        session_id = submit_alert(page, tarsy.base_url, "PodCrashLooping")
        first = page.wait_for_function(
            "() => { const i = document.querySelector('#timeline article.item');"
            " return i ? parseInt(i.id.slice(5)) : null; }",
            timeout=30_000,
        ).json_value()
        later = first + 8  # a tool call, thinking or text still to come
        linked = browser.new_page(viewport=VIEWPORT)
        linked.context.add_cookies(page.context.cookies())
        response = linked.goto(f"{tarsy.base_url}/sessions/{session_id}/?event={later}")
        assert f'id="item-{later}"' not in response.text()  # not there yet
        linked.wait_for_function(FOCUSED, arg=f"item-{later}", timeout=60_000)
        assert linked.evaluate("window.tarsySession.isFollowing()") is False

        # After the end: a link to a tool call opens its collapsed result.
        page.wait_for_selector(TERMINAL, timeout=90_000)
        tool_call = page.get_attribute("#timeline article.item.llm_tool_call", "id")
        stage = page.get_attribute("#stages .stage", "id").split("-")[1]
        item_id = tool_call.split("-")[1]
        page.goto(f"{tarsy.base_url}/sessions/{session_id}/?stage={stage}&event={item_id}")
        page.wait_for_function(FOCUSED, arg=tool_call)
        assert page.evaluate(
            f"[...document.querySelectorAll('#{tool_call} details')].every(d => d.open)"
        )
        # A stage link focuses the stage's first item; every item and stage copies one.
        page.goto(f"{tarsy.base_url}/sessions/{session_id}/?stage={stage}")
        page.wait_for_function(
            f"() => document.activeElement && document.activeElement.closest('#stage-{stage}')"
            " && document.activeElement.matches('article.item')"
        )
        assert (
            page.locator("#timeline article.item button.copy-link").count()
            == page.locator("#timeline article.item").count()
        )
        page.context.grant_permissions(["clipboard-read", "clipboard-write"])
        page.click(f"#{tool_call} button.copy-link")
        page.wait_for_function(
            f"() => document.querySelector('#{tool_call} button.copy-link').textContent === 'Copied'"
        )
        copied = page.evaluate("navigator.clipboard.readText()")
        assert copied == f"{tarsy.base_url}/sessions/{session_id}/?stage={stage}&event={item_id}"
        # The old #item-N links still land on the item.
        page.goto(f"{tarsy.base_url}/sessions/{session_id}/#{tool_call}")
        page.wait_for_function(
            f"() => {{ const r = document.getElementById('{tool_call}').getBoundingClientRect();"
            " return r.top >= 0 && r.top < window.innerHeight; }"
        )
        # The trace takes links to its interactions and stages.
        page.goto(f"{tarsy.base_url}/sessions/{session_id}/trace/")
        entry = page.get_attribute("details.trace-entry.llm", "id")
        page.goto(f"{tarsy.base_url}/sessions/{session_id}/trace/?interaction={entry}")
        page.wait_for_function(FOCUSED, arg=entry)
        assert page.evaluate(f"document.getElementById('{entry}').open")
        page.goto(f"{tarsy.base_url}/sessions/{session_id}/trace/?stage={stage}")
        page.wait_for_function(FOCUSED, arg=f"trace-stage-{stage}")
        # A link to another session's item is named, and ignored.
        page.goto(f"{tarsy.base_url}/sessions/{session_id}/?event=999999")
        assert "no such item" in page.text_content("#deep-link-problem")
    except Exception:
        print(tarsy.log_tail())
        raise


def test_a_live_parallel_investigation_logs_no_console_error(tarsy, browser):
    page = new_page(browser, tarsy)
    listing = browser.new_page(viewport=VIEWPORT)
    listing.context.add_cookies(page.context.cookies())
    problems: list[str] = []
    for watched in (page, listing):
        watched.on(
            "console",
            lambda m: (
                problems.append(f"{m.type}: {m.text}") if m.type in ("error", "warning") else None
            ),
        )
        watched.on("pageerror", lambda e: problems.append(f"pageerror: {e}"))
    try:
        listing.goto(f"{tarsy.base_url}/")
        listing.wait_for_selector('#live-state[data-state="live"]')
        session_id = submit_alert(page, tarsy.base_url, "DeepInvestigation")
        page.wait_for_selector('#live-state[data-state="live"]', timeout=30_000)
        # Find counts an item that arrives later, live.
        page.fill("#find-input", FINAL_WORD)
        page.wait_for_function(
            "() => document.querySelector('#find-count').textContent === 'no matches'"
        )
        page.wait_for_function(
            "() => /^1 of [1-9]\\d*$/.test(document.querySelector('#find-count').textContent)",
            timeout=90_000,
        )
        page.wait_for_selector(TERMINAL, timeout=90_000)
        assert page.locator(".stage .execution").count() >= 2  # it did run in parallel
        # The list shows it ended, live, without a reload.
        listing.wait_for_function(
            f"() => {{ const row = document.getElementById('session-row-{session_id}');"
            " return row && row.querySelector('[data-status=completed], [data-status=failed]'); }",
            timeout=30_000,
        )
        assert problems == []
    except Exception:
        print(tarsy.log_tail())
        raise


def test_find_in_a_2000_item_session(tarsy, browser):
    session_id = tarsy.manage("shell", "-c", SEED.format(items=2000)).split()[-1]
    items = rows(2000)
    page = new_page(browser, tarsy)
    try:
        page.goto(f"{tarsy.base_url}/sessions/{session_id}/")
        assert page.locator("#timeline article.item").count() == 2000

        def count() -> str:
            return page.text_content("#find-count") or ""

        token = mark(17)
        expected = sum(1 for row in items if mark(row["i"]) == token)
        page.fill("#find-input", token)
        page.wait_for_function(
            f"() => document.querySelector('#find-count').textContent === '1 of {expected}'"
        )
        first = page.get_attribute(".item.find-current", "id")
        page.press("#find-input", "Enter")
        assert count() == f"2 of {expected}"
        assert page.get_attribute(".item.find-current", "id") != first
        page.press("#find-input", "Shift+Enter")
        page.press("#find-input", "Shift+Enter")
        assert count() == f"{expected} of {expected}"  # wraps round
        page.click("#find-next")
        assert count() == f"1 of {expected}"
        assert page.locator(".item.find-match").count() == expected

        # Tool names, across stages and agents; "only matches" hides the rest.
        tool = "kubernetes.tool_7"
        matching = [
            row["i"]
            for row in items
            if row["event_type"] in ("llm_tool_call", "mcp_tool_summary") and row["i"] % 13 == 7
        ]
        expected = len(matching)
        page.fill("#find-input", tool)
        page.wait_for_function(
            f"() => document.querySelector('#find-count').textContent === '1 of {expected}'"
        )
        agents = page.evaluate(
            "new Set([...document.querySelectorAll('.item.find-match')]"
            ".map(i => i.closest('.execution').dataset.agent)).size"
        )
        assert agents == len({agent_of(i) for i in matching}) > 1
        page.check("#find-only")
        assert page.locator("#timeline article.item:visible").count() == expected
        page.uncheck("#find-only")

        # Text in a collapsed thinking block: found, and opened when it is the current one.
        page.fill("#find-input", "step 4 checks")
        page.wait_for_function(
            "() => document.querySelector('#find-count').textContent === '1 of 1'"
        )
        current = page.locator(".item.find-current")
        assert "llm_thinking" in (current.get_attribute("class") or "")
        assert current.evaluate("i => i.querySelector('details').open")

        page.press("#find-input", "Escape")
        page.wait_for_function("() => document.querySelector('#find-count').textContent === ''")
        assert page.locator(".item.find-match").count() == 0
    except Exception:
        print(tarsy.log_tail())
        raise
