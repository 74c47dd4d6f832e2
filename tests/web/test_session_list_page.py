"""The session list you can scan (issue 22): summaries as plain text, chips for how each
investigation ran, a constant number of queries per page, cancel from a panel row, a
compact filter bar; and no parameter gives a 500."""

from __future__ import annotations

import re
from html import unescape

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from sessions import services
from sessions.models import (
    AgentExecution,
    AlertSession,
    Chat,
    ChatMessage,
    ChatMessageStatus,
    ParallelType,
    SessionStatus,
    Stage,
    StageType,
    TimelineEvent,
    TimelineEventType,
)
from sessions.selectors.session_rows import row_facts
from web import fragments
from web.markdown_text import markdown_text

pytestmark = pytest.mark.django_db


def ended(summary: str = "", analysis: str = "", **fields) -> AlertSession:
    """A session run through the real services: created, claimed, ended."""
    session = services.session_create(
        alert_type=fields.pop("alert_type", "kubernetes"),
        alert_data="alert",
        chain_id="kubernetes-investigation",
        author="alice",
    )
    claim = services.session_claim(session_id=session.id, worker_id="w")
    services.session_end(
        lease=claim.lease, status="completed", final_analysis=analysis, executive_summary=summary
    )
    return AlertSession.objects.get(id=session.id)


def stage(session: AlertSession, index: int, **fields) -> Stage:
    return Stage.objects.create(session=session, name=f"stage {index}", index=index, **fields)


def execution(session: AlertSession, on: Stage, **fields) -> AgentExecution:
    return AgentExecution.objects.create(session=session, stage=on, agent_name="agent", **fields)


def with_parallel(session: AlertSession) -> None:
    on = stage(session, 0, parallel_type=ParallelType.MULTI_AGENT, expected_agent_count=2)
    execution(session, on, agent_index=1)
    execution(session, on, agent_index=2)


def with_sub_agents(session: AlertSession) -> None:
    on = stage(session, 1)
    parent = execution(session, on)
    execution(session, on, agent_index=2, parent_execution=parent, task="look at the pods")


def with_fallback(session: AlertSession) -> None:
    on = stage(session, 2)
    TimelineEvent.objects.create(
        session=session,
        stage=on,
        execution=execution(session, on),
        sequence_number=1,
        event_type=TimelineEventType.PROVIDER_FALLBACK,
        content="fell back",
    )


def with_chat(session: AlertSession, questions: int = 2) -> None:
    chat = Chat.objects.create(session=session)
    for n in range(questions):
        ChatMessage.objects.create(
            chat=chat, session=session, content=f"q{n}", status=ChatMessageStatus.COMPLETED
        )


def with_actions(session: AlertSession) -> None:
    stage(session, 3, stage_type=StageType.ACTION)


def with_budget_stop(session: AlertSession) -> None:
    AlertSession.objects.filter(id=session.id).update(budget_stop="cost $0.50 of $0.50")


FEATURES = {
    "budget": with_budget_stop,
    "parallel": with_parallel,
    "sub-agents": with_sub_agents,
    "fallback": with_fallback,
    "chat": with_chat,
    "actions": with_actions,
}


@pytest.fixture
def client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def row_html(page: str, session_id) -> str:
    match = re.search(rf'<tr id="session-row-{session_id}".*?</tr>', page, re.S)
    assert match, f"no row for {session_id}"
    return match.group(0)


def chips(row: str) -> set[str]:
    return set(re.findall(r'data-chip="([a-z-]+)"', row))


def summary_text(row: str) -> str:
    match = re.search(r'<span class="summary-text[^"]*">(.*?)</span>', row, re.S)
    return unescape(match.group(1)) if match else ""


# ------------------------------------------------------------------ plain-text summaries

NASTY = [
    # (markdown, words that must be there, text that must not)
    (
        "## Root cause\n\nThe **pod** `payments-api` ran out of *memory*; see [the runbook](https://x.example/rb).",
        "Root cause The pod payments-api ran out of memory; see the runbook.",
        ["**", "`", "#", "](", "https://x.example"],
    ),
    ("```python\nprint('a')\n```\nafter the fence", "print('a') after the fence", ["```"]),
    ("``code with ` a tick`` and ~~struck~~", "code with ` a tick and struck", ["``", "~~"]),
    ("> quoted\n> > nested *em **strong***", "quoted nested em strong", [">", "*"]),
    ("- one\n- two\n  1. three", "one two three", ["- ", "1."]),
    ("![alt words](https://img.example/x.png) tail", "alt words tail", ["![", "img.example"]),
    ("| a | b |\n|---|---|\n| 1 | 2 |", "a b 1 2", ["|", "---"]),
    ("line one  \nline two\\\nline three", "line one line two line three", ["\\"]),
]


@pytest.mark.parametrize(("source", "expected", "absent"), NASTY)
def test_markdown_becomes_plain_words(source, expected, absent):
    text = markdown_text(source, limit=500)
    assert text == expected
    for fragment in absent:
        assert fragment not in text


def test_html_in_markdown_is_text_never_markup():
    source = 'Look: <script>alert(1)</script> <img src=x onerror="boom()"> &lt;b&gt; &amp;'
    text = markdown_text(source, limit=500)
    # Kept as the characters it was (the template escapes them), entities decoded once.
    assert "<script>alert(1)</script>" in text
    assert '<img src=x onerror="boom()">' in text
    assert text.endswith("<b> &")


def test_long_text_is_cut_at_a_word_with_an_ellipsis():
    words = " ".join(f"word{n}" for n in range(200))
    text = markdown_text(f"**{words}**", limit=60)
    assert len(text) <= 61
    assert text.endswith("…")
    assert text.removesuffix("…").split()[-1].startswith("word")  # no half word
    assert words.startswith(text.removesuffix("…"))
    # Past the parsed head: cut too, even when the head's words are short.
    assert markdown_text("short " + "x" * 5000, limit=300).endswith("…")
    assert markdown_text("", limit=10) == ""
    assert markdown_text(None) == ""
    # A cut through an open emphasis or code span leaves none of its markers.
    for marker in ("**", "_", "`", "~~"):
        text = markdown_text(f"{marker}{'word ' * 1000}{marker} after", limit=50)
        assert text.startswith("word word"), marker
        assert text.endswith("…"), marker
        assert marker not in text


def test_pathological_markdown_stays_bounded():
    # Unmatched delimiters and brackets by the kilobyte: the head only is parsed.
    for source in ("*_[" * 20000, "![" * 30000, "`" * 50000, "> " * 5000 + "deep"):
        text = markdown_text(source, limit=100)
        assert len(text) <= 101


def test_rows_show_the_summary_as_escaped_plain_text(client):
    session = ended(
        summary="**Root cause**: `OOMKilled` in [payments](https://x.example) <script>window.x=1</script>"
    )
    page = client.get("/").content.decode()
    row = row_html(page, session.id)
    assert "<script>window.x=1</script>" not in row  # escaped, never markup
    assert "&lt;script&gt;window.x=1&lt;/script&gt;" in row
    assert summary_text(row) == "Root cause: OOMKilled in payments <script>window.x=1</script>"
    assert "**" not in row
    assert "`" not in row
    assert "](" not in row


def test_a_row_without_an_executive_summary_shows_its_analysis_head(client):
    session = ended(analysis="# Findings\n\nThe *node* ran out of `disk`.\n\n" + "more " * 500)
    row = row_html(client.get("/").content.decode(), session.id)
    text = summary_text(row)
    assert text.startswith("Findings The node ran out of disk. more more")
    assert text.endswith("…")
    assert 'class="summary-text from-analysis"' in row
    with_summary = ended(summary="The summary", analysis="The analysis")
    other = row_html(client.get("/").content.decode(), with_summary.id)
    assert summary_text(other) == "The summary"
    assert "The analysis" not in other


# ---------------------------------------------------------------------------------- chips


def test_each_feature_gets_its_chip_and_only_its_own(client):
    plain = ended(summary="nothing special")
    sessions = {}
    for name, add in FEATURES.items():
        sessions[name] = ended(summary=name)
        add(sessions[name])
    everything = ended(summary="all of it")
    for add in FEATURES.values():
        add(everything)
    page = client.get("/").content.decode()
    assert chips(row_html(page, plain.id)) == set()
    for name, session in sessions.items():
        assert chips(row_html(page, session.id)) == {name}, name
    assert chips(row_html(page, everything.id)) == set(FEATURES)
    assert ">chat 2<" in row_html(page, sessions["chat"].id)


def test_a_single_agent_stage_is_not_parallel():
    session = ended()
    on = stage(session, 0)  # one agent, no parallel type
    execution(session, on)
    facts = row_facts([session.id])[session.id]
    assert not facts.parallel
    assert not facts.sub_agents
    replicas = ended()
    stage(replicas, 0, parallel_type=ParallelType.REPLICA, expected_agent_count=3)
    assert row_facts([replicas.id])[replicas.id].parallel


def test_the_score_badge_stays_on_the_row(client):
    from sessions.models import ScoreStatus, SessionScore

    session = ended(summary="scored")
    SessionScore.objects.create(session=session, status=ScoreStatus.COMPLETED, total_score=87)
    row = row_html(client.get("/").content.decode(), session.id)
    assert 'data-score="87"' in row
    assert "87/100" in row


def rows_of(response) -> list[str]:
    return re.findall(r'id="session-row-([0-9a-f-]+)"', response.content.decode())


def page_queries(client, per_page: int) -> int:
    with CaptureQueriesContext(connection) as queries:
        response = client.get(f"/?per_page={per_page}")
    assert response.status_code == 200
    return len(queries)


def test_the_query_count_does_not_grow_with_the_rows(client):
    def add_sessions(count: int) -> None:
        for n in range(count):
            session = ended(summary=f"s{n}")
            for add in FEATURES.values():
                if n % 2 == 0:
                    add(session)

    add_sessions(3)
    few = page_queries(client, 10)
    assert len(re.findall(r'id="session-row-', client.get("/?per_page=10").content.decode())) == 3
    add_sessions(22)
    many = page_queries(client, 25)
    rows = re.findall(r'id="session-row-', client.get("/?per_page=25").content.decode())
    assert len(rows) == 25
    assert many == few
    # And with a search (its own path to the rows and their snippets).
    with CaptureQueriesContext(connection) as small:
        assert len(rows_of(client.get("/?q=alert&per_page=10"))) == 10
    with CaptureQueriesContext(connection) as large:
        assert len(rows_of(client.get("/?q=alert&per_page=25"))) == 25
    assert len(large) == len(small)


def test_a_live_row_carries_its_chips_and_plain_summary():
    session = ended(summary="The `pod` **died**")
    with_chat(session, questions=1)
    with_actions(session)
    html = fragments.row_fragment(AlertSession.objects.get(id=session.id), upsert=False)
    assert html.startswith("<template>")
    assert chips(html) == {"chat", "actions"}
    assert summary_text(html) == "The pod died"


# ----------------------------------------------------------------------------- the page


def test_the_page_folds_the_rarer_filters_under_more_filters(client):
    page = client.get("/").content.decode()
    details = re.search(r'<details class="more-filters" id="more-filters"([^>]*)>', page)
    assert details
    assert "open" not in details.group(1)
    # Search and statuses stay on the bar, before the fold.
    assert page.index('id="q"') < page.index('id="more-filters"')
    assert page.index('name="status"') < page.index('id="more-filters"')
    for field in ("f-alert-type", "f-chain", "f-author", "f-range", "f-per-page", "f-assignee"):
        assert page.index('id="more-filters"') < page.index(f'id="{field}"')
    # One of them set: the fold is open and says how many.
    page = client.get("/?author=bob&per_page=10").content.decode()
    details = re.search(r'<details class="more-filters" id="more-filters"([^>]*)>', page)
    assert details
    assert "open" in details.group(1)
    assert "(2 set)" in page


@pytest.mark.parametrize(
    "query",
    [
        "?status=nope&per_page=7&page=-3&sort=evil",
        "?range=custom&from=yesterday&to=2020-13-45T99:99",
        "?q=%22&alert_type=" + "x" * 500,
        "?review_status=zzz&quality_rating=1&assignee=" + "a" * 400,
        "?page=99999999999999999999",
        "?per_page=abc&status=&q=%F0%9F%92%A5",
    ],
)
def test_bogus_parameters_never_give_a_500(client, query):
    ended(summary="x")
    page = client.get("/" + query)
    assert page.status_code == 200
    assert 'id="list-problems"' in page.content.decode() or "page=" in query
    assert client.get("/" + query, headers={"HX-Request": "true"}).status_code == 200


def test_a_nul_in_the_query_is_refused_not_a_500(client):
    assert client.get("/?range=custom&from=%00").status_code == 400


# --------------------------------------------------------------------------------- cancel


def queued() -> AlertSession:
    return services.session_create(
        alert_type="kubernetes",
        alert_data="alert",
        chain_id="kubernetes-investigation",
        author="bob",
    )


def cancel_form(page: str, session_id) -> str:
    match = re.search(
        rf'<form class="row-cancel"[^>]*action="/sessions/{session_id}/cancel/".*?</form>',
        page,
        re.S,
    )
    assert match, f"no cancel form for {session_id}"
    return match.group(0)


def test_queued_and_running_rows_offer_cancel_with_a_confirmation(client):
    waiting = queued()
    running = queued()
    services.session_claim(session_id=running.id, worker_id="w")
    done = ended(summary="over")
    page = client.get("/").content.decode()
    for session in (waiting, running):
        form = cancel_form(page, session.id)
        assert 'hx-confirm="Cancel the kubernetes investigation' in form
        assert 'hx-post="/sessions/' in form
        assert re.search(r'<button type="submit"[^>]*aria-label="Cancel kubernetes session', form)
    assert "waiting in the queue" in cancel_form(page, waiting.id)
    assert "waiting in the queue" not in cancel_form(page, running.id)
    assert f"/sessions/{done.id}/cancel/" not in page
    # A session being cancelled offers no second cancel.
    services.session_cancel(session_id=running.id, by="alice")
    page = client.get("/").content.decode()
    assert f"/sessions/{running.id}/cancel/" not in page
    assert f'id="active-{running.id}"' in page


def test_cancel_from_a_row_needs_the_csrf_token_and_cancels(browser_client):
    session = queued()
    page = browser_client.get("/").content.decode()
    assert f'id="queued-{session.id}"' in page
    url = reverse("sessions:cancel", args=[session.id])
    # Without the token (a forged cross-site post): refused, nothing cancelled.
    assert browser_client.post(url, headers={"HX-Request": "true"}).status_code == 403
    assert AlertSession.objects.get(id=session.id).status == SessionStatus.PENDING
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)
    response = browser_client.post(url, headers={"HX-Request": "true", "X-CSRFToken": token})
    assert response.status_code == 200
    after = AlertSession.objects.get(id=session.id)
    assert after.status == SessionStatus.CANCELLED
    assert after.cancelled_by == "alice"
    # The list now shows it in the history, cancelled, and no longer in the queue.
    page = browser_client.get("/").content.decode()
    assert f'id="queued-{session.id}"' not in page
    assert 'data-status="cancelled"' in row_html(page, session.id)
    # Twice: the endpoint says why, the row is unchanged.
    again = browser_client.post(url, headers={"HX-Request": "true", "X-CSRFToken": token})
    assert again.status_code == 409


def test_the_live_panels_offer_the_same_cancel():
    waiting = queued()
    from sessions import selectors

    html = fragments.panels_fragment(selectors.session_panels())
    form = cancel_form(html, waiting.id)
    assert 'hx-post="/sessions/' in form
    # Rendered without a request: no token of its own (htmx sends the page's header).
    assert "csrfmiddlewaretoken" not in form


def test_logged_out_cannot_cancel():
    session = queued()
    response = Client().post(reverse("sessions:cancel", args=[session.id]))
    assert response.status_code in (302, 401, 403)
    assert AlertSession.objects.get(id=session.id).status == SessionStatus.PENDING


def test_the_socket_state_is_shown_once_and_reset_by_a_filter_change(client):
    page = client.get("/").content.decode()
    assert page.count('id="live-state"') == 1
    assert page.index('id="live-state"') < page.index('id="filters"')  # in the heading
    # A filter change swaps the live part (a new socket): the heading's state is reset.
    partial = client.get("/?status=failed", headers={"HX-Request": "true"}).content.decode()
    assert partial.count('id="live-state"') == 1
    assert re.search(r'<span id="live-state"[^>]*hx-swap-oob="true"[^>]*>connecting…<', partial)
