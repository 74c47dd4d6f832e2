"""For the in-process benchmarks: Django set up on a fresh, migrated database (SQLite in a
temporary directory, or an empty PostgreSQL database made on the server in
``TARSY_TEST_POSTGRES_URL`` and dropped afterwards)."""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator


@contextlib.contextmanager
def fresh_database(db: str, *, prefix: str) -> Iterator[None]:
    data = tempfile.mkdtemp(prefix=prefix)
    os.environ["TARSY_DATA_DIR"] = data
    os.environ["DJANGO_SETTINGS_MODULE"] = "tarsy_site.settings"
    with contextlib.ExitStack() as stack:
        if db == "postgres":
            from tests.e2e.harness import postgres_database, postgres_server_url

            server = postgres_server_url()
            if server is None:
                sys.exit("set TARSY_TEST_POSTGRES_URL to a PostgreSQL server")
            os.environ["DATABASE_URL"] = stack.enter_context(postgres_database(server))
        else:
            os.environ["DATABASE_URL"] = f"sqlite:///{data}/bench.sqlite3"
        import django

        django.setup()
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        try:
            yield
        finally:
            from django.db import connections

            connections.close_all()  # before the database is dropped
