"""SQLite: each session knows its search row's id (``AlertSession.search_rowid``), which
the search's walk reads from the indexes instead of looking each session's row up.
Kept by a trigger whatever writes the search row; filled for sessions stored before."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from sessions import services
from sessions.models import AlertSession, SessionSearch

BEFORE = ("alert_sessions", "0012_timeline_session_order")
AFTER = ("alert_sessions", "0013_session_search_rowid")


def sqlite_only() -> None:
    if connection.vendor != "sqlite":
        pytest.skip("PostgreSQL's search plans itself; it keeps no search_rowid")


@pytest.mark.django_db
def test_a_created_session_knows_its_search_row(demo_provider):
    sqlite_only()
    session = services.session_create(
        alert_type="PodCrashLooping",
        alert_data="payments-api",
        chain_id="kubernetes-investigation",
        author="alice",
    )

    search_row = SessionSearch.objects.get(session=session)
    assert AlertSession.objects.get(id=session.id).search_rowid == search_row.id


@pytest.mark.django_db
def test_search_rows_written_in_bulk_are_known_too():
    sqlite_only()
    sessions = AlertSession.objects.bulk_create(
        AlertSession(alert_type="t", alert_data=f"alert {n}", chain_id="c") for n in range(5)
    )
    rows = SessionSearch.objects.bulk_create(
        SessionSearch(session=s, body=s.alert_data) for s in reversed(sessions)
    )

    assert len(rows) == 5
    known = dict(AlertSession.objects.values_list("id", "search_rowid"))
    assert known == dict(SessionSearch.objects.values_list("session_id", "id"))
    assert None not in known.values()


@pytest.mark.django_db(transaction=True)
def test_the_migration_fills_in_sessions_stored_before_it():
    sqlite_only()
    executor = MigrationExecutor(connection)
    executor.migrate([BEFORE])
    try:
        apps = executor.loader.project_state([BEFORE]).apps
        Session = apps.get_model("alert_sessions", "AlertSession")
        Search = apps.get_model("alert_sessions", "SessionSearch")
        old = [
            Session.objects.create(alert_type="t", alert_data=f"old {n}", chain_id="c")
            for n in range(3)
        ]
        for session in old:
            Search.objects.create(session_id=session.id, body=session.alert_data)
        without = Session.objects.create(alert_type="t", alert_data="no search row", chain_id="c")
    finally:
        executor = MigrationExecutor(connection)
        executor.loader.build_graph()
        executor.migrate(executor.loader.graph.leaf_nodes())

    for session in old:
        assert AlertSession.objects.get(id=session.id).search_rowid == (
            SessionSearch.objects.get(session_id=session.id).id
        )
    assert AlertSession.objects.get(id=without.id).search_rowid is None
    # And the trigger it created keeps new ones.
    later = AlertSession.objects.create(alert_type="t", alert_data="new", chain_id="c")
    row = SessionSearch.objects.create(session=later, body="new")
    assert AlertSession.objects.get(id=later.id).search_rowid == row.id
