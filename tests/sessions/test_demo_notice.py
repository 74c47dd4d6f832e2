"""What pages tell the user besides their content: the demo notice, once per page and
true of that page; on a session page, screen readers hear status changes, not the stream."""

from __future__ import annotations

import pytest

from llm.models import LLMProvider, ProviderType
from sessions.models import AgentExecution, AlertSession, Stage

pytestmark = pytest.mark.django_db


def session_run_by(backend: str) -> AlertSession:
    session = AlertSession.objects.create(
        alert_type="kubernetes", alert_data="d", chain_id="kubernetes-investigation"
    )
    stage = Stage.objects.create(session=session, index=0, name="investigation")
    AgentExecution.objects.create(
        session=session, stage=stage, agent_name="KubernetesAgent", llm_backend=backend
    )
    return session


def notices(page: str) -> int:
    return page.count('class="banner demo"')


def test_a_session_that_ran_on_the_demo_says_so_once(browser_client, demo_provider):
    session = session_run_by("scripted")
    page = browser_client.get(f"/sessions/{session.id}/").content.decode()
    assert notices(page) == 1
    assert "This investigation ran on the scripted <strong>demo LLM provider</strong>" in page
    assert "New investigations will too" in page


def test_a_demo_session_after_a_real_provider_became_default(browser_client, demo_provider):
    demo_provider.is_default = False
    demo_provider.save()
    LLMProvider.objects.create(
        name="gemini", type=ProviderType.GOOGLE, model="gemini-2.5-flash", is_default=True
    )
    page = browser_client.get(f"/sessions/{session_run_by('scripted').id}/").content.decode()
    assert notices(page) == 1
    assert "This investigation ran on the scripted" in page
    assert "New investigations will too" not in page


def test_a_real_session_in_demo_mode_shows_the_general_notice(browser_client, demo_provider):
    page = browser_client.get(f"/sessions/{session_run_by('langchain').id}/").content.decode()
    assert notices(page) == 1
    assert "Demo mode: investigations run on the scripted" in page


def test_the_session_list_shows_the_general_notice_once(browser_client, demo_provider):
    assert notices(browser_client.get("/").content.decode()) == 1


def test_screen_readers_hear_the_status_not_the_stream(browser_client, demo_provider):
    page = browser_client.get(f"/sessions/{session_run_by('scripted').id}/").content.decode()
    # One live region; the token meter inside it opts out (aria-live="off").
    assert page.count('aria-live="polite"') + page.count('aria-live="assertive"') == 1
    assert page.count('aria-live="off"') == 1
    assert '<div id="session-status-region" aria-live="polite">' in page
    assert '<section id="timeline" class="timeline">' in page
