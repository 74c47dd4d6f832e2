"""Validation of an incoming alert, shared by the REST API and the web form."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings

from config.loader import get_config
from config.types import BUDGET_KINDS, Budget
from masking import mask_alert
from masking.bounded import UnsafeInput, load_json
from sessions import runbooks
from sessions.dedup import CLIENT_FINGERPRINT_LIMIT, alert_fingerprint


class AlertRejected(Exception):
    def __init__(self, message: str, status: int = 400, **extra: Any) -> None:
        super().__init__(message)
        self.status = status
        self.extra = extra


@dataclass(frozen=True)
class ValidAlert:
    alert_type: str
    chain_id: str
    data: str
    runbook: str = ""  # the runbook's text; a URL goes to ``runbook_url``
    runbook_url: str = ""
    slack_message_fingerprint: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    # The alert's own choice of MCP servers, tools and Gemini native tools (``mcp``).
    mcp_selection: dict[str, Any] | None = None
    # The duplicate-alert cooldown (``defaults.dedup``): the alert's fingerprint hash, ""
    # when the cooldown is off for its type; the window in seconds; the SRE's override.
    dedup_key: str = ""
    dedup_window: float = 600.0
    force_new: bool = False
    # What the investigation may spend: the configured limits, lowered where the alert
    # asked for less (``budget``); None: no limits.
    budget: dict[str, Any] | None = None


# Alerts are a few levels deep (Alertmanager's webhook is four); anything far deeper is
# an attack on the parser, the masker or the LLM prompt.
MAX_JSON_DEPTH = 32
ALLOWED_FIELDS = (
    "alert_type",
    "runbook",
    "data",
    "mcp",
    "slack_message_fingerprint",
    "fingerprint",
    "force_new",
    "budget",
)
RUNBOOK_URL_LIMIT = 2000  # characters (AlertSession.runbook_url)
FINGERPRINT_LIMIT = 500  # characters (AlertSession.slack_message_fingerprint)
MCP_KEYS = ("servers", "native_tools")
MCP_SERVER_KEYS = ("name", "tools")
NATIVE_TOOLS = ("google_search", "code_execution", "url_context")


def read_json_body(raw: bytes) -> dict[str, Any]:
    """The request body as a JSON object; ``AlertRejected`` names what is wrong with it."""
    try:
        # The body's size is bounded by the caller (api.rest.common.BODY_LIMIT).
        body = load_json(
            raw or b"",
            what="request body",
            max_depth=MAX_JSON_DEPTH,
            parse_constant=_no_constants,
        )
    except UnsafeInput as exc:
        raise AlertRejected(str(exc)) from None
    except ValueError as exc:  # json.JSONDecodeError, UnicodeDecodeError
        raise AlertRejected(f"request body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise AlertRejected("request body must be a JSON object with a 'data' field")
    return body


def _no_constants(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def validate_alert(
    *,
    data: Any,
    alert_type: Any = None,
    runbook: Any = None,
    mcp: Any = None,
    slack_message_fingerprint: Any = None,
    fingerprint: Any = None,
    force_new: Any = None,
    budget: Any = None,
    unknown_fields: set[str] | frozenset[str] = frozenset(),
) -> ValidAlert:
    if unknown_fields:
        names = ", ".join(_shorten(name, 40) for name in sorted(unknown_fields)[:10])
        raise AlertRejected(f"unknown field(s): {names}; allowed: {', '.join(ALLOWED_FIELDS)}")
    if data is None:
        raise AlertRejected("'data' is required: the alert's text (JSON, YAML, plain text…)")
    if isinstance(data, dict | list):
        # Old TARSy clients send a JSON object: measured as sent (compact), stored readable.
        _check_size("data", json.dumps(data, ensure_ascii=False, separators=(",", ":")))
        data = json.dumps(data, indent=2, ensure_ascii=False)
    elif isinstance(data, str):
        _check_size("data", data)
    else:
        raise AlertRejected(f"'data' must be a string, got {type(data).__name__}")
    if not data.strip():
        raise AlertRejected("'data' is empty: send the alert's text")
    if runbook is not None and not isinstance(runbook, str):
        raise AlertRejected(f"'runbook' must be a string, got {type(runbook).__name__}")
    _check_size("runbook", runbook or "")
    config = get_config()
    runbook_url = _runbook_url(runbook or "", config.system.runbooks.allowed_domains)
    if alert_type in (None, ""):
        alert_type = config.defaults.alert_type
    if not isinstance(alert_type, str):
        raise AlertRejected(f"'alert_type' must be a string, got {type(alert_type).__name__}")
    _check_size("alert_type", alert_type)
    chain = config.chain_for_alert_type(alert_type)
    if chain is None:
        raise AlertRejected(
            f"unknown alert_type {_shorten(alert_type)}; "
            f"known alert types: {', '.join(config.alert_types)}",
            known_alert_types=config.alert_types,
        )
    rule = config.defaults.dedup.for_alert_type(alert_type)
    submitted = _client_fingerprint(fingerprint)
    if force_new is not None and not isinstance(force_new, bool):
        raise AlertRejected(f"'force_new' must be true or false, got {type(force_new).__name__}")
    # Hashed from the alert as sent (its values, not their masks); never stored as text.
    dedup_key = (
        alert_fingerprint(alert_type=alert_type, data=data, fields=rule.fields, submitted=submitted)
        if rule.enabled
        else ""
    )
    # Secrets pasted into an alert are masked before it is stored or shown to a model.
    return ValidAlert(
        alert_type=alert_type,
        chain_id=chain.id,
        data=mask_alert(data),
        runbook="" if runbook_url else mask_alert(runbook or ""),
        runbook_url=runbook_url,
        slack_message_fingerprint=_fingerprint(slack_message_fingerprint),
        mcp_selection=validate_mcp_selection(mcp),
        dedup_key=dedup_key,
        dedup_window=rule.window,
        force_new=bool(force_new),
        budget=alert_budget(budget, config.budget_for(chain, alert_type), alert_type),
    )


WHOLE_BUDGET_KINDS = ("tokens", "tool_calls", "llm_calls")
MAX_BUDGET_VALUE = 1e12


def alert_budget(asked: Any, configured: Budget, alert_type: str) -> dict[str, Any] | None:
    """The investigation's limits: the configured ones, lowered where the alert asks for
    less (``{"cost_usd": 0.1, …}``). Asking for more than is configured is refused."""
    limits: dict[str, Any] = dict(configured.limits())
    if asked is not None:
        if not isinstance(asked, dict):
            raise AlertRejected(
                f"'budget' must be an object of limits ({', '.join(BUDGET_KINDS)}), "
                f"got {type(asked).__name__}"
            )
        _only(asked, BUDGET_KINDS, "budget")
        for kind, value in asked.items():
            limits[kind] = _asked_limit(kind, value, limits.get(kind), alert_type)
    if not limits:
        return None
    return {**limits, "after_limit": configured.after_limit}


def _asked_limit(kind: str, value: Any, cap: float | None, alert_type: str) -> float:
    whole = kind in WHOLE_BUDGET_KINDS
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        # JSON reads 1e400 as infinity; the largest sensible limit is far below this.
        or not 0 < value <= MAX_BUDGET_VALUE
        or (whole and value != int(value))
    ):
        expected = "a whole number of at least 1" if whole else "a number more than 0"
        unit = " (seconds)" if kind == "wall_time" else ""
        raise AlertRejected(
            f"'budget.{kind}' must be {expected}{unit}, at most {MAX_BUDGET_VALUE:g}, "
            f"got {_brief(value)}"
        )
    if cap is not None and value > cap:
        raise AlertRejected(
            f"'budget.{kind}' asks for {value:g}, more than the {cap:g} configured for alert "
            f"type {alert_type!r}: an alert may ask for less, never more"
        )
    return int(value) if whole else float(value)


def _client_fingerprint(value: Any) -> str:
    """The client's own fingerprint of the alert (the cooldown's, not Slack's)."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise AlertRejected(f"'fingerprint' must be a string, got {type(value).__name__}")
    if len(value.strip()) > CLIENT_FINGERPRINT_LIMIT:
        raise AlertRejected(
            f"'fingerprint' is {len(value.strip())} characters; the limit is "
            f"{CLIENT_FINGERPRINT_LIMIT}"
        )
    return value.strip()


def _runbook_url(runbook: str, allowed_domains: tuple[str, ...]) -> str:
    """The runbook's URL, checked against the allowlist; "" for a runbook given as text."""
    if not runbooks.looks_like_url(runbook):
        return ""
    url = runbook.strip()
    if len(url) > RUNBOOK_URL_LIMIT:
        raise AlertRejected(
            f"invalid runbook URL: it is {len(url)} characters; the limit is {RUNBOOK_URL_LIMIT}"
        )
    try:
        runbooks.check_url(url, allowed_domains)
    except runbooks.RunbookError as exc:
        raise AlertRejected(f"invalid runbook URL: {exc}") from None
    if mask_alert(url) != url:
        # Stored and shown as it is, so it must not carry a credential.
        raise AlertRejected(
            "invalid runbook URL: it contains what looks like a secret; give private "
            "repositories' token to TARSy with system.github.token_env instead"
        )
    return url


def _fingerprint(value: Any) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise AlertRejected(
            f"'slack_message_fingerprint' must be a string, got {type(value).__name__}"
        )
    if len(value.strip()) > FINGERPRINT_LIMIT:
        raise AlertRejected(
            f"'slack_message_fingerprint' is {len(value.strip())} characters; the limit is "
            f"{FINGERPRINT_LIMIT}"
        )
    # Some text of the Slack message, so maybe a secret pasted in it; the thread look-up
    # masks the channel's messages the same way before comparing (worker/slack.py). A
    # marker longer than the secret it replaces may push it over the column's length: a
    # shorter fingerprint still finds the message.
    return mask_alert(value.strip())[:FINGERPRINT_LIMIT]


def validate_mcp_selection(value: Any) -> dict[str, Any] | None:
    """``{"servers": [{"name", "tools"?}], "native_tools"?: {name: bool}}``, checked against
    tarsy.yaml and, for tools, the servers' last listing (``MCPServerHealth``). A server
    that has never been listed accepts any tool name; the agent then reports unknown ones."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise AlertRejected(f"'mcp' must be an object, got {type(value).__name__}")
    _only(value, MCP_KEYS, "mcp")
    servers = value.get("servers")
    if not isinstance(servers, list):
        raise AlertRejected(
            '\'mcp.servers\' must be a list of {"name": server, "tools"?: [tool, …]}'
        )
    if not servers:
        raise AlertRejected(
            "'mcp.servers' is empty: name at least one MCP server, or leave 'mcp' out to use "
            "the chain's own servers"
        )
    configured = get_config().mcp_servers
    listings = _last_listings()
    selection: list[dict[str, Any]] = []
    for index, entry in enumerate(servers):
        where = f"mcp.servers[{index}]"
        if not isinstance(entry, dict):
            raise AlertRejected(f"'{where}' must be an object with a 'name'")
        _only(entry, MCP_SERVER_KEYS, where)
        name = entry.get("name")
        if not isinstance(name, str) or not name:
            raise AlertRejected(f"'{where}.name' must be the name of an MCP server")
        if name not in configured:
            raise AlertRejected(
                f"MCP server {_shorten(name)} not found in configuration; "
                f"configured: {', '.join(sorted(configured)) or 'none'}"
            )
        if any(chosen["name"] == name for chosen in selection):
            raise AlertRejected(f"MCP server {name!r} is named twice in 'mcp.servers'")
        chosen: dict[str, Any] = {"name": name}
        tools = entry.get("tools")
        if tools is not None:
            if not isinstance(tools, list) or not all(isinstance(t, str) for t in tools):
                raise AlertRejected(f"'{where}.tools' must be a list of tool names")
            if not tools:
                raise AlertRejected(
                    f"'{where}.tools' is empty: name at least one tool, or leave 'tools' out "
                    f"for all of {name!r}'s tools"
                )
            known = listings.get(name)
            for tool in tools:
                if known is not None and tool not in known:
                    raise AlertRejected(
                        f"tool {_shorten(tool)} not found on MCP server {name!r}; "
                        f"its tools: {', '.join(sorted(known)) or 'none'}"
                    )
            # A server never listed takes any name, and the session shows and stores it.
            chosen["tools"] = list(dict.fromkeys(mask_alert(tool) for tool in tools))
        selection.append(chosen)
    result: dict[str, Any] = {"servers": selection}
    native = value.get("native_tools")
    if native is not None:
        if not isinstance(native, dict):
            raise AlertRejected("'mcp.native_tools' must be an object of booleans")
        _only(native, NATIVE_TOOLS, "mcp.native_tools")
        for name, enabled in native.items():
            if not isinstance(enabled, bool):
                raise AlertRejected(f"'mcp.native_tools.{name}' must be true or false")
        result["native_tools"] = dict(native)
    return result


def _only(value: dict[str, Any], allowed: tuple[str, ...], where: str) -> None:
    unknown = [key for key in value if key not in allowed]
    if unknown:
        names = ", ".join(_shorten(str(key), 40) for key in sorted(unknown)[:10])
        raise AlertRejected(
            f"unknown field(s) in '{where}': {names}; allowed: {', '.join(allowed)}"
        )


def _last_listings() -> dict[str, set[str]]:
    """Each server's tools as last listed by a worker (or the qcluster at start-up)."""
    from sessions.models import MCPServerHealth

    return {
        health.server_id: {tool["name"] for tool in health.tools}
        for health in MCPServerHealth.objects.all()  # checked_at is never null
        if health.tools or health.healthy
    }


def _check_size(field: str, text: str) -> None:
    try:
        size = len(text.encode())
    except UnicodeEncodeError as exc:
        # JSON allows "\ud800"; UTF-8 (the database, the LLM APIs) does not.
        raise AlertRejected(
            f"'{field}' contains a lone surrogate ({text[exc.start]!a}) at character "
            f"{exc.start}: send valid Unicode text"
        ) from None
    limit = settings.TARSY_MAX_ALERT_BYTES
    if size > limit:
        raise AlertRejected(
            f"'{field}' is {size} bytes; the limit is {limit} bytes (1 MiB)",
            status=413,
            max_bytes=limit,
        )


def _brief(value: Any, limit: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text)} characters)"


def _shorten(value: str, limit: int = 60) -> str:
    if len(value) <= limit:
        return repr(value)
    return f"{value[:limit]!r}… ({len(value)} characters)"
