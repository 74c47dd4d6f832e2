"""Discovery and liveness: alert types, runbooks, system status, health
(docs/api.md §1.13, §1.14)."""

from __future__ import annotations

import hashlib
from importlib import metadata
from typing import Any

from django.conf import settings
from django.db import DatabaseError, connection
from django.http import HttpRequest, JsonResponse
from django.utils import timezone
from ninja import Router

from api.rest import schemas
from api.rest import system_config as config_view
from api.rest.common import ApiRejected, iso, respond
from config.loader import get_config
from live.relay import relay_health
from sessions import runbooks, selectors
from sessions.selectors import cluster_silence_limit
from sessions.selectors.system import system_status

router = Router(tags=["system"])

_VERSION = metadata.version("tarsy")


@router.get("/alert-types", response={200: schemas.AlertTypes, 401: schemas.Error})
def alert_types(request: HttpRequest) -> JsonResponse:
    """Each alert type and the chain that investigates it, chains sorted by id."""
    config = get_config()
    default_chain = config.chain_for_alert_type(config.defaults.alert_type)
    return respond(
        {
            "alert_types": [
                {"type": alert_type, "chain_id": chain.id, "description": chain.description}
                for chain in sorted(config.chains.values(), key=lambda c: c.id)
                for alert_type in chain.alert_types
            ],
            "default_chain_id": default_chain.id if default_chain else None,
            "default_alert_type": config.defaults.alert_type,
        }
    )


@router.get("/runbooks", response={200: list[str], 401: schemas.Error})
def runbook_list(request: HttpRequest) -> JsonResponse:
    """The runbook URLs under ``system.runbooks.repo_url``; ``[]`` when none is
    configured or GitHub cannot be listed."""
    return respond(runbooks.list_runbooks(get_config()))


@router.get("/system/mcp-servers", response={200: schemas.McpServers, 401: schemas.Error})
def system_mcp_servers(request: HttpRequest) -> JsonResponse:
    """Each configured server's last health check (workers list every server's tools
    every ``TARSY_MCP_HEALTH_INTERVAL`` seconds), sorted by id."""
    servers = selectors.mcp_servers_health(list(get_config().mcp_servers))
    for server in servers:
        if server["last_check"]:
            server["last_check"] = server["last_check"].replace("+00:00", "Z")
    return respond({"servers": servers})


@router.get("/system/warnings", response={200: schemas.SystemWarnings, 401: schemas.Error})
def system_warnings(request: HttpRequest) -> JsonResponse:
    """What an operator should fix, as on the System page. Warnings are computed on each
    request, so ``created_at`` is now and ``id`` is stable per warning text."""
    now = iso(timezone.now())
    return respond(
        {
            "warnings": [
                {
                    "id": hashlib.sha256(f"{w.category}:{w.message}".encode()).hexdigest()[:16],
                    "category": w.category,
                    "message": w.message,
                    "details": "",
                    "created_at": now,
                }
                for w in system_status(get_config()).warnings
            ]
        }
    )


@router.get("/system/config", response={200: dict[str, Any], 401: schemas.Error})
def system_config(request: HttpRequest) -> JsonResponse:
    """The configuration in use (built-ins merged, templates expanded), as TARSy's
    config viewer reads it: an allowlist of keys, secrets only as names or flags."""
    return respond(config_view.system_config(get_config()))


@router.get(
    "/system/config/skills/{name}",
    response={200: dict[str, Any], 401: schemas.Error, 404: schemas.Error},
)
def system_config_skill(request: HttpRequest, name: str) -> JsonResponse:
    """One skill of the config directory's skills/, with its text."""
    skill = config_view.skill_detail(get_config(), name)
    if skill is None:
        raise ApiRejected("skill not found", 404)
    return respond(skill)


@router.get("/system/default-tools", response={200: dict[str, Any], 401: schemas.Error})
def system_default_tools(request: HttpRequest, alert_type: str | None = None) -> JsonResponse:
    """The MCP servers and Gemini native tools an alert of this type starts with (the
    submit form's override pre-fills them); every server for no or an unknown type."""
    return respond(config_view.default_tools(get_config(), alert_type or None))


@router.get(
    "/health",
    auth=None,
    response={200: schemas.Health, 503: schemas.Health},
    summary="Liveness (no authentication)",
)
def api_health(request: HttpRequest) -> JsonResponse:
    return health_response()


def health_response() -> JsonResponse:
    """``{status: healthy|degraded|unhealthy, version, checks: {name: {status, message}}}``.
    503 only when the database (or the configuration) is broken; work not being picked
    up is ``degraded`` with 200, so a load balancer keeps the web process while an
    operator gets told."""
    checks: dict[str, dict[str, Any]] = {}
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        checks["database"] = {"status": "healthy"}
        get_config()
        checks["config"] = {"status": "healthy"}
    except DatabaseError as exc:
        checks["database"] = {"status": "unhealthy", "message": str(exc)}
        return _health(checks, "unhealthy", 503)
    except ValueError as exc:
        checks["config"] = {"status": "unhealthy", "message": str(exc)}
        return _health(checks, "unhealthy", 503)
    checks["worker_pool"] = _worker_pool_check()
    checks["queue"] = _queue_check()
    relay_ok, relay_message = relay_health()
    checks["relay"] = {"status": "healthy" if relay_ok else "degraded", "message": relay_message}
    degraded = any(check["status"] != "healthy" for check in checks.values())
    return _health(checks, "degraded" if degraded else "healthy", 200)


def _health(checks: dict[str, dict[str, Any]], status: str, code: int) -> JsonResponse:
    return JsonResponse({"status": status, "version": _VERSION, "checks": checks}, status=code)


def _worker_pool_check() -> dict[str, Any]:
    within = cluster_silence_limit()
    clusters = selectors.live_worker_clusters(within_seconds=within)
    if not clusters:
        return {
            "status": "degraded",
            "message": f"no worker cluster has reported in the last {within:g} s: "
            "start one with 'manage.py qcluster'",
        }
    workers = sum(cluster.workers for cluster in clusters)
    return {"status": "healthy", "message": f"{len(clusters)} cluster(s), {workers} worker(s)"}


def _queue_check() -> dict[str, Any]:
    """Pending work that waited past ``TARSY_PENDING_RECOVERY_AFTER`` is stalled only when
    something could have run it: a live cluster with free room (its workers times its
    ``TARSY_WORKER_SESSIONS``, under ``TARSY_MAX_CONCURRENT_SESSIONS``), or no live cluster
    at all. Workers that are simply full make new sessions wait, which is healthy."""
    state = selectors.queue_state()
    check: dict[str, Any] = {
        "status": "healthy",
        "pending": state.pending,
        "running": state.running,
        "oldest_pending_seconds": state.oldest_pending_seconds,
    }
    clusters = selectors.live_worker_clusters(within_seconds=cluster_silence_limit())
    workers = sum(cluster.workers for cluster in clusters)
    # What the live workers can run at once, by each cluster's own TARSY_WORKER_SESSIONS
    # (a cluster that did not report it: this host's).
    capacity = sum(
        cluster.workers * (cluster.sessions_per_worker or settings.TARSY_WORKER_SESSIONS)
        for cluster in clusters
    )
    limit = settings.TARSY_MAX_CONCURRENT_SESSIONS
    at_limit = bool(limit) and state.running >= limit
    workers_full = bool(clusters) and state.running >= capacity
    check["capacity"] = min(capacity, limit) if limit else capacity
    waited = state.oldest_pending_seconds or 0
    if waited <= settings.TARSY_PENDING_RECOVERY_AFTER:
        if at_limit:
            check["message"] = f"at TARSY_MAX_CONCURRENT_SESSIONS ({limit}); new sessions wait"
        elif workers_full and state.pending:
            check["message"] = _busy_message(workers, capacity)
        return check
    if not clusters:
        check["status"] = "degraded"
        check["message"] = (
            f"the oldest pending session has waited {waited:.0f} s and no worker cluster "
            "is alive to run it: work is not being picked up"
        )
    elif at_limit:
        check["message"] = f"at TARSY_MAX_CONCURRENT_SESSIONS ({limit}); new sessions wait"
    elif workers_full:
        check["message"] = _busy_message(workers, capacity)
    else:
        check["status"] = "degraded"
        check["message"] = (
            f"the oldest pending session has waited {waited:.0f} s while the workers have "
            f"room ({state.running} of {check['capacity']} running): "
            "work is not being picked up"
        )
    return check


def _busy_message(workers: int, capacity: int) -> str:
    return (
        f"all {workers} worker(s) are busy ({capacity} session(s) at once, "
        "TARSY_WORKERS x TARSY_WORKER_SESSIONS); new sessions wait"
    )
