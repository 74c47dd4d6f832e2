"""``GET /api/v1/sessions?search=…`` through the index-ordered walk
(``sessions.selectors.session_search``): the same sessions, order, pages and counts as
gathering every match and sorting them, which is what it answered before."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from sessions import search, selectors
from sessions.models import AlertSession, SessionSearch

pytestmark = pytest.mark.django_db

WORDS = ["pod", "node", "memory", "disk", "latency", "timeout", "dns", "kafka", "redis", "queue"]
WALK = f"EXISTS (SELECT 1 FROM temp.{search.MATCHES}"  # the SQL of search.matching_in_order


@pytest.fixture
def varied() -> list[AlertSession]:
    """400 sessions: every status, four alert types, authors, reviews; created at times
    that are not the order their search rows were written in, some at the same instant
    (the id then decides); "memory" in most, "zebra" in a few, "queue kafka" as a phrase
    in some."""
    rng = random.Random(19)
    now = timezone.now()
    statuses = ["completed", "failed", "cancelled", "timed_out", "pending", "in_progress"]
    sessions = []
    for n in range(400):
        words = rng.sample(WORDS, 5)
        if rng.random() < 0.85:
            words.append("memory")
        if n % 97 == 3:
            words.append("zebra")
        if n % 7 == 0:
            words += ["queue", "kafka"]
        sessions.append(
            AlertSession(
                alert_type=rng.choice(["kubernetes", "database", "network", "Deep"]),
                alert_data=" ".join(words),
                chain_id=rng.choice(["kubernetes-investigation", "other-chain"]),
                status=rng.choice(statuses),
                author=rng.choice(["ana", "ben", "cy"]),
                review_status=rng.choice(["", "needs_review", "reviewed"]),
                assignee=rng.choice(["", "bob"]),
                quality_rating=rng.choice(["", "accurate", "inaccurate"]),
                final_analysis=rng.choice(["", "root cause: dns"]),
            )
        )
    AlertSession.objects.bulk_create(sessions)
    # Search rows in another order than creation times, and ties of creation time.
    times = [now - timedelta(minutes=rng.randrange(0, 300)) for _ in sessions]
    for session, at in zip(sessions, times, strict=True):
        AlertSession.objects.filter(id=session.id).update(created_at=at)
        session.created_at = at
    shuffled = sessions[:]
    rng.shuffle(shuffled)
    SessionSearch.objects.bulk_create(
        SessionSearch(session=s, body=search.document(s, [])) for s in shuffled
    )
    return sessions


@pytest.fixture
def get(client, api_token):
    def get(query: str) -> tuple[dict, list[str]]:
        with CaptureQueriesContext(connection) as captured:
            response = client.get(
                f"/api/v1/sessions?{query}", HTTP_AUTHORIZATION=f"Bearer {api_token}"
            )
        assert response.status_code == 200, response.content
        return response.json(), [q["sql"] for q in captured.captured_queries]

    return get


def walked(queries: list[str]) -> bool:
    return any(WALK in sql for sql in queries)


QUERIES = [
    "search=memory",
    "search=memory&page=2",
    "search=memory&page=9&page_size=40",
    "search=memory&page_size=100&page=4",  # past the last page
    "search=memory&sort_order=asc&page=3&page_size=30",
    "search=mem",  # a prefix
    "search=memory+disk",
    'search="queue+kafka"',
    "search=zebra",
    "search=nothingmatches",
    "search=memory&status=completed,failed",
    "search=memory&alert_type=database&page_size=10&page=2",
    "search=memory&chain_id=other-chain",
    "search=memory&assignee=",
    "search=memory&review_status=needs_review",
    "search=memory&quality_rating=accurate",
    "search=memory&scoring_status=not_scored",
    "search=dns&sort_by=author",
    "search=memory&sort_by=status&sort_order=asc&page=2",
    "search=memory&sort_by=alert_type&page=3",
    "search=memory&sort_by=author&sort_order=asc&status=completed,failed",
    "search=memory&sort_by=quality_rating",  # no index walks it: always sorted
    "search=memory&sort_by=duration&sort_order=asc",
]


@pytest.mark.parametrize("query", QUERIES)
def test_search_answers_as_gathering_every_match_and_sorting_did(get, varied, monkeypatch, query):
    answer, _ = get(query)

    # Before: every match joined to its session by the full-text query and sorted, the
    # sessions counted (the walk never taken, nothing gathered).
    monkeypatch.setattr(
        selectors,
        "session_search",
        lambda sessions, query, **_: (search.matching(sessions, query), None),
    )
    before, before_sql = get(query)

    assert not walked(before_sql)
    assert answer == before
    assert answer["pagination"]["total_items"] == before["pagination"]["total_items"]


def sqlite_only() -> None:
    if connection.vendor != "sqlite":
        pytest.skip("PostgreSQL plans a search itself: there is no walk to choose")


WALKABLE = [
    q
    for q in QUERIES
    if "nothing" not in q and not any(f"sort_by={f}" in q for f in ("quality_rating", "duration"))
]


@pytest.mark.parametrize("query", WALKABLE)
def test_the_walk_itself_answers_as_the_sort_did(get, varied, monkeypatch, query):
    """Even where the cost model would sort (a rare word), the walk gives the same."""
    sqlite_only()
    monkeypatch.setattr(selectors, "SORT_TO_WALK_COST", 10**9)
    walk, walk_sql = get(query)
    monkeypatch.setattr(selectors, "SORT_TO_WALK_COST", 0)
    sort, sort_sql = get(query)

    assert walked(walk_sql)
    assert not walked(sort_sql)
    assert walk == sort


def test_a_common_word_walks_and_a_rare_one_sorts(get, varied):
    sqlite_only()
    common, common_sql = get("search=memory")
    rare, rare_sql = get("search=zebra")

    assert walked(common_sql)
    assert not walked(rare_sql)
    assert common["pagination"]["total_items"] > 300
    assert 1 <= rare["pagination"]["total_items"] <= 5
    # Without other filters the full-text index counts the matches: no count of sessions.
    assert not any("COUNT(*)" in sql and "alert_sessions_alertsession" in sql for sql in common_sql)


def test_the_newest_match_comes_first_whatever_order_the_index_holds(get, varied):
    body, _ = get("search=memory&page_size=100")
    times = [s["created_at"] for s in body["sessions"]]

    newest = (
        AlertSession.objects.filter(alert_data__contains="memory")
        .order_by("-created_at", "id")
        .values_list("id", flat=True)[:100]
    )
    assert [s["id"] for s in body["sessions"]] == [str(i) for i in newest]
    assert times == sorted(times, reverse=True)


@pytest.mark.parametrize(
    "query",
    ["search=memory", "search=memory&status=completed,failed", "search=zebra&sort_by=author"],
)
def test_the_full_text_index_is_searched_once_per_request_and_nothing_is_left(get, varied, query):
    """The matches are gathered once, for the count, the page and a filtered count, in a
    temporary table of the connection that is gone when the answer is."""
    sqlite_only()
    _, sql = get(query)

    assert sum("MATCH" in q for q in sql) == 1
    with connection.cursor() as cursor:
        cursor.execute("SELECT name FROM sqlite_temp_master")
        assert cursor.fetchall() == []
        cursor.execute("SELECT name FROM sqlite_master WHERE name LIKE %s", [f"%{search.MATCHES}%"])
        assert cursor.fetchall() == []


def test_a_search_that_fails_midway_leaves_no_gathered_matches(varied):
    sqlite_only()
    gathered = []

    def build_a_page_that_fails() -> None:
        with search.gathered(search.Query.parse("memory")) as matches:
            gathered.append(matches)
            raise RuntimeError("the page could not be built")

    with pytest.raises(RuntimeError):
        build_a_page_that_fails()
    assert gathered[0] > 300
    with connection.cursor() as cursor:
        cursor.execute("SELECT name FROM sqlite_temp_master")
        assert cursor.fetchall() == []
    # And the next search gathers afresh.
    with search.gathered(search.Query.parse("zebra")) as matches:
        assert matches == AlertSession.objects.filter(alert_data__contains="zebra").count()
