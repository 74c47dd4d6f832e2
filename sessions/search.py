"""Full-text search over sessions, on the database's own index.

One selector, two backends. SQLite has an FTS5 table over ``SessionSearch.body`` kept
by triggers; PostgreSQL has a GIN index on ``to_tsvector('simple', …)`` of the same
column. Both see the same words: the text is cut at every character that is not a
letter or digit (FTS5's ``unicode61`` tokenizer does that itself; on PostgreSQL the
indexed expression replaces them with spaces first, so ``payments-api.prod`` is three
words there too, not one host name), lower-cased, with no stemming.

Query syntax (the search box and ``?q=``): words are ANDed, each matches as a prefix
(``crash`` finds ``CrashLoopBackOff``); ``"two words"`` matches them next to each other;
punctuation inside a word joins its parts the same way (``payments-api``).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from django.db import connection
from django.db.models import BooleanField, QuerySet
from django.db.models.expressions import RawSQL

MIN_QUERY_LENGTH = 3
MAX_QUERY_TERMS = 12
# What one session contributes to the index. PostgreSQL refuses a tsvector over 1 MB, and
# the words past this point are tool output that the alert and the analysis summarise.
MAX_BODY_CHARS = 200_000
TABLE = "alert_sessions_sessionsearch"
FTS_TABLE = "alert_sessions_sessionsearch_fts"
# PostgreSQL: the indexed expression; a query must use the very same text to use the index.
PG_VECTOR = "to_tsvector('simple', regexp_replace(body, '[^[:alnum:]]+', ' ', 'g'))"
# Around each match in a snippet; private-use characters, so no text can contain them.
MARK_START, MARK_END = "\ue000", "\ue001"

_WORD = re.compile(r"[^\W_]+")
_TERM = re.compile(r'"([^"]*)"|(\S+)')


class SearchError(ValueError):
    """The query cannot be searched; the message says why, for the user."""


@dataclass(frozen=True)
class Query:
    """A parsed search: each term is one word or several that must be adjacent."""

    terms: tuple[tuple[str, ...], ...]

    @classmethod
    def parse(cls, text: str) -> Query:
        text = text.strip()
        if len(text) < MIN_QUERY_LENGTH:
            raise SearchError(f"Search needs at least {MIN_QUERY_LENGTH} characters.")
        terms = []
        for phrase, word in _TERM.findall(text):
            words = tuple(w.lower() for w in _WORD.findall(phrase or word))
            if words and words not in terms:
                terms.append(words)
        if not terms:
            raise SearchError("Search for words or numbers: punctuation alone matches nothing.")
        if len(terms) > MAX_QUERY_TERMS:
            raise SearchError(f"Search for at most {MAX_QUERY_TERMS} words or phrases.")
        return cls(tuple(terms))

    def fts5(self) -> str:
        """``"crash" * AND "payments api" *``: words are quoted, so none is an operator."""
        return " AND ".join(f'"{" ".join(words)}" *' for words in self.terms)

    def tsquery(self) -> str:
        """``crash:* & payments:* <-> api:*`` for ``to_tsquery('simple', …)``."""
        return " & ".join(
            "(" + " <-> ".join(f"{word}:*" for word in words) + ")" for words in self.terms
        )

    @property
    def words(self) -> list[str]:
        return [word for words in self.terms for word in words]


def matching(sessions: QuerySet, query: Query) -> QuerySet:
    """``sessions`` narrowed to those whose indexed text matches."""
    if connection.vendor == "postgresql":
        ids = RawSQL(
            f"SELECT session_id FROM {TABLE} WHERE {PG_VECTOR} @@ to_tsquery('simple', %s)",
            [query.tsquery()],
        )
    else:
        ids = RawSQL(
            f"SELECT s.session_id FROM {FTS_TABLE} f JOIN {TABLE} s ON s.id = f.rowid "
            f"WHERE {FTS_TABLE} MATCH %s",
            [query.fts5()],
        )
    return sessions.filter(id__in=ids)


# SQLite: a search's matching search rows, gathered once per request (``gathered``).
MATCHES = "tarsy_search_matches"


@contextmanager
def gathered(query: Query) -> Iterator[int | None]:
    """SQLite: the search rows matching ``query`` gathered once, into a temporary table
    of this connection (nothing is written to the database file), for the block; yields
    how many sessions match. Inside it ``matching_in_order`` and ``matching_gathered``
    read that table instead of running the full-text query again: a request that counts
    its matches, pages through them and counts them under a filter does the index's work
    once, not three times (a phrase cost 46 ms per pass at 100,000 sessions). One search
    at a time per connection: an inner one would replace the outer one's table.
    PostgreSQL: yields None and gathers nothing; its planner needs no help."""
    if connection.vendor != "sqlite":
        yield None
        return
    with connection.cursor() as cursor:
        cursor.execute(f"DROP TABLE IF EXISTS temp.{MATCHES}")
        # Rowids come out of the index in ascending order, so filling the primary key
        # only appends.
        cursor.execute(f"CREATE TEMP TABLE {MATCHES} (id INTEGER PRIMARY KEY)")
        cursor.execute(
            f"INSERT INTO temp.{MATCHES} SELECT rowid FROM {FTS_TABLE} WHERE {FTS_TABLE} MATCH %s",
            [query.fts5()],
        )
        count = cursor.rowcount
    try:
        yield count
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f"DROP TABLE IF EXISTS temp.{MATCHES}")


def _gathered_condition(session_table: str) -> RawSQL:
    """True for a session whose search row is among the gathered matches: a lookup in the
    gathered table's primary key by the session's ``search_rowid``, which the indexes
    that order and filter sessions hold (no lookup of the session's row)."""
    return RawSQL(
        f'EXISTS (SELECT 1 FROM temp.{MATCHES} m WHERE m.id = "{session_table}"."search_rowid")',
        [],
        output_field=BooleanField(),
    )


def matching_in_order(sessions: QuerySet) -> QuerySet:
    """``sessions`` narrowed to the gathered matches, for a query whose ORDER BY an index
    can walk (the newest first): each session the walk reaches is looked up among the
    matches, and the walk stops once the page is full, so a word in every alert costs no
    more than one in a few thousand. A rare word is cheaper through
    ``matching_gathered``: the walk would go through every session looking for it.
    Inside ``gathered`` only."""
    return sessions.filter(_gathered_condition(sessions.model._meta.db_table))


def matching_gathered(sessions: QuerySet) -> QuerySet:
    """``sessions`` narrowed to the gathered matches, found from the matches' side (each
    match's session through the index on ``search_rowid``), then sorted, whatever the
    order: for few matches, or an order no index walks. Inside ``gathered`` only."""
    return sessions.filter(search_rowid__in=RawSQL(f"SELECT id FROM temp.{MATCHES}", []))


def searchable_sessions() -> int:
    """About how many sessions can be searched: the newest search row's id (a lookup,
    not a count; sessions deleted since are counted too)."""
    from sessions.models import SessionSearch

    newest = SessionSearch.objects.order_by("-id").values_list("id", flat=True).first()
    return newest or 0


SNIPPET_BEFORE, SNIPPET_AFTER = 60, 180


def snippets(session_ids: list[uuid.UUID], query: Query) -> dict[uuid.UUID, str]:
    """Where each session matched: an excerpt around its first match, with
    ``MARK_START``/``MARK_END`` around every matching word. Only for the page's rows.

    Made here rather than by FTS5's ``snippet()`` or ``ts_headline``: both backends
    then show the same excerpt, and a word in every session costs nothing extra
    (``snippet()`` walks all of a common word's matches to find 25 rows).
    """
    from sessions.models import SessionSearch

    if not session_ids:
        return {}
    words = sorted(set(query.words), key=len, reverse=True)
    found = re.compile(
        r"(?<![^\W_])(?:" + "|".join(re.escape(w) for w in words) + r")[^\W_]*", re.IGNORECASE
    )
    excerpts = {}
    rows = SessionSearch.objects.filter(session_id__in=session_ids).values_list(
        "session_id", "body"
    )
    for session_id, body in rows:
        first = found.search(body)
        if first is None:
            continue
        start = max(0, first.start() - SNIPPET_BEFORE)
        window = body[start : first.start() + SNIPPET_AFTER]
        marked = found.sub(lambda m: MARK_START + m.group(0) + MARK_END, window)
        marked = " ".join(marked.split())
        excerpts[session_id] = ("… " if start else "") + marked + " …"
    return excerpts


def newest_matches(
    query: Query, filters: list[str], params: list, *, limit: int, offset: int = 0
) -> list[uuid.UUID]:
    """SQLite: the ids of matching ended sessions, newest first, through the full-text
    index in its own order (a search row is written when its session is created, so its
    rowid follows ``created_at``). The index drives the join (``CROSS JOIN`` fixes the
    order) and stops after ``limit``, however many sessions match: a word in every alert
    costs no more than a rare one. ``filters`` are SQL conditions on ``a``, the session.
    """
    sql = (
        f"SELECT a.id FROM {FTS_TABLE} f CROSS JOIN {TABLE} s ON s.id = f.rowid "
        "CROSS JOIN alert_sessions_alertsession a ON a.id = s.session_id "
        f"WHERE {FTS_TABLE} MATCH %s {''.join(' AND ' + c for c in filters)} "
        "ORDER BY f.rowid DESC LIMIT %s OFFSET %s"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [query.fts5(), *params, limit, offset])
        return [uuid.UUID(str(row[0])) for row in cursor.fetchall()]


def count_matches(query: Query, filters: list[str], params: list, *, cap: int) -> int:
    """SQLite: how many ended sessions match, counting no further than ``cap`` + 1."""
    sql = (
        f"SELECT COUNT(*) FROM (SELECT 1 FROM {FTS_TABLE} f "
        f"CROSS JOIN {TABLE} s ON s.id = f.rowid "
        "CROSS JOIN alert_sessions_alertsession a ON a.id = s.session_id "
        f"WHERE {FTS_TABLE} MATCH %s {''.join(' AND ' + c for c in filters)} LIMIT %s)"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [query.fts5(), *params, cap + 1])
        return cursor.fetchone()[0]


def document(session, timeline_texts: list[str]) -> str:
    """The text one session is found by: alert type and data, final analysis, executive
    summary, then its timeline, up to ``MAX_BODY_CHARS``."""
    parts = [
        session.alert_type,
        session.alert_data,
        session.final_analysis,
        session.executive_summary,
        session.error_message,
        *timeline_texts,
    ]
    return "\n\n".join(part for part in parts if part)[:MAX_BODY_CHARS]
