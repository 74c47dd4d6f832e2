"""First-run set-up used by bin/run: a login and an LLM provider.

Safe to run from several containers at once: the whole set-up is one transaction,
serialized across processes, so only one of them creates anything.
"""

from __future__ import annotations

import os
import secrets

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.db import transaction
from django_q.models import Schedule

from llm.models import LLMProvider, ProviderType
from sessions.services import serialize_transaction

# The first of these whose key variable is set becomes the default provider on a
# fresh install; with none set, the scripted demo does.
KEYED_PROVIDERS = [
    ("gemini", ProviderType.GOOGLE, "gemini-2.5-flash", "GEMINI_API_KEY"),
    ("gemini", ProviderType.GOOGLE, "gemini-2.5-flash", "GOOGLE_API_KEY"),
    ("openai", ProviderType.OPENAI, "gpt-5", "OPENAI_API_KEY"),
    ("anthropic", ProviderType.ANTHROPIC, "claude-sonnet-4-5", "ANTHROPIC_API_KEY"),
]


class Command(BaseCommand):
    help = "Make sure a login and an LLM provider exist."

    def handle(self, *args, **options) -> None:
        with transaction.atomic():
            serialize_transaction("tarsy-setup")
            self.ensure_login()
            self.ensure_provider()
            # Earlier versions reaped orphans from a django-q2 schedule; every qcluster's
            # supervisor does it now (worker/supervision.py).
            Schedule.objects.filter(name="tarsy-reap-orphans").delete()

    def ensure_login(self) -> None:
        users = get_user_model()
        password_file = settings.DATA_DIR / "admin-password.txt"
        if users.objects.filter(is_superuser=True).exists():
            if password_file.exists():
                self.stdout.write(f"Log in as 'admin' with the password in {password_file}")
            else:
                self.stdout.write("Log in with your existing admin account.")
            return
        password = os.environ.get("TARSY_ADMIN_PASSWORD") or secrets.token_urlsafe(12)
        users.objects.create_superuser("admin", "", password)
        if "TARSY_ADMIN_PASSWORD" not in os.environ:
            password_file.parent.mkdir(parents=True, exist_ok=True)
            password_file.write_text(password + "\n")
            password_file.chmod(0o600)
            self.stdout.write(
                f"Created the login 'admin'; its password is in {password_file} "
                "(change it in Admin → Users)."
            )
        else:
            self.stdout.write("Created the login 'admin' with TARSY_ADMIN_PASSWORD.")

    def ensure_provider(self) -> None:
        if LLMProvider.objects.exists():
            return
        for name, provider_type, model, key_env in KEYED_PROVIDERS:
            if os.environ.get(key_env):
                LLMProvider.objects.create(
                    name=name, type=provider_type, model=model, api_key_env=key_env, is_default=True
                )
                self.stdout.write(
                    f"{key_env} is set: created the default LLM provider '{name}' "
                    f"({provider_type}, {model}). Change it in Admin → LLM providers."
                )
                return
        LLMProvider.objects.create(
            name="demo",
            type=ProviderType.SCRIPTED,
            model="demo-investigator",
            options={"script": "demo", "chunk_delay": 0.03},
            is_default=True,
        )
        self.stdout.write(
            "No LLM provider was configured: created the scripted 'demo' provider. "
            "Add a real one in Admin → LLM providers."
        )
