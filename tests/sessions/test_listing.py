"""The session list: search on the database's full-text index, filters, sort, pages,
panels, and what a wrong parameter does (a message, never a 500)."""

from __future__ import annotations

import re
from datetime import timedelta
from decimal import Decimal

import pytest
from django.test import Client
from django.utils import timezone

from sessions import services
from sessions.models import AlertSession, SessionStatus, TimelineEventType
from sessions.search import Query, SearchError

pytestmark = pytest.mark.django_db


def ended(
    alert_data: str = "alert",
    *,
    status: str = "completed",
    analysis: str = "",
    summary: str = "",
    timeline: tuple[str, ...] = (),
    **fields,
) -> AlertSession:
    """A session that ran through the real services: created, claimed, ended."""
    session = services.session_create(
        alert_type=fields.pop("alert_type", "kubernetes"),
        alert_data=alert_data,
        chain_id=fields.pop("chain_id", "kubernetes-investigation"),
        author=fields.pop("author", "alice"),
    )
    claim = services.session_claim(session_id=session.id, worker_id="w")
    for text in timeline:
        services.timeline_event_add(
            lease=claim.lease, event_type=TimelineEventType.LLM_RESPONSE, content=text
        )
    services.session_end(
        lease=claim.lease, status=status, final_analysis=analysis, executive_summary=summary
    )
    if fields:
        AlertSession.objects.filter(id=session.id).update(**fields)
    return AlertSession.objects.get(id=session.id)


@pytest.fixture
def client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def rows(page: str) -> list[str]:
    return re.findall(r'id="session-row-([0-9a-f-]+)"', page)


def listed(client: Client, query: str) -> list[str]:
    response = client.get(f"/?{query}")
    assert response.status_code == 200
    return rows(response.content.decode())


def test_search_finds_words_in_alert_data_analysis_summary_and_timeline(client):
    by_data = ended("pod payments-api OOMKilled in namespace prod")
    by_analysis = ended("x", analysis="The root cause is a leaked connection pool.")
    by_summary = ended("x", summary="Disk pressure on node worker-7.")
    by_timeline = ended("x", timeline=("kubectl shows CrashLoopBackOff for checkout",))
    ended("nothing relevant here")

    assert listed(client, "q=oomkilled") == [str(by_data.id)]
    assert listed(client, "q=connection+pool") == [str(by_analysis.id)]
    assert listed(client, "q=worker-7") == [str(by_summary.id)]
    assert listed(client, "q=crashloop") == [str(by_timeline.id)]  # words match as prefixes


def test_search_words_all_match_and_quotes_keep_a_phrase_together(client):
    both = ended("disk full on node alpha")
    ended("disk quota on node beta")
    ended("node alpha rebooted, disk ok")
    assert set(listed(client, "q=disk+alpha")) == {
        str(both.id),
        *[str(s.id) for s in AlertSession.objects.filter(alert_data__startswith="node alpha")],
    }
    assert listed(client, 'q="disk full"') == [str(both.id)]


def test_search_highlights_matches_and_escapes_everything_else(client):
    ended("<script>alert(1)</script> payments latency spike")
    page = client.get("/?q=latency").content.decode()
    assert "<mark>latency</mark>" in page
    assert "<script>alert(1)</script>" not in page
    assert "&lt;script&gt;" in page


@pytest.mark.parametrize(
    "hostile",
    ['"', 'a" OR "b', "NEAR(a b)", "col:val", "*", "^start", "x' OR 1=1 --", "AND OR NOT", "é ü ß"],
)
def test_search_operators_in_the_query_are_only_text(client, hostile):
    ended("plain alert")
    response = client.get("/", {"q": hostile})
    assert response.status_code == 200


def test_a_short_search_is_refused_with_a_message_and_the_list_stays(client):
    session = ended("abc")
    page = client.get("/?q=ab").content.decode()
    assert "Search needs at least 3 characters." in page
    assert rows(page) == [str(session.id)]


def test_the_query_parser_keeps_words_and_phrases():
    query = Query.parse('payments-api "connection reset" OOM')
    assert query.terms == (("payments", "api"), ("connection", "reset"), ("oom",))
    assert query.fts5() == '"payments api" * AND "connection reset" * AND "oom" *'
    assert query.tsquery() == "(payments:* <-> api:*) & (connection:* <-> reset:*) & (oom:*)"
    with pytest.raises(SearchError):
        Query.parse("!!! ???")


def test_search_index_is_written_at_submission_and_again_at_the_end(client):
    session = services.session_create(
        alert_type="kubernetes", alert_data="zebra alert", chain_id="c", author="a"
    )
    assert session.search.body.startswith("kubernetes")
    claim = services.session_claim(session_id=session.id, worker_id="w")
    services.session_end(lease=claim.lease, status="completed", final_analysis="giraffe found")
    assert listed(client, "q=giraffe") == [str(session.id)]
    AlertSession.objects.filter(id=session.id).delete()  # the index follows (triggers)
    assert listed(client, "q=giraffe") == []


def test_filters_combine_and_the_history_holds_ended_sessions_only(client):
    mine = ended(author="bob", alert_type="database", chain_id="db-chain")
    failed = ended(author="bob", status="failed")
    ended(author="carol")
    services.session_create(alert_type="kubernetes", alert_data="d", chain_id="c", author="bob")

    assert set(listed(client, "author=bob")) == {str(mine.id), str(failed.id)}
    assert listed(client, "author=bob&status=failed") == [str(failed.id)]
    assert set(listed(client, "status=failed&status=completed&author=bob")) == {
        str(mine.id),
        str(failed.id),
    }
    assert listed(client, "alert_type=database") == [str(mine.id)]
    assert listed(client, "chain=db-chain") == [str(mine.id)]


def test_time_ranges(client):
    recent = ended()
    old = ended(created_at=timezone.now() - timedelta(days=3))
    ancient = ended(created_at=timezone.now() - timedelta(days=40))
    assert listed(client, "range=1h") == [str(recent.id)]
    assert listed(client, "range=7d") == [str(recent.id), str(old.id)]
    assert len(listed(client, "range=30d")) == 2
    start = (timezone.localtime() - timedelta(days=41)).strftime("%Y-%m-%dT%H:%M")
    end = (timezone.localtime() - timedelta(days=2)).strftime("%Y-%m-%dT%H:%M")
    assert listed(client, f"range=custom&from={start}&to={end}") == [str(old.id), str(ancient.id)]


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("status=running", "Unknown status running"),
        ("range=2y", "Unknown time range"),
        ("range=custom&from=yesterday", "is not a date and time"),
        ("range=custom&from=2026-01-02T00:00&to=2026-01-01T00:00", "ends before it starts"),
        ("sort=password", "Cannot sort by"),
        ("per_page=1000", "Page size is one of 10, 25, 50, 100"),
        ("author=" + "x" * 200, "author filter is over 150 characters"),
        ("page=notanumber", ""),
        ("page=99999999999999999999", ""),
    ],
)
def test_a_wrong_parameter_gives_a_message_not_an_error(client, query, message):
    session = ended()
    response = client.get(f"/?{query}")
    assert response.status_code == 200
    page = response.content.decode()
    assert message in page
    if "q=" not in query:
        assert rows(page) == [str(session.id)]  # the rest of the page still works


@pytest.mark.parametrize(
    ("column", "attribute"),
    [
        ("status", "status"),
        ("alert_type", "alert_type"),
        ("chain", "chain_id"),
        ("author", "author"),
        ("submitted", "created_at"),
        ("tokens", "total_tokens"),
        ("cost", "estimated_cost_usd"),
    ],
)
def test_every_column_sorts_both_ways(client, column, attribute):
    a = ended(author="a", alert_type="aa", chain_id="c1", total_tokens=10, status="cancelled")
    b = ended(author="b", alert_type="bb", chain_id="c2", total_tokens=30, status="completed")
    c = ended(author="c", alert_type="cc", chain_id="c3", total_tokens=20, status="failed")
    AlertSession.objects.filter(id=a.id).update(estimated_cost_usd=Decimal("0.5"))
    AlertSession.objects.filter(id=b.id).update(estimated_cost_usd=Decimal("0.1"))
    AlertSession.objects.filter(id=c.id).update(estimated_cost_usd=Decimal("0.3"))
    expected = [
        str(s.id) for s in sorted(AlertSession.objects.all(), key=lambda s: getattr(s, attribute))
    ]
    assert listed(client, f"sort={column}") == expected
    assert listed(client, f"sort=-{column}") == expected[::-1]


def test_duration_sorts_with_unfinished_ones_last(client):
    now = timezone.now()
    quick = ended(started_at=now - timedelta(seconds=5), completed_at=now)
    slow = ended(started_at=now - timedelta(seconds=500), completed_at=now)
    assert listed(client, "sort=-duration")[:2] == [str(slow.id), str(quick.id)]
    assert listed(client, "sort=duration")[:2] == [str(quick.id), str(slow.id)]


def test_pages_keep_the_filters_in_their_links(client):
    for _ in range(12):
        ended(author="dana")
    page = client.get("/?author=dana&per_page=10").content.decode()
    assert len(rows(page)) == 10
    assert "page 1 of 2" in page
    assert 'href="?author=dana&amp;per_page=10&amp;page=2"' in page
    assert len(listed(client, "author=dana&per_page=10&page=2")) == 2


def test_htmx_gets_the_live_part_alone_and_history_restore_gets_the_page(client):
    ended()
    partial = client.get("/?status=completed", headers={"HX-Request": "true"}).content.decode()
    assert partial.lstrip().startswith('<div id="live-root"')
    assert 'ws-connect="/ws/sessions/?status=completed"' in partial
    assert "<html" not in partial
    restore = client.get(
        "/?status=completed", headers={"HX-Request": "true", "HX-History-Restore-Request": "true"}
    ).content.decode()
    assert "<html" in restore


def test_the_panels_show_what_runs_with_its_stage_and_what_waits_in_order(client):
    first = services.session_create(
        alert_type="kubernetes", alert_data="1", chain_id="c", author="a"
    )
    second = services.session_create(
        alert_type="kubernetes", alert_data="2", chain_id="c", author="a"
    )
    running = services.session_create(
        alert_type="database", alert_data="3", chain_id="c", author="a"
    )
    claim = services.session_claim(session_id=running.id, worker_id="w")
    services.stage_start(lease=claim.lease, name="Data collection", index=0)
    page = client.get("/").content.decode()
    active = page[page.index('id="active-panel"') : page.index('id="queued-panel"')]
    assert f'id="active-{running.id}"' in active
    assert "stage 1: Data collection" in active
    queued = page[page.index('id="queued-panel"') : page.index('id="history"')]
    assert queued.index(f'id="queued-{first.id}"') < queued.index(f'id="queued-{second.id}"')
    assert "#1" in queued
    assert "#2" in queued


def test_each_llm_call_adds_to_the_session_totals(client):
    from tests.conftest import running_session

    session, lease = running_session()
    services.stage_start(lease=lease, name="s", index=0)
    execution = services.execution_start(
        lease=lease,
        stage=session.stages.get(),
        agent_name="A",
        agent_index=1,
        llm_backend="x",
        llm_provider="p",
        model_name="m",
    )
    services.llm_interaction_create(
        lease=lease, execution=execution, provider="p", backend="x", total_tokens=100
    )
    services.llm_interaction_create(
        lease=lease,
        execution=execution,
        provider="p",
        backend="x",
        total_tokens=50,
        estimated_cost_usd=Decimal("0.25"),
    )
    session.refresh_from_db()
    assert session.total_tokens == 150
    assert session.estimated_cost_usd == Decimal("0.25")


def test_status_filter_choices_cover_every_ended_status():
    from web.listing import HISTORY_STATUSES

    assert set(HISTORY_STATUSES) == {
        SessionStatus.COMPLETED,
        SessionStatus.FAILED,
        SessionStatus.CANCELLED,
        SessionStatus.TIMED_OUT,
    }


def test_a_search_matching_many_sessions_counts_to_a_cap_and_pages_the_newest(client, monkeypatch):
    monkeypatch.setattr("web.listing.SEARCH_COUNT_CAP", 3)
    matching = [ended(f"common word {n}") for n in range(5)]
    page = client.get("/?q=common&per_page=10").content.decode()
    assert "3+ sessions match" in page
    assert 'id="search-capped"' in page
    assert rows(page) == [str(s.id) for s in reversed(matching)][:3]


def test_search_with_filters_agrees_with_the_same_filters_without_the_index(client):
    ended("needle one", author="ana")
    ended("needle two", author="ben", status="failed")
    ended("needle three", author="ana", status="failed")
    ended("haystack", author="ana", status="failed")
    for filters in ("author=ana", "status=failed", "author=ana&status=failed", "range=1h"):
        searched = set(listed(client, f"q=needle&{filters}"))
        expected = {
            r
            for r in listed(client, f"{filters}&per_page=100")
            if "needle" in AlertSession.objects.get(id=r).alert_data
        }
        assert searched == expected, filters
        # Another sort takes the general path; same sessions.
        assert set(listed(client, f"q=needle&{filters}&sort=author")) == expected
