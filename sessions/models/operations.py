"""What keeps the system running: worker clusters' heartbeats, MCP server health, API
tokens and the search index."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models

from sessions.models.session import AlertSession


class WorkerCluster(models.Model):
    """A running ``manage.py qcluster``: its supervisor beats here every
    ``TARSY_RECOVERY_INTERVAL``, so /health can tell whether anyone is taking work."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    host = models.CharField(max_length=200)
    pid = models.PositiveIntegerField()
    workers = models.PositiveIntegerField()
    # Its TARSY_WORKER_SESSIONS: what each of its workers runs at once (/health's room).
    # Null for a cluster started before it was reported: the web host's own value.
    sessions_per_worker = models.PositiveIntegerField(null=True, blank=True)
    started_at = models.DateTimeField(auto_now_add=True)
    heartbeat_at = models.DateTimeField()

    class Meta:
        ordering = ["-heartbeat_at"]
        indexes = [models.Index(fields=["heartbeat_at"], name="cluster_heartbeat")]

    def __str__(self) -> str:
        return f"{self.host}:{self.pid}"


class MCPServerHealth(models.Model):
    """The last health check of one MCP server: its tools, or why it could not list them.
    Written by the workers that use it (every 15 s) and the qcluster at start-up."""

    server_id = models.CharField(max_length=100, primary_key=True)
    healthy = models.BooleanField(default=False)
    tools = models.JSONField(default=list, blank=True)
    error = models.TextField(blank=True)
    checked_at = models.DateTimeField()

    class Meta:
        ordering = ["server_id"]
        verbose_name = "MCP server health"
        verbose_name_plural = "MCP server health"

    def __str__(self) -> str:
        return f"{self.server_id} ({'healthy' if self.healthy else 'unhealthy'})"


class ApiToken(models.Model):
    """A bearer token for API clients. Only its SHA-256 is stored."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    token_hash = models.CharField(max_length=64, unique=True, editable=False)
    prefix = models.CharField(max_length=12, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "API token"

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.user})"


class SessionSearch(models.Model):
    """What full-text search reads for one session: its alert, analysis, executive summary
    and timeline, written at submission and again when the session ends.

    The index is the database's own (sessions/search.py): an FTS5 table kept by triggers
    on SQLite, a GIN expression index on PostgreSQL; both created in migration 0006.
    """

    session = models.OneToOneField(AlertSession, on_delete=models.CASCADE, related_name="search")
    body = models.TextField()

    def __str__(self) -> str:
        return f"search text of {self.session_id}"
