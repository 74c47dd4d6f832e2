"""The trace page's line of memory and skills under each model call (issue 21).

The page loads the marks once it is shown (``trace/marks/``, swapped in next to each
interaction), so that the page itself still reads no stored conversation.
"""

from __future__ import annotations

import uuid

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from agents.memory import RECALL_TOOL, WithMemory
from agents.skills import LOAD_SKILL, AgentSkills, WithSkills
from config.loader import get_config
from llm.types import ConversationMessage, Role, ToolCall
from sessions import services
from tests.conftest import running_session
from tests.sessions.test_trace import parse, trace_url
from tests.sessions.test_trace_marks import (
    DISK,
    K8S,
    NET,
    OOM,
    RECALLED,
    Agent,
    inject,
    lesson,
    system,
    tool,
)

pytestmark = pytest.mark.django_db

HOSTILE = "<script>alert(1)</script> pods restart when the node drains"


@pytest.fixture
def client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def marks_url(session_id) -> str:
    return f"/sessions/{session_id}/trace/marks/"


def investigated():
    """A session whose agent was given two lessons and a skill, then loaded a skill and
    recalled a lesson; and a call of another agent with none of these."""
    session, lease = running_session()
    stage = services.stage_start(lease=lease, name="Investigation", index=0)
    disk, hostile, recalled = lesson(DISK), lesson(HOSTILE), lesson(RECALLED)
    found = inject(session, lease, disk, hostile)
    agent = Agent(lease, stage, "KubernetesAgent")
    agent.pre_loaded(K8S)
    skills = AgentSkills(required=(K8S,), on_demand=(OOM, NET))
    load = ToolCall("call-1", LOAD_SKILL, {"names": ["oom-debugging"]})
    recall = ToolCall("call-2", RECALL_TOOL, {"query": "orders-db slow queries"})
    first = agent.call(
        system(skills=skills, lessons=found),
        ConversationMessage(Role.USER, "alert: payments-db disk full"),
        answer=(load, recall),
    )
    loaded = WithSkills(None, skills.on_demand).load(load.arguments)  # type: ignore[arg-type]
    remembered = WithMemory(
        None,  # type: ignore[arg-type]
        config=get_config(),
        session=session,
        injected=[str(disk.id), str(hostile.id)],
    )._recall(recall.arguments)
    second = agent.call(tool(load, loaded.content), tool(recall, remembered.content))
    bare = Agent(lease, stage, "LogReader", index=2).call(system())
    return session, (disk, hostile, recalled), (first, second, bare)


def test_the_page_has_a_place_for_each_calls_marks_and_loads_them(client):
    session, _, (first, second, bare) = investigated()

    page = parse(client.get(trace_url(session.id)))

    loader = page.by_id("trace-marks-loader")
    assert loader.attrs["hx-get"] == marks_url(session.id)
    assert loader.attrs["hx-trigger"] == "load"
    assert loader.attrs["hx-swap"] == "none"
    for call in (first, second, bare):
        place = page.by_id(f"llm-{call.id}-marks")
        assert place.text() == ""
        # Next to its interaction's line, in the same item of the list.
        assert place.parent is page.by_id(f"llm-{call.id}").parent


def test_each_call_shows_the_lessons_and_skills_it_carried(client):
    session, (disk, hostile, recalled), (first, second, _) = investigated()

    response = client.get(marks_url(session.id))

    assert response.status_code == 200
    marks = parse(response)
    one, two = marks.by_id(f"llm-{first.id}-marks"), marks.by_id(f"llm-{second.id}-marks")
    assert one.attrs["hx-swap-oob"] == "true"
    line = " ".join(one.text().split())
    assert line.startswith("Lessons: 2 injected (")
    assert "Skills: pre-loaded k8s-basics new" in line
    assert "loaded:" not in line
    assert "recalled" not in line
    assert [a.attrs["href"] for a in one.all("a")] == [
        f"/memories/{disk.id}/",
        f"/memories/{hostile.id}/",
    ]
    assert [s.text() for s in one.all("span", "badge")] == ["new", "new", "new"]
    line = " ".join(two.text().split())
    assert line.startswith("Lessons: 2 injected (")
    assert "· 1 recalled (orders-db slow queries" in line
    assert "Skills: pre-loaded k8s-basics; loaded: oom-debugging new" in line
    assert f"/memories/{recalled.id}/" in [a.attrs["href"] for a in two.all("a")]
    # Carried from the first call: only the recalled lesson and the loaded skill are new.
    new = [s.attrs["data-key"] for s in two.all("span", "new")]
    assert new == [str(recalled.id), "oom-debugging"]
    carried = [s.attrs["data-key"] for s in two.all("span", "carried")]
    assert carried == [str(disk.id), str(hostile.id), "k8s-basics"]
    # The other agent's call carried nothing: its place stays empty.
    assert [e.attrs["id"] for e in marks.all("div", "trace-marks")] == [
        f"llm-{first.id}-marks",
        f"llm-{second.id}-marks",
    ]


def test_a_lessons_text_is_escaped(client):
    session, *_ = investigated()

    body = client.get(marks_url(session.id)).content.decode()

    assert "<script>" not in body
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in body


def test_the_page_itself_reads_no_conversation(client):
    session, *_ = investigated()

    with CaptureQueriesContext(connection) as captured:
        assert client.get(trace_url(session.id)).status_code == 200

    assert not [q for q in captured.captured_queries if "request_messages" in q["sql"]]


def test_marks_of_an_unknown_session_are_not_found_and_need_a_login(client):
    session, *_ = investigated()

    assert client.get(marks_url(uuid.uuid4())).status_code == 404
    anonymous = Client().get(marks_url(session.id))
    assert anonymous.status_code == 302
    assert anonymous.url.startswith("/login/")


def test_a_session_with_no_model_calls_loads_no_marks(client):
    session, _ = running_session()

    page = parse(client.get(trace_url(session.id)))

    assert not [e for e in page.all() if e.attrs.get("id") == "trace-marks-loader"]
    response = client.get(marks_url(session.id))
    assert response.status_code == 200
    assert parse(response).all("div", "trace-marks") == []
