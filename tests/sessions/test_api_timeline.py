"""``GET /api/v1/sessions/{id}/timeline`` a page at a time (api/rest/sessions.py): without
parameters the first page in TARSy's shape, then page after page by cursor."""

from __future__ import annotations

import re

import pytest

from api.rest import shapes
from sessions import selectors
from sessions.models import AgentExecution, AlertSession, Stage, TimelineEvent

pytestmark = pytest.mark.django_db


@pytest.fixture
def get(client, api_token):
    def get(path: str):
        return client.get(f"/api/v1{path}", HTTP_AUTHORIZATION=f"Bearer {api_token}")

    return get


def long_session(items: int) -> AlertSession:
    """Two agents whose items interleave in TARSy's order (by sequence number, then id),
    which is not the order they were written in."""
    session = AlertSession.objects.create(
        alert_type="kubernetes", alert_data="d", chain_id="kubernetes-investigation"
    )
    stage = Stage.objects.create(session=session, name="Investigation", index=0)
    first, second = (
        AgentExecution.objects.create(session=session, stage=stage, agent_name=name)
        for name in ("KubernetesAgent", "LogAgent")
    )
    half = items // 2
    TimelineEvent.objects.bulk_create(
        [
            TimelineEvent(
                session=session,
                stage=stage,
                execution=execution,
                sequence_number=n,
                event_type="llm_response",
                content=f"{execution.agent_name} {n}",
            )
            for execution in (first, second)
            for n in range(1, half + 1)
        ]
    )
    return session


def whole_timeline(session: AlertSession) -> list[dict]:
    """The response before paging: every item, in TARSy's order."""
    rows = session.timeline.select_related("execution").order_by("sequence_number", "id")
    return [shapes.timeline_item(row) for row in rows]


def next_link(response) -> str | None:
    link = response.headers.get("Link")
    if link is None:
        return None
    match = re.fullmatch(r'<http://testserver(/api/v1/[^>]+)>; rel="next"', link)
    assert match, link
    return match.group(1).removeprefix("/api/v1")


def test_without_parameters_the_first_page_is_todays_bare_array(get):
    session = long_session(1200)
    expected = whole_timeline(session)

    response = get(f"/sessions/{session.id}/timeline")

    assert response.status_code == 200
    body = response.json()
    assert isinstance(body, list)
    assert body == expected[: selectors.TIMELINE_PAGE_SIZE]
    assert response.headers["X-Total-Count"] == "1200"
    assert next_link(response) == (
        f"/sessions/{session.id}/timeline?limit=500&after={expected[499]['id']}"
    )


def test_a_short_timeline_is_one_page_whole_and_says_so(get):
    session = long_session(40)

    response = get(f"/sessions/{session.id}/timeline")

    assert response.json() == whole_timeline(session)
    assert response.headers["X-Total-Count"] == "40"
    assert "Link" not in response.headers


@pytest.mark.parametrize("limit", [1, 7, 500])
def test_following_the_next_links_reads_every_item_once_in_order(get, limit):
    session = long_session(1000 if limit == 500 else 30)
    path: str | None = f"/sessions/{session.id}/timeline?limit={limit}"
    pages = []
    while path is not None:
        response = get(path)
        assert response.status_code == 200
        pages.append(response.json())
        path = next_link(response)

    assert all(len(page) == limit for page in pages[:-1])
    assert 1 <= len(pages[-1]) <= limit
    assert [item for page in pages for item in page] == whole_timeline(session)


def test_an_item_added_while_paging_does_not_repeat_an_item(get):
    session = long_session(20)
    first = get(f"/sessions/{session.id}/timeline?limit=10")
    execution = AgentExecution.objects.filter(session=session).first()
    # A new item of the first agent, ordered before the second agent's later items.
    TimelineEvent.objects.create(
        session=session,
        stage=execution.stage,
        execution=execution,
        sequence_number=11,
        event_type="llm_response",
        content="late",
    )

    rest = get(next_link(first).replace("limit=10", "limit=50")).json()

    seen = [item["id"] for item in first.json()] + [item["id"] for item in rest]
    assert len(seen) == len(set(seen)) == 21
    assert rest[-1]["content"] == "late"


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("limit=0", "limit"),
        ("limit=-5", "limit"),
        ("limit=2001", "limit"),
        ("limit=ten", "limit"),
        ("limit=", "limit"),
        ("limit=1.5", "limit"),
        ("limit=%D9%A1", "limit"),  # an Arabic-Indic one: a digit to Python, not to us
        ("limit=99999999999999999999999999", "limit"),
        ("after=abc", "after"),
        ("after=0", "after"),
        ("after=99999999999999999999", "after"),
        ("after=123456789", "after"),  # no such item
    ],
)
def test_a_bad_paging_parameter_is_a_400_naming_it(get, query, field):
    session = long_session(4)

    response = get(f"/sessions/{session.id}/timeline?{query}")

    assert response.status_code == 400
    assert response.json()["message"].startswith(f"validation error on field '{field}': ")


def test_a_cursor_from_another_sessions_timeline_is_refused(get):
    mine, theirs = long_session(4), long_session(4)
    other_item = theirs.timeline.first()

    response = get(f"/sessions/{mine.id}/timeline?after={other_item.id}")

    assert response.status_code == 400
    assert "field 'after'" in response.json()["message"]


def test_an_unknown_session_is_still_an_empty_array(get):
    response = get("/sessions/00000000-0000-0000-0000-000000000000/timeline?limit=10")

    assert (response.status_code, response.json()) == (200, [])
