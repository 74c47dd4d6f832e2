from __future__ import annotations

from django import forms

from agents.config import get_config
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
    data = forms.CharField(
        label="Alert data",
        widget=forms.Textarea(attrs={"rows": 14, "spellcheck": "false"}),
        strip=False,
        help_text="Any text: JSON, YAML, a log excerpt… up to 1 MiB.",
    )
    runbook = forms.CharField(
        required=False, widget=forms.Textarea(attrs={"rows": 3}), help_text="Optional."
    )

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        config = get_config()
        self.fields["alert_type"].choices = [(t, t) for t in config.alert_types]
        self.fields["alert_type"].initial = config.defaults.alert_type
        self.fields["data"].initial = EXAMPLE_ALERT

    def clean_data(self) -> str:
        # Browsers submit textareas with CRLF line endings; the REST API keeps data as sent.
        return self.cleaned_data["data"].replace("\r\n", "\n")

    def clean(self) -> dict:
        cleaned = super().clean()
        if "data" in cleaned and "alert_type" in cleaned:
            try:
                self.alert: ValidAlert = validate_alert(
                    data=cleaned["data"],
                    alert_type=cleaned["alert_type"],
                    runbook=cleaned.get("runbook", ""),
                )
            except AlertRejected as rejected:
                raise forms.ValidationError(str(rejected)) from None
        return cleaned
