from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django_q.models import Schedule

from llm.models import LLMProvider

pytestmark = pytest.mark.django_db

KEY_VARIABLES = ("GEMINI_API_KEY", "GOOGLE_API_KEY", "OPENAI_API_KEY", "ANTHROPIC_API_KEY")


@pytest.fixture(autouse=True)
def no_keys(monkeypatch, settings, tmp_path):
    settings.DATA_DIR = tmp_path
    for name in KEY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("TARSY_ADMIN_PASSWORD", raising=False)


def test_a_fresh_install_gets_a_login_the_demo_provider_and_the_reaper(tmp_path, capsys):
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
    assert Schedule.objects.filter(func="sessions.tasks.reap_orphans").count() == 1


def test_it_is_idempotent(capsys):
    call_command("tarsy_setup")
    call_command("tarsy_setup")
    assert get_user_model().objects.count() == 1
    assert LLMProvider.objects.count() == 1
    assert Schedule.objects.count() == 1


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
