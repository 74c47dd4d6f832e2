"""The session page's server side of issue 22: empty Review and Scoring panels stay
collapsed while it runs, the answer sits at the top once it ends, every stage and item
has a share link, and ``?stage=&event=`` links are checked (bogus ones named, ignored)."""

from __future__ import annotations

import re

import pytest

from sessions import services
from sessions.models import AlertSession, TimelineEventType
from tests.conftest import running_session
from web import fragments

pytestmark = pytest.mark.django_db


def started(session_status="in_progress"):
    session, lease = running_session()
    stage = services.stage_start(lease=lease, name="investigate", index=0)
    execution = services.execution_start(
        lease=lease,
        stage=stage,
        agent_name="KubernetesAgent",
        agent_index=0,
        llm_backend="scripted",
        llm_provider="demo",
        model_name="demo",
    )
    item = services.timeline_event_add(
        lease=lease,
        event_type=TimelineEventType.LLM_RESPONSE,
        content="The pods restart because of OOMKilled",
        execution=execution,
    )
    return session, lease, stage, item


def page(client, session, query=""):
    response = client.get(f"/sessions/{session.id}/{query}")
    assert response.status_code == 200
    return response.content.decode()


def opening_tag(html: str, element_id: str) -> str:
    match = re.search(rf'<section id="{element_id}"[^>]*>', html)
    assert match, element_id
    return match.group(0)


def test_empty_review_and_scoring_panels_are_collapsed_while_it_runs(browser_client):
    session, *_ = started()
    html = page(browser_client, session)
    assert " hidden" in opening_tag(html, "review-panel")
    assert " hidden" in opening_tag(html, "scoring")
    # Once it has ended they have something to offer (claim, score) and show.
    AlertSession.objects.filter(id=session.id).update(status="completed")
    html = page(browser_client, session)
    assert " hidden" not in opening_tag(html, "review-panel")
    assert " hidden" not in opening_tag(html, "scoring")


def test_the_answer_is_above_the_timeline_once_it_ends(browser_client):
    session, *_ = started()
    html = page(browser_client, session)
    assert " hidden" in opening_tag(html, "session-answer")
    assert "executive-summary" not in html
    AlertSession.objects.filter(id=session.id).update(
        status="completed",
        executive_summary="OOMKilled **pods**",
        final_analysis="Root cause: memory",
    )
    html = page(browser_client, session)
    answer = html.index('id="session-answer"')
    assert " hidden" not in opening_tag(html, "session-answer")
    assert answer < html.index('id="executive-summary"') < html.index('id="timeline"')
    assert "<strong>pods</strong>" in html
    assert "Root cause: memory" in html[answer : html.index('id="timeline"')]
    # The status region (announced) does not carry the summary.
    region = html[html.index('id="session-status-region"') : answer]
    assert "OOMKilled" not in region


def test_the_live_status_update_brings_the_answer():
    session, *_ = started()
    AlertSession.objects.filter(id=session.id).update(
        status="completed", executive_summary="It was the memory limit"
    )
    session = AlertSession.objects.get(id=session.id)
    html = fragments.session_fragments(
        {"type": "session.status", "payload": {}}, session, {"input_tokens": 0}
    )
    assert '<section id="session-answer"' in html
    assert 'hx-swap-oob="true"' in opening_tag(html, "session-answer")
    assert "It was the memory limit" in html


def test_the_elapsed_timer_is_not_read_out_every_second(browser_client):
    session, *_ = started()
    html = page(browser_client, session)
    timer = re.search(r'<span class="elapsed"[^>]*>', html).group(0)
    assert 'aria-hidden="true"' in timer
    assert 'class="sr-only">, since ' in html
    # Nor the token meter, which moves with every LLM call.
    assert '<span aria-live="off"><span id="session-usage"' in html


def test_every_stage_and_item_has_a_share_link(browser_client):
    session, _, stage, item = started()
    html = page(browser_client, session)
    assert f'data-copy-link="?stage={stage.id}"' in html
    assert f'data-copy-link="?stage={stage.id}&amp;event={item.id}"' in html
    assert f'id="item-{item.id}"' in html  # the old #item-N links still land


def test_a_deep_link_names_what_the_page_focuses(browser_client):
    session, _, stage, item = started()
    html = page(browser_client, session, f"?stage={stage.id}&event={item.id}")
    assert f'data-focus-stage="{stage.id}" data-focus-event="{item.id}"' in html
    assert "deep-link-problem" not in html
    # An item alone: its stage is looked up.
    html = page(browser_client, session, f"?event={item.id}")
    assert f'data-focus-stage="{stage.id}" data-focus-event="{item.id}"' in html


def test_a_link_to_an_item_still_to_come_is_kept_while_it_runs(browser_client):
    session, _, _, item = started()
    html = page(browser_client, session, f"?event={item.id + 50}")
    assert f'data-focus-event="{item.id + 50}"' in html
    AlertSession.objects.filter(id=session.id).update(status="completed")
    html = page(browser_client, session, f"?event={item.id + 50}")
    assert 'data-focus-event=""' in html
    assert "this session has no such item" in html


@pytest.mark.parametrize(
    "query",
    [
        "?stage=abc",
        "?event=-1",
        "?event=1e999",
        "?stage=%20&event=x",
        "?event=99999999999999999999999",
    ],
)
def test_bogus_link_params_are_named_and_ignored(browser_client, query):
    session, *_ = started()
    html = page(browser_client, session, query)
    assert 'data-focus-stage="" data-focus-event=""' in html
    assert 'id="deep-link-problem"' in html
    assert "could not be followed" in html


def test_an_item_of_another_session_or_stage_falls_back(browser_client):
    session, lease, stage, item = started()
    _, _, _, elsewhere = started()
    AlertSession.objects.filter(id=session.id).update(status="completed")
    html = page(
        browser_client,
        session,
        f"?stage={stage.id}&event={elsewhere.id}",
    )
    assert f'data-focus-stage="{stage.id}" data-focus-event=""' in html
    assert "no such item" in html
    later = services.stage_start(lease=lease, name="synthesis", index=1)
    html = page(browser_client, session, f"?stage={later.id}&event={item.id}")
    assert f'data-focus-stage="{later.id}" data-focus-event=""' in html
    assert "not in the link&#x27;s stage" in html


def test_the_trace_has_share_links_for_its_stages_and_interactions(browser_client):
    from sessions.models import LLMInteraction

    session, _, stage, _ = started()
    execution = stage.executions.get()
    LLMInteraction.objects.create(
        session=session,
        execution=execution,
        interaction_type="iteration",
        provider="demo",
        backend="scripted",
        model_name="demo",
    )
    interaction = LLMInteraction.objects.get(session=session)
    html = page(browser_client, session, "trace/")
    assert f'data-copy-link="?stage={stage.id}"' in html
    assert f'data-copy-link="?interaction=llm-{interaction.id}"' in html
    # Not inside the <summary> (a control in a control).
    summary = html[html.index(f'id="llm-{interaction.id}"') :]
    assert summary.index("</summary>") < summary.index("data-copy-link")
