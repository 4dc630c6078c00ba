"""Template helpers for the console: epoch-ms dates, capped counts and filter-preserving URLs."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

from django import template
from django.http import QueryDict

from opensquilla_site.timeutil import duration_text, ms_text, now_ms
from receipts_app.health import Verdicts
from receipts_app.selectors import COUNT_CAP
from receipts_app.verdict import State, Verdict

from .helpers import console_role as _console_role
from .keys import wrapped_key
from .middleware import console_gateways

register = template.Library()


@register.simple_tag(takes_context=True)
def gateway_choices(context: template.Context) -> list[str]:
    """Every gateway's name for a list's gateway select (read once per request)."""
    return console_gateways(context.get("request"))


@register.filter
def gateway_qs(row: Any, sep: str = "?") -> str:
    """``?gateway=NAME`` for a row of another gateway than ``local`` (its pages need it to
    address the row's own session), else nothing: a single-gateway console's links read as
    before."""
    name = getattr(row, "gateway_id", None) or "local"
    return "" if name == "local" else f"{sep}gateway={name}"


@register.filter
def wrap_key(value: Any, limit: int | None = None) -> str:
    """A session or idempotency key that wraps only after its ``:`` separators (a ``<wbr>``
    after each), never mid-word; ``limit`` cuts a longer key at a ``:`` (receipt_rows)."""
    return wrapped_key(value, limit)


@register.filter
def ms_date(value: Any) -> str:
    """Epoch milliseconds as ``YYYY-MM-DD HH:MM:SS UTC``; "—" for None, raw for nonsense."""
    return ms_text(value)


@register.filter
def ms_ago(value: Any) -> str:
    """How long ago an epoch-ms time was, "12 min ago" (a card's age; its date is the title)."""
    try:
        elapsed = max(0, now_ms() - int(value)) / 1000
    except (TypeError, ValueError):
        return ""
    return f"{duration_text(elapsed)} ago"


@register.filter
def ms_iso(value: Any) -> str:
    """Epoch milliseconds as an ISO string for ``<time datetime=…>``."""
    try:
        return datetime.fromtimestamp(int(value) / 1000, tz=UTC).isoformat()
    except (TypeError, ValueError, OverflowError, OSError):
        return ""


@register.filter
def capped(value: Any, cap: int | None = None) -> str:
    """A count from ``capped_count``: anything past the cap reads "10,000+".

    ``cap`` 0 marks an exact count (from the counts table), shown in full; no cap (or an
    empty one from a missing context variable) means ``COUNT_CAP``.
    """
    cap = COUNT_CAP if cap in (None, "") else cap
    try:
        number = int(value)
    except (TypeError, ValueError):
        return str(value)
    if int(cap) and number > int(cap):
        return f"{int(cap):,}+"
    return f"{number:,}"


@register.filter
def console_role(user: Any) -> str:
    return _console_role(user)


@register.filter
def short_id(value: Any, length: int = 8) -> str:
    return str(value or "")[: int(length)]


@register.simple_tag(takes_context=True)
def query_with(context: template.Context, **changes: Any) -> str:
    """The current query string with ``changes`` applied (None or "" removes a key).

    Paging cursors are always dropped unless given, since a changed filter starts page one.
    """
    request = context.get("request")
    params = request.GET.copy() if request is not None else QueryDict(mutable=True)
    params.pop("cursor", None)
    for key, value in changes.items():
        params.pop(key, None)
        if value not in (None, ""):
            if isinstance(value, list | tuple):
                params.setlist(key, [str(v) for v in value])
            else:
                params[key] = str(value)
    encoded = params.urlencode()
    return f"?{encoded}" if encoded else "?"


@register.simple_tag
def querystring_from(params: dict[str, Any], **changes: Any) -> str:
    """A query string from a filter's ``to_params()`` plus ``changes``."""
    merged = {**params, **{k: v for k, v in changes.items() if v not in (None, "")}}
    return "?" + urlencode(merged, doseq=True)


@register.filter
def intcomma_safe(value: Any) -> str:
    try:
        return f"{int(value):,}"
    except (TypeError, ValueError):
        return str(value)


@register.filter
def get_item(mapping: Any, key: Any) -> Any:
    try:
        return mapping.get(key)
    except AttributeError:
        return None


@register.filter
def join_if_list(value: Any) -> str:
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value)
    return str(value)


@register.filter
def verdict(health: Any, verdicts: Verdicts) -> Verdict:
    """The one state of a health entry's (gateway, agent) (``h|verdict:verdicts``), as
    ``receipts_app.health.verdicts`` gave it for every surface: its words and badge."""
    return Verdict(verdicts.state(health.get("gateway"), health.get("agentId")))


@register.filter
def verdict_state(state: Any) -> Verdict:
    """A stored state (``"at_risk"``, ``"repairing"``, ``"ok"``) as its words and badge."""
    return Verdict(State(state))
