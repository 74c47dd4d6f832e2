"""The session history on ``/``: filters, search, sort and page, all read from the URL.

``ListState.from_query`` never raises: whatever is wrong with a parameter becomes a
message for the page and that parameter is ignored, so a shared or hand-edited link
always opens.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlencode

from django.core.paginator import Page, Paginator
from django.db import connection
from django.db.models import (
    Case,
    DurationField,
    Expression,
    ExpressionWrapper,
    F,
    IntegerField,
    OrderBy,
    QuerySet,
    Value,
    When,
)
from django.db.models.functions import NullIf
from django.http import QueryDict
from django.utils import timezone

from sessions import search
from sessions.models import (
    TERMINAL_SESSION_STATUSES,
    AlertSession,
    QualityRating,
    ReviewStatus,
    SessionStatus,
)
from sessions.selectors.scoring import attach_latest_scores
from sessions.selectors.session_rows import RowFacts, row_facts

PAGE_SIZES = (10, 25, 50, 100)
DEFAULT_PAGE_SIZE = 25
RANGES = {
    "1h": timedelta(hours=1),
    "24h": timedelta(days=1),
    "7d": timedelta(days=7),
    "30d": timedelta(days=30),
}
# Column → what it sorts by; the table's headers use these names.
SORTS: dict[str, F | Expression] = {
    "status": F("status"),
    "alert_type": F("alert_type"),
    "chain": F("chain_id"),
    "author": F("author"),
    "submitted": F("created_at"),
    "duration": ExpressionWrapper(
        F("completed_at") - F("started_at"), output_field=DurationField()
    ),
    "tokens": F("total_tokens"),
    "cost": F("estimated_cost_usd"),
    # Review columns: in workflow order, best rating first; nobody's last (NULLABLE_SORTS).
    "review": Case(
        *(When(review_status=s, then=Value(i)) for i, s in enumerate(ReviewStatus.values)),
        output_field=IntegerField(),
    ),
    "assignee": NullIf(F("assignee"), Value("")),
    "rating": Case(
        *(When(quality_rating=r, then=Value(i)) for i, r in enumerate(QualityRating.values)),
        output_field=IntegerField(),
    ),
}
COLUMNS = [
    ("status", "Status"),
    ("alert_type", "Alert type"),
    ("chain", "Chain"),
    ("author", "Author"),
    ("submitted", "Submitted"),
    ("duration", "Duration"),
    ("tokens", "Tokens"),
    ("cost", "Est. cost"),
    ("review", "Review"),
    ("assignee", "Assignee"),
    ("rating", "Quality"),
]
DEFAULT_SORT = "-submitted"
HISTORY_STATUSES = [str(s) for s in TERMINAL_SESSION_STATUSES]
MAX_TEXT_FILTER = 150
# The assignee filter's "nobody": not a possible username (Django's allow no "~").
UNASSIGNED = "~unassigned"


@dataclass(frozen=True)
class ListState:
    statuses: tuple[str, ...] = ()
    alert_type: str = ""
    chain: str = ""
    author: str = ""
    range: str = ""
    start: datetime | None = None
    end: datetime | None = None
    q: str = ""
    query: search.Query | None = None
    review_statuses: tuple[str, ...] = ()
    assignee: str = ""  # a username, or UNASSIGNED
    rating: str = ""
    sort: str = DEFAULT_SORT
    page: int = 1
    per_page: int = DEFAULT_PAGE_SIZE
    problems: tuple[str, ...] = field(default=(), compare=False)

    @classmethod
    def from_query(cls, params: QueryDict) -> ListState:
        problems: list[str] = []
        statuses = tuple(s for s in params.getlist("status") if s)
        if unknown := [s for s in statuses if s not in HISTORY_STATUSES]:
            problems.append(
                f"Unknown status {', '.join(unknown)[:100]}; the history has "
                f"{', '.join(HISTORY_STATUSES)}."
            )
            statuses = tuple(s for s in statuses if s in HISTORY_STATUSES)
        texts: dict[str, Any] = {}
        for name in ("alert_type", "chain", "author"):
            value = params.get(name, "").strip()
            if len(value) > MAX_TEXT_FILTER:
                problems.append(
                    f"The {name.replace('_', ' ')} filter is over {MAX_TEXT_FILTER} characters; ignored."
                )
                value = ""
            texts[name] = value
        window, start, end = _time_range(params, problems)
        review = _review_filters(params, problems)
        q = params.get("q", "").strip()[:500]
        query = None
        if q:
            try:
                query = search.Query.parse(q)
            except search.SearchError as exc:
                problems.append(str(exc))
        sort = params.get("sort", DEFAULT_SORT)
        if sort.removeprefix("-") not in SORTS:
            problems.append(f"Cannot sort by {sort[:50]!r}; sorted by submission time.")
            sort = DEFAULT_SORT
        per_page = _int(params.get("per_page"), DEFAULT_PAGE_SIZE)
        if per_page not in PAGE_SIZES:
            problems.append(f"Page size is one of {', '.join(map(str, PAGE_SIZES))}.")
            per_page = DEFAULT_PAGE_SIZE
        return cls(
            statuses=statuses,
            range=window,
            start=start,
            end=end,
            q=q,
            query=query,
            sort=sort,
            page=max(_int(params.get("page"), 1), 1),
            per_page=per_page,
            problems=tuple(problems),
            **texts,
            **review,
        )

    @property
    def is_default_view(self) -> bool:
        """The newest sessions first, unfiltered, on the first page: where a session that
        has just ended belongs at the top."""
        return self.sort == DEFAULT_SORT and self.page == 1

    @property
    def filtered(self) -> bool:
        return bool(
            self.statuses
            or self.alert_type
            or self.chain
            or self.author
            or self.range
            or self.query
            or self.review_statuses
            or self.assignee
            or self.rating
        )

    def params(self, **changes: Any) -> str:
        """This state as a query string, with ``changes``; defaults are left out."""
        state = replace(self, **changes)
        pairs: list[tuple[str, Any]] = [("status", s) for s in state.statuses]
        for name in ("alert_type", "chain", "author", "q"):
            if value := getattr(state, name):
                pairs.append((name, value))
        pairs += [("review_status", s) for s in state.review_statuses]
        if state.assignee:
            pairs.append(("assignee", state.assignee))
        if state.rating:
            pairs.append(("quality_rating", state.rating))
        if state.range:
            pairs.append(("range", state.range))
            if state.range == "custom":
                if state.start:
                    pairs.append(("from", _local_input(state.start)))
                if state.end:
                    pairs.append(("to", _local_input(state.end)))
        if state.sort != DEFAULT_SORT:
            pairs.append(("sort", state.sort))
        if state.per_page != DEFAULT_PAGE_SIZE:
            pairs.append(("per_page", state.per_page))
        if state.page != 1:
            pairs.append(("page", state.page))
        return urlencode(pairs)

    def sort_link(self, column: str) -> str:
        """The query string a column header links to: sort by it, or reverse it."""
        current = self.sort.removeprefix("-")
        if current == column:
            sort = column if self.sort.startswith("-") else f"-{column}"
        else:
            sort = f"-{column}" if column in ("submitted", "duration", "tokens", "cost") else column
        return self.params(sort=sort, page=1)

    def sort_state(self, column: str) -> str:
        """``aria-sort`` of a column header."""
        if self.sort.removeprefix("-") != column:
            return "none"
        return "descending" if self.sort.startswith("-") else "ascending"

    @property
    def more_filters(self) -> int:
        """How many of the filters folded under "More filters" are set (the compact bar
        shows the search and the statuses; the rest open when one of them is used)."""
        return sum(
            bool(value)
            for value in (
                self.alert_type,
                self.chain,
                self.author,
                self.range,
                self.review_statuses,
                self.assignee,
                self.rating,
                self.per_page != DEFAULT_PAGE_SIZE,
            )
        )

    @property
    def start_input(self) -> str:
        return _local_input(self.start) if self.start else ""

    @property
    def end_input(self) -> str:
        return _local_input(self.end) if self.end else ""


ACTIVE_STATUSES = [s for s in SessionStatus.values if s not in HISTORY_STATUSES]
# Sorts by a column that may be empty put the empty ones last, both ways.
NULLABLE_SORTS = {"duration", "cost", "review", "assignee", "rating"}
# A search that matches more sessions than this says "1,000+" and pages through these.
SEARCH_COUNT_CAP = 1000


def history(state: ListState) -> QuerySet[AlertSession]:
    """Ended sessions matching ``state``, in its order."""
    if state.statuses:
        sessions = AlertSession.objects.filter(status__in=state.statuses)
    else:
        # "Not running" rather than "one of the ended statuses": SQLite then walks the
        # sort column's index instead of sorting every ended session.
        sessions = AlertSession.objects.exclude(status__in=ACTIVE_STATUSES)
    if state.alert_type:
        sessions = sessions.filter(alert_type=state.alert_type)
    if state.chain:
        sessions = sessions.filter(chain_id=state.chain)
    if state.author:
        sessions = sessions.filter(author=state.author)
    if state.start:
        sessions = sessions.filter(created_at__gte=state.start)
    if state.end:
        sessions = sessions.filter(created_at__lt=state.end)
    if state.review_statuses:
        sessions = sessions.filter(review_status__in=state.review_statuses)
    if state.assignee:
        sessions = sessions.filter(assignee="" if state.assignee == UNASSIGNED else state.assignee)
    if state.rating:
        sessions = sessions.filter(quality_rating=state.rating)
    if state.query:
        sessions = search.matching(sessions, state.query)
    column = state.sort.removeprefix("-")
    key = SORTS[column]
    nulls = {"nulls_last": True} if column in NULLABLE_SORTS else {}
    order: list[OrderBy | str]
    if state.sort.startswith("-"):
        order = [key.desc(**nulls), "-created_at", "-id"]
    else:
        order = [key.asc(**nulls), "created_at", "id"]
    return sessions.order_by(*order).defer(*LIST_DEFERRED)


LIST_DEFERRED = ("alert_data", "final_analysis", "runbook", "mcp_selection", "error_message")


@dataclass
class HistoryPage:
    page: Page
    snippets: dict[Any, str]
    capped: bool = False  # more matches than SEARCH_COUNT_CAP
    # Each row's chips and analysis head (sessions.selectors.session_rows).
    facts: dict[Any, RowFacts] = field(default_factory=dict)


def history_page(state: ListState) -> HistoryPage:
    capped = False
    page: Page[AlertSession]
    if state.query and state.sort == DEFAULT_SORT:
        results = _NewestMatches(state)
        capped = results.matched > SEARCH_COUNT_CAP
        # The Paginator needs only count() and slices; the stubs' protocol also asks for
        # len() and iter().
        page = Paginator(results, state.per_page).get_page(state.page)  # type: ignore[arg-type]
    else:
        page = Paginator(history(state), state.per_page).get_page(state.page)
    # Each row's score badge: the page's newest scores in one query.
    page.object_list = attach_latest_scores(list(page.object_list))
    ids = [s.id for s in page.object_list]
    snippets = search.snippets(ids, state.query) if state.query else {}
    return HistoryPage(page, snippets, capped, row_facts(ids))


class _NewestMatches:
    """A search's newest matches for the Paginator, counted up to ``SEARCH_COUNT_CAP``.
    On SQLite through the full-text index first (``search.newest_matches``); on
    PostgreSQL its planner does that with the ORM's query."""

    def __init__(self, state: ListState) -> None:
        assert state.query is not None  # made for a search only
        self.state = state
        self.query: search.Query = state.query
        self.sqlite = connection.vendor == "sqlite"
        if self.sqlite:
            self.filters, self.params = _sql_filters(state)
        self._count: int | None = None

    def count(self) -> int:
        return min(self.matched, SEARCH_COUNT_CAP)

    @property
    def matched(self) -> int:
        """Matches, counted up to one past the cap."""
        if self._count is None:
            if self.sqlite:
                self._count = search.count_matches(
                    self.query, self.filters, self.params, cap=SEARCH_COUNT_CAP
                )
            else:
                self._count = history(self.state)[: SEARCH_COUNT_CAP + 1].count()
        return self._count

    def __getitem__(self, window: slice) -> list[AlertSession]:
        if not self.sqlite:
            return list(history(self.state)[window])
        ids = search.newest_matches(
            self.query,
            self.filters,
            self.params,
            limit=window.stop - window.start,
            offset=window.start,
        )
        rows = AlertSession.objects.defer(*LIST_DEFERRED).in_bulk(ids)
        return [rows[i] for i in ids if i in rows]


def _sql_filters(state: ListState) -> tuple[list[str], list]:
    """``history``'s filters as SQL on the alias ``a`` (the search's own query)."""
    ops = connection.ops
    if state.statuses:
        filters = [f"a.status IN ({', '.join(['%s'] * len(state.statuses))})"]
        params: list = list(state.statuses)
    else:
        filters = [f"a.status NOT IN ({', '.join(['%s'] * len(ACTIVE_STATUSES))})"]
        params = list(ACTIVE_STATUSES)
    for column, value in (
        ("alert_type", state.alert_type),
        ("chain_id", state.chain),
        ("author", state.author),
    ):
        if value:
            filters.append(f"a.{column} = %s")
            params.append(value)
    if state.review_statuses:
        filters.append(f"a.review_status IN ({', '.join(['%s'] * len(state.review_statuses))})")
        params += list(state.review_statuses)
    if state.assignee:
        filters.append("a.assignee = %s")
        params.append("" if state.assignee == UNASSIGNED else state.assignee)
    if state.rating:
        filters.append("a.quality_rating = %s")
        params.append(state.rating)
    if state.start:
        filters.append("a.created_at >= %s")
        params.append(ops.adapt_datetimefield_value(state.start))
    if state.end:
        filters.append("a.created_at < %s")
        params.append(ops.adapt_datetimefield_value(state.end))
    return filters, params


def matches(state: ListState, session_id: Any) -> bool:
    """Whether the session belongs on a page showing ``state`` (live updates)."""
    return history(state).filter(id=session_id).exists()


def _review_filters(params: QueryDict, problems: list[str]) -> dict[str, Any]:
    """Review status (several), assignee (a username or ``UNASSIGNED``) and quality."""
    statuses = tuple(s for s in params.getlist("review_status") if s)
    if unknown := [s for s in statuses if s not in ReviewStatus.values]:
        problems.append(
            f"Unknown review status {', '.join(unknown)[:100]}; one of "
            f"{', '.join(ReviewStatus.values)}."
        )
        statuses = tuple(s for s in statuses if s in ReviewStatus.values)
    assignee = params.get("assignee", "").strip()
    if len(assignee) > MAX_TEXT_FILTER:
        problems.append(f"The assignee filter is over {MAX_TEXT_FILTER} characters; ignored.")
        assignee = ""
    rating = params.get("quality_rating", "")
    if rating and rating not in QualityRating.values:
        problems.append(
            f"Unknown quality rating {rating[:50]!r}; one of {', '.join(QualityRating.values)}."
        )
        rating = ""
    return {"review_statuses": statuses, "assignee": assignee, "rating": rating}


def _time_range(
    params: QueryDict, problems: list[str]
) -> tuple[str, datetime | None, datetime | None]:
    window = params.get("range", "")
    now = timezone.now()
    if not window:
        return "", None, None
    if window in RANGES:
        return window, now - RANGES[window], None
    if window != "custom":
        problems.append(f"Unknown time range {window[:20]!r}; use 1h, 24h, 7d, 30d or custom.")
        return "", None, None
    start = _datetime(params.get("from", ""), "from", problems)
    end = _datetime(params.get("to", ""), "to", problems)
    if start and end and end <= start:
        problems.append("The time range ends before it starts; showing every time.")
        return "custom", None, None
    return "custom", start, end


def _datetime(value: str, name: str, problems: list[str]) -> datetime | None:
    if not value:
        return None
    try:
        parsed = datetime.fromisoformat(value[:40])
    except ValueError:
        problems.append(f"{name!r} is not a date and time (YYYY-MM-DDTHH:MM); ignored.")
        return None
    if timezone.is_naive(parsed):
        parsed = timezone.make_aware(parsed)
    return parsed


def _local_input(value: datetime) -> str:
    """The ``datetime-local`` input format, in the server's time zone."""
    return timezone.localtime(value).strftime("%Y-%m-%dT%H:%M")


def _int(value: str | None, default: int) -> int:
    try:
        return int(value) if value else default
    except ValueError:
        return default


def status_choices() -> list[tuple[str, str]]:
    return [(s, SessionStatus(s).label) for s in HISTORY_STATUSES]
