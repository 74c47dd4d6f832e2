"""``manage.py tarsy_reembed``: embed stored lessons again with the embedder in use.

Recall compares only vectors of the embedder in use (sessions/selectors/memory.py), so
after the embedder changes, lessons made by the old one are not recalled until this has
run. It never mixes dimensions: each lesson is re-embedded whole, with its embedder's
name and size. Safe to interrupt and run again: it picks up what is left.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from agents.memory import memory_embedder
from config.loader import get_config
from llm.embeddings import EmbeddingFailed, to_blob
from sessions.models import InvestigationMemory

BAR = 30


class Command(BaseCommand):
    help = "Embed stored investigation memories again with the embedder in use."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--all",
            action="store_true",
            help="also the lessons the embedder in use made already",
        )
        parser.add_argument("--batch", type=int, default=200, help="lessons per write (200)")

    def handle(self, *args: Any, **options: Any) -> None:
        embedder = memory_embedder(get_config())
        lessons = InvestigationMemory.objects.all()
        if not options["all"]:
            lessons = lessons.exclude(embedding_model=embedder.name, dimensions=embedder.dimensions)
        ids = list(lessons.order_by("created_at").values_list("id", flat=True))
        batch = max(1, options["batch"])
        for start in range(0, len(ids), batch):
            rows = list(InvestigationMemory.objects.filter(id__in=ids[start : start + batch]))
            try:
                vectors = embedder.embed([row.content for row in rows], "document")
            except EmbeddingFailed as problem:  # what is done so far stays done
                raise CommandError(f"{problem}; {start} of {len(ids)} re-embedded") from None
            for row, vector in zip(rows, vectors, strict=True):
                row.embedding = to_blob(vector)
                row.embedding_model, row.dimensions = embedder.name, embedder.dimensions
            # Not updated_at: a lesson's age (its decay) is not its vector's.
            InvestigationMemory.objects.bulk_update(
                rows, ["embedding", "embedding_model", "dimensions"]
            )
            done = min(start + batch, len(ids))
            filled = BAR * done // len(ids)
            self.stdout.write(
                f"\r[{'#' * filled}{'.' * (BAR - filled)}] {done}/{len(ids)}", ending=""
            )
        self.stdout.write(
            ("\n" if ids else "")
            + f"{len(ids)} lessons embedded with {embedder.name} ({embedder.dimensions} dimensions)"
        )
