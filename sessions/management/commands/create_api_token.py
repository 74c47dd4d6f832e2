from __future__ import annotations

from django.core.management.base import BaseCommand

from sessions.auth import api_token_create


class Command(BaseCommand):
    help = (
        "Create an API token for USERNAME (the user is created if needed); prints only the token."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("username")

    def handle(self, *args, username: str, **options) -> None:
        self.stdout.write(api_token_create(username=username))
