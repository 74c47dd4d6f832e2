from __future__ import annotations

import contextlib
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django_q.models import Schedule

from llm.models import LLMProvider
from tests.e2e.harness import migrated_sqlite
from tests.sqlite_template import copy_sqlite

pytestmark = pytest.mark.django_db

KEY_VARIABLES = ("GEMINI_API_KEY", "GOOGLE_API_KEY", "OPENAI_API_KEY", "ANTHROPIC_API_KEY")


@pytest.fixture(autouse=True)
def no_keys(monkeypatch, settings, tmp_path):
    settings.DATA_DIR = tmp_path
    for name in KEY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("TARSY_ADMIN_PASSWORD", raising=False)


def test_a_fresh_install_gets_a_login_and_the_demo_provider(tmp_path, capsys):
    call_command("tarsy_setup")
    out = capsys.readouterr().out
    password = (tmp_path / "admin-password.txt").read_text().strip()
    assert password not in out  # the password goes to a 0600 file, not the terminal
    assert str(tmp_path / "admin-password.txt") in out
    admin = get_user_model().objects.get(username="admin")
    assert admin.is_superuser
    assert admin.check_password(password)
    demo = LLMProvider.objects.get()
    assert (demo.name, demo.type, demo.is_default) == ("demo", "scripted", True)


def test_the_old_reaper_schedule_is_removed(capsys):
    # Every qcluster's supervisor reaps orphans now; a schedule left by an earlier
    # version would call a task that no longer exists.
    Schedule.objects.create(name="tarsy-reap-orphans", func="worker.tasks.reap_orphans")
    call_command("tarsy_setup")
    assert not Schedule.objects.exists()


def test_it_is_idempotent(capsys):
    call_command("tarsy_setup")
    call_command("tarsy_setup")
    assert get_user_model().objects.count() == 1
    assert LLMProvider.objects.count() == 1


def test_an_api_key_in_the_environment_makes_a_real_default_provider(monkeypatch, capsys):
    monkeypatch.setenv("GEMINI_API_KEY", "AIza-not-a-real-key")
    call_command("tarsy_setup")
    provider = LLMProvider.objects.get()
    assert (provider.type, provider.api_key_env, provider.is_default) == (
        "google",
        "GEMINI_API_KEY",
        True,
    )
    assert "AIza-not-a-real-key" not in capsys.readouterr().out
    assert not LLMProvider.objects.filter(type="scripted").exists()


def test_a_chosen_admin_password_is_used(monkeypatch, tmp_path):
    monkeypatch.setenv("TARSY_ADMIN_PASSWORD", "chosen-password-1")
    call_command("tarsy_setup")
    assert get_user_model().objects.get(username="admin").check_password("chosen-password-1")
    assert not (tmp_path / "admin-password.txt").exists()


@pytest.mark.django_db(transaction=True)
def test_two_set_ups_at_once_on_a_fresh_database_both_succeed(tmp_path):
    """A multi-container start runs tarsy_setup in every container at the same time."""
    base = {**os.environ, "SECRET_KEY": "test", "TARSY_ADMIN_PASSWORD": "pw-for-the-test-1"}
    for name in KEY_VARIABLES:
        base.pop(name, None)
    manage = [sys.executable, "manage.py"]
    env = {**base, "TARSY_DATA_DIR": str(tmp_path)}
    for attempt in range(4):
        database = tmp_path / f"race-{attempt}.sqlite3"
        # Migrated by manage.py, no user yet: what a first start meets.
        copy_sqlite(migrated_sqlite(), database)
        env = {**env, "DATABASE_URL": f"sqlite:///{database}"}
        both = [
            subprocess.Popen(
                [*manage, "tarsy_setup"],
                env=env,
                cwd=ROOT,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            for _ in range(2)
        ]
        outputs = [process.communicate(timeout=120)[0] for process in both]
        assert [process.returncode for process in both] == [0, 0], outputs
        with contextlib.closing(sqlite3.connect(database)) as db:
            users, providers = (
                db.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
                for table in ("auth_user", LLMProvider._meta.db_table)
            )
        assert (users, providers) == (1, 1), outputs


ROOT = Path(__file__).resolve().parents[2]
