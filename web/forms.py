from __future__ import annotations

import uuid

from django import forms

from config.loader import get_config
from llm.tool_names import tool_parts
from sessions import runbooks
from sessions.intake import AlertRejected, ValidAlert, validate_alert

# Pre-filled so a first-time user can submit at once; it matches the bundled demo cluster.
EXAMPLE_ALERT = """alert: PodCrashLooping
severity: critical
cluster: prod-eu-west-1
namespace: payments
deployment: payments-api
summary: payments-api pods are restarting repeatedly (CrashLoopBackOff)"""


class AlertForm(forms.Form):
    alert_type = forms.ChoiceField()
    # A field, moved into base_fields by the form's metaclass: Form.data stays the input.
    data = forms.CharField(  # type: ignore[assignment]
        label="Alert data",
        widget=forms.Textarea(attrs={"rows": 14, "spellcheck": "false"}),
        strip=False,
        help_text="Any text: JSON, YAML, a log excerpt… up to 1 MiB.",
    )
    runbook = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 3}))
    # Offered when system.runbooks.repo_url is set; intake checks the URL like a typed one.
    runbook_choice = forms.CharField(
        label="Runbook from the repository",
        required=False,
        widget=forms.Select,
        help_text="Or pick one of the runbooks in the repository (instead of the field above).",
    )
    slack_message_fingerprint = forms.CharField(
        label="Slack message fingerprint",
        required=False,
        max_length=500,
        help_text="Optional: text of the Slack message this alert came from; TARSy replies in "
        "its thread (messages of the last 24 hours).",
    )
    # The REST API's ``mcp`` override. Nothing ticked: the chain's own servers.
    mcp_servers = forms.MultipleChoiceField(
        label="MCP servers",
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text="Only these servers' tools, for every investigating agent. None ticked: "
        "each agent's own servers.",
    )
    mcp_tools = forms.MultipleChoiceField(
        label="Tools",
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text="Only these tools of their servers (as last listed by a worker). None "
        "ticked for a server: all its tools.",
    )
    # The duplicate-alert cooldown (defaults.dedup); shown only where it is on.
    fingerprint = forms.CharField(
        label="Fingerprint",
        required=False,
        max_length=500,
        help_text="Optional: what makes this alert the same as others; empty: the "
        "configured fields of the alert.",
    )
    force_new = forms.BooleanField(
        label="Start a new investigation even if this alert repeats a recent one",
        required=False,
    )
    # Lower limits for this investigation than the configured budget (defaults.budget).
    budget_tokens = forms.IntegerField(label="Tokens", required=False, min_value=1)
    budget_cost_usd = forms.FloatField(label="Cost (USD)", required=False, min_value=0.0001)
    budget_wall_time = forms.FloatField(label="Wall time (seconds)", required=False, min_value=1)
    budget_tool_calls = forms.IntegerField(label="Tool calls", required=False, min_value=1)
    budget_llm_calls = forms.IntegerField(label="LLM calls", required=False, min_value=1)
    OVERRIDE_FIELDS = ("mcp_servers", "mcp_tools")
    BUDGET_FIELDS = (
        "budget_tokens",
        "budget_cost_usd",
        "budget_wall_time",
        "budget_tool_calls",
        "budget_llm_calls",
    )

    def __init__(self, *args, **kwargs) -> None:
        from sessions.models import MCPServerHealth

        super().__init__(*args, **kwargs)
        config = get_config()
        # self.fields holds Fields to the stubs; these three are ChoiceFields.
        self.fields["alert_type"].choices = [(t, t) for t in config.alert_types]  # type: ignore[attr-defined]
        self.fields["alert_type"].initial = config.defaults.alert_type
        self.fields["data"].initial = EXAMPLE_ALERT
        self._runbook_fields(config)
        self.fields["mcp_servers"].choices = [(s, s) for s in sorted(config.mcp_servers)]  # type: ignore[attr-defined]
        listed = MCPServerHealth.objects.filter(server_id__in=config.mcp_servers)
        self.fields["mcp_tools"].choices = [  # type: ignore[attr-defined]
            (f"{health.server_id}.{tool['name']}", f"{health.server_id}.{tool['name']}")
            for health in listed
            for tool in sorted(health.tools, key=lambda t: t["name"])
        ]

    def _runbook_fields(self, config) -> None:
        allowed = ", ".join(config.system.runbooks.allowed_domains) or "none"
        help_text = f"Optional: the runbook's text, or its URL (allowed domains: {allowed})."
        self.fields["runbook"].help_text = help_text
        listed = runbooks.list_runbooks(config)
        if listed:
            self.fields["runbook_choice"].widget.choices = [("", "—")] + [
                (url, url.rsplit("/", 1)[-1]) for url in listed
            ]
        else:
            del self.fields["runbook_choice"]
        if not config.system.slack.enabled:
            del self.fields["slack_message_fingerprint"]
        dedup = config.defaults.dedup
        if not dedup.enabled and not any(rule.enabled for rule in dedup.alert_types.values()):
            del self.fields["fingerprint"]
            del self.fields["force_new"]

    def selection(self) -> dict | None:
        """The ticked servers and tools as the API's ``mcp`` object (None: nothing ticked)."""
        servers = list(self.cleaned_data.get("mcp_servers") or ())
        tools: dict[str, list[str]] = {}
        for name in self.cleaned_data.get("mcp_tools") or ():
            server, tool = tool_parts(name)
            tools.setdefault(server, []).append(tool)
            if server not in servers:
                servers.append(server)  # ticking a tool picks its server
        if not servers:
            return None
        return {
            "servers": [
                {"name": server, **({"tools": tools[server]} if server in tools else {})}
                for server in servers
            ]
        }

    def clean_data(self) -> str:
        # Browsers submit textareas with CRLF line endings; the REST API keeps data as sent.
        return self.cleaned_data["data"].replace("\r\n", "\n")

    def clean(self) -> dict:
        cleaned = super().clean()
        assert cleaned is not None  # Form.clean returns cleaned_data
        if "data" in cleaned and "alert_type" in cleaned:
            try:
                self.alert: ValidAlert = validate_alert(
                    data=cleaned["data"],
                    alert_type=cleaned["alert_type"],
                    runbook=self._runbook(cleaned),
                    mcp=self.selection(),
                    slack_message_fingerprint=cleaned.get("slack_message_fingerprint", ""),
                    fingerprint=cleaned.get("fingerprint") or None,
                    force_new=bool(cleaned.get("force_new")),
                    budget=self.budget(cleaned),
                )
            except AlertRejected as rejected:
                raise forms.ValidationError(str(rejected)) from None
        return cleaned

    def budget(self, cleaned: dict) -> dict | None:
        """The limits filled in, as the API's ``budget`` (None: none filled in)."""
        asked = {
            name.removeprefix("budget_"): cleaned[name]
            for name in self.BUDGET_FIELDS
            if cleaned.get(name) is not None
        }
        return asked or None

    def _runbook(self, cleaned: dict) -> str:
        written, chosen = cleaned.get("runbook", ""), cleaned.get("runbook_choice", "")
        if written.strip() and chosen:
            raise forms.ValidationError(
                "Give one runbook: either write one (text or URL) or pick one from the "
                "repository, not both."
            )
        return chosen or written


def resubmitted_alert(session_id: str) -> tuple[dict, str]:
    """The form's initial values for re-submitting a session's alert (its type, data,
    runbook and MCP choice), or a problem to show when there is no such session."""
    from sessions.models import AlertSession

    if not session_id:
        return {}, ""
    try:
        session = AlertSession.objects.filter(id=uuid.UUID(session_id[:40])).first()
    except ValueError:
        session = None
    if session is None:
        return {}, "The session to re-submit was not found; the form has the example alert."
    servers = (session.mcp_selection or {}).get("servers", [])
    return {
        "alert_type": session.alert_type,
        "data": session.alert_data,
        "runbook": session.runbook_url or session.runbook,
        "slack_message_fingerprint": session.slack_message_fingerprint,
        "mcp_servers": [server["name"] for server in servers],
        "mcp_tools": [f"{s['name']}.{tool}" for s in servers for tool in s.get("tools", [])],
    }, ""
