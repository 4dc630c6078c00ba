"""The alert rule form of the console and the admin. It only collects and cleans input: what
a rule may say is decided by ``service.check_rule`` (and ``validation``), called from both.

Secrets never go back to the browser: the secret field never renders its value, and on an
existing webhook rule the target URL (which often embeds a token) is blank with its masked
form as a hint; leaving either blank keeps what is stored.
"""

from __future__ import annotations

from typing import Any

from django import forms

from opensquilla_site.exceptions import ValidationFailed

from ..models import AlertRule
from . import service
from .validation import masked_target


class AlertRuleForm(forms.ModelForm):
    secret = forms.CharField(
        required=False,
        strip=False,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password"}),
        help_text="JSON webhook only: the HMAC-SHA256 key the receiver checks signatures with.",
    )
    target = forms.CharField(
        required=False,
        widget=forms.TextInput(attrs={"size": 60}),
        help_text="Webhook URL, or e-mail addresses separated by commas.",
    )

    class Meta:
        model = AlertRule
        fields = [
            "name",
            "condition",
            "gateway",
            "agent",
            "scope",
            "threshold",
            "channel",
            "target",
            "secret",
            "cooldown_seconds",
            "enabled",
        ]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["threshold"].widget.attrs.update({"step": "any"})
        gateway = self.fields["gateway"]
        gateway.empty_label = "Every gateway"  # type: ignore[attr-defined]
        gateway.help_text = (
            "Judge only this gateway's receipts and mirrors; every gateway when empty. "
            "Each notice names the gateway it is about."
        )
        rule = self.instance
        if rule.pk and rule.channel != AlertRule.EMAIL:
            self.initial["target"] = ""
            self.fields["target"].widget.attrs["placeholder"] = (
                f"{masked_target(rule)} (leave blank to keep)"
            )
        if rule.pk and rule.secret:
            self.fields["secret"].widget.attrs["placeholder"] = "•••••••• (leave blank to keep)"
        self._stored_target = rule.target if rule.pk else ""
        self._stored_secret = rule.secret if rule.pk else ""

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if self.errors:
            return data
        candidate = AlertRule(
            name=data.get("name", ""),
            condition=data.get("condition", ""),
            gateway=data.get("gateway"),
            agent=data.get("agent", ""),
            scope=data.get("scope", ""),
            threshold=data.get("threshold") or 0.0,
            channel=data.get("channel", ""),
            target=(data.get("target") or "").strip() or self._stored_target,
            secret=data.get("secret") or self._stored_secret,
        )
        try:
            service.check_rule(candidate, secret_given=bool(data.get("secret")))
        except ValidationFailed as exc:
            for field, message in exc.extra["fields"].items():
                self.add_error(field if field in self.fields else None, message)
        data["target"] = candidate.target
        data["secret"] = candidate.secret
        return data

    def save(self, commit: bool = True) -> AlertRule:
        rule = super().save(commit=False)
        rule.target = self.cleaned_data["target"]
        rule.secret = self.cleaned_data["secret"]
        if commit:
            rule.save()
        return rule
