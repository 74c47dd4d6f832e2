"""Migrated SQLite databases, made once per migration state and copied by every test.

Migrating takes seconds of CPU; copying, milliseconds. pytest-django migrates a fresh test
database in every process of a run (each xdist worker, each ``pytest`` call), and each
real deployment the tests start needs a migrated database too. Here the first process to
need one migrates it as usual and keeps a copy in the run's data directory (shared by the
xdist workers), named by a digest of every migration that built it; the other processes,
and the next run, copy that file instead. PostgreSQL is set up as pytest-django always does.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import sqlite3
from collections.abc import Callable, Iterator
from importlib.metadata import version
from pathlib import Path

from django.apps import apps

# The run's data directory, above each xdist worker's own (set by tests/conftest.py).
SHARED_DIR: Path | None = None


def copy_sqlite(source: Path, target: Path) -> None:
    """Copy an SQLite database with the backup API, not as a file: it is in WAL mode."""
    with (
        contextlib.closing(sqlite3.connect(source)) as src,
        contextlib.closing(sqlite3.connect(target)) as dst,
    ):
        src.backup(dst)


def remove_sqlite(path: Path) -> None:
    for name in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
        name.unlink(missing_ok=True)


def migrations_digest() -> str:
    """What a migrated database depends on: the migration files of every installed app
    (ours and third-party) and the Django that runs them."""
    digest = hashlib.sha256(version("django").encode())
    for app in sorted(apps.get_app_configs(), key=lambda app: app.label):
        for path in sorted((Path(app.path) / "migrations").glob("*.py")):
            digest.update(f"{app.label}/{path.name}".encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Held by one process at a time: the others wait while the first migrates."""
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def shared_dir() -> Path:
    if SHARED_DIR is None:
        raise RuntimeError("tests/conftest.py sets sqlite_template.SHARED_DIR")
    SHARED_DIR.mkdir(parents=True, exist_ok=True)
    return SHARED_DIR


def template(kind: str, migrate: Callable[[Path], None]) -> Path:
    """The migrated database of ``kind``, made by ``migrate(path)`` if no process made it
    for today's migrations (under a lock: one process makes it, the others wait); a
    template made for other migrations is removed."""
    shared = shared_dir()
    path = shared / f"template-{kind}-{migrations_digest()}.sqlite3"
    with _locked(shared / f"template-{kind}.lock"):
        if not path.exists():
            partial = path.with_suffix(f".{os.getpid()}.partial")
            migrate(partial)
            for old in shared.glob(f"template-{kind}-*.sqlite3"):
                remove_sqlite(old)
            partial.rename(path)
    return path


def set_up_test_database(settings_dict: dict, setup_databases) -> object:
    """Set up the SQLite test database of ``settings_dict`` as a copy of the template
    (Django's ``keepdb`` then finds nothing to apply); returns ``setup_databases``'s
    result, for ``teardown_databases``."""
    test_db = Path(settings_dict["TEST"]["NAME"])
    config: list[object] = []

    def migrate(path: Path) -> None:
        config.append(setup_databases(verbosity=0, interactive=False))
        copy_sqlite(test_db, path)

    source = template("test", migrate)
    if config:  # this process migrated its own database to make the template
        return config[0]
    remove_sqlite(test_db)
    copy_sqlite(source, test_db)
    return setup_databases(verbosity=0, interactive=False, keepdb=True)
