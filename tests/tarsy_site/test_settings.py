from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured

from tarsy_site import settings as tarsy_settings
from tarsy_site.env import env_bool, env_float, env_list


def test_sqlite_gets_wal_immediate_transactions_and_a_busy_timeout(monkeypatch, tmp_path):
    monkeypatch.setenv("DATABASE_URL", f"sqlite:///{tmp_path}/db.sqlite3")
    config = tarsy_settings._database()
    assert config["ENGINE"] == "django.db.backends.sqlite3"
    assert config["OPTIONS"]["transaction_mode"] == "IMMEDIATE"
    assert config["OPTIONS"]["timeout"] >= 20
    assert "journal_mode=WAL" in config["OPTIONS"]["init_command"]


def test_postgres_urls_are_understood(monkeypatch):
    monkeypatch.setenv("DATABASE_URL", "postgres://tarsy:secret@db.internal:5433/tarsy")
    config = tarsy_settings._database()
    assert (config["ENGINE"], config["HOST"], config["PORT"], config["NAME"]) == (
        "django.db.backends.postgresql",
        "db.internal",
        5433,
        "tarsy",
    )


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("mysql://u@h/d", "TARSy supports sqlite:// and postgres://"),
        ("nonsense", "DATABASE_URL='nonsense' is not understood"),
    ],
)
def test_unsupported_database_urls_are_named(monkeypatch, url, message):
    monkeypatch.setenv("DATABASE_URL", url)
    with pytest.raises(ImproperlyConfigured, match=message):
        tarsy_settings._database()


def test_booleans_numbers_and_lists(monkeypatch):
    monkeypatch.setenv("X_BOOL", "maybe")
    with pytest.raises(ImproperlyConfigured, match="X_BOOL='maybe' is not a boolean"):
        env_bool("X_BOOL")
    monkeypatch.setenv("X_BOOL", "On")
    assert env_bool("X_BOOL") is True
    monkeypatch.setenv("X_FLOAT", "-1")
    with pytest.raises(ImproperlyConfigured, match="must be at least 0"):
        env_float("X_FLOAT", 1.0)
    monkeypatch.setenv("X_LIST", "a.example, b.example,,")
    assert env_list("X_LIST", []) == ["a.example", "b.example"]


def test_a_missing_postgres_driver_says_how_to_install_it(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "psycopg", None)  # import now raises ImportError
    monkeypatch.setenv("DATABASE_URL", "postgres://tarsy@localhost/tarsy")
    with pytest.raises(ImproperlyConfigured, match=r"pip install -e '\.\[postgres\]'"):
        tarsy_settings._database()
