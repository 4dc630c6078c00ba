"""What a receipts-list row shows, computed in Python once per row before the template runs.

The list renders 50 rows (up to 200); resolving three URLs, four date filters and two
truncations per row in the template was most of the page's time (bench/fleet_view.py prints
the split). Here each URL costs one ``reverse`` per page plus string formatting, and each
text is cut once. Each row reaches the template as a :class:`ReceiptRow`, a dict (the
template engine tries a key before an attribute, so a dict answers each ``row.x`` at its
first try) that falls back to the receipt's own fields and properties: the row partial
(templates/console/receipts.html ``receipt-row``) reads ``row.status`` as before.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any
from urllib.parse import quote

from django.urls import reverse

from opensquilla_site.timeutil import duration_text, ms_text, now_ms
from sessions_app.gateways import DEFAULT_GATEWAY, gateway_scope

from .keys import wrapped_key
from .middleware import console_gateways
from .templatetags import ms_iso

REASON_CHARS = 80
# The characters ``reverse`` leaves as they are in a path (django.urls.resolvers).
_PATH_SAFE = "!$&'()*+,;=" + "/~:@"
_MARK = "__row__"


class _UrlPattern:
    """``reverse(name, args=[value])`` for many values: reversed once with a marker, then
    each value quoted as ``reverse`` quotes it (the converters here pass values through)."""

    def __init__(self, name: str) -> None:
        self.head, self.tail = reverse(name, args=[_MARK]).split(_MARK)

    def __call__(self, value: str) -> str:
        return f"{self.head}{quote(value, safe=_PATH_SAFE)}{self.tail}"


class ReceiptRow(dict):
    """A receipt's display values, and its fields through :meth:`__missing__`."""

    def __init__(self, receipt: Any, **values: Any) -> None:
        super().__init__(values)
        self.receipt = receipt

    def __missing__(self, key: str) -> Any:
        try:
            value = getattr(self.receipt, key)
        except AttributeError:
            raise KeyError(key) from None
        self[key] = value
        return value

    def __getattr__(self, key: str) -> Any:  # row.receipt_id in Python reads like a receipt
        if key.startswith("__"):
            raise AttributeError(key)
        try:
            return self[key]
        except KeyError:
            raise AttributeError(key) from None


def _cut(text: str, limit: int) -> str:
    """``truncatechars``: the text, or its first ``limit - 1`` characters and an ellipsis."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def show_gateways(rows: Iterable[Any]) -> bool:
    """Every row names its gateway when the list spans more than one, or holds another
    gateway's rows than ``local`` (the rows would otherwise look alike)."""
    names = {getattr(r, "gateway_id", None) or DEFAULT_GATEWAY for r in rows}
    return len(names) > 1 or names not in (set(), {DEFAULT_GATEWAY})


def spans_gateways(request: Any, rows: list[Any]) -> bool:
    """Whether each row of a list names its gateway: when the list can hold more than one
    gateway's rows (no gateway chosen and several known; the names are read once per request,
    for the list's gateway select too) or this page holds another gateway's than ``local``."""
    if show_gateways(rows):
        return True
    return gateway_scope() is None and len(console_gateways(request)) > 1


def present_rows(rows: list[Any], *, show_gateway: bool | None = None) -> list[ReceiptRow]:
    """Each row with its display values (URLs, dates, cut texts, its gateway label)."""
    if show_gateway is None:
        show_gateway = show_gateways(rows)
    detail = _UrlPattern("receipts:detail")
    requeue = _UrlPattern("receipts:requeue")
    session = _UrlPattern("sessions:detail")
    now = now_ms()
    out = []
    for row in rows:
        gateway = row.gateway_id or DEFAULT_GATEWAY
        key = row.session_key
        reason = row.reason or ""
        try:
            ago = f"{duration_text(max(0, now - int(row.created_at)) / 1000)} ago"
        except (TypeError, ValueError):
            ago = ""
        out.append(
            ReceiptRow(
                row,
                receipt_id=row.receipt_id,
                status=row.status,
                detail_url=detail(row.receipt_id),
                requeue_url=requeue(row.receipt_id),
                session_key=key,
                session_url=(
                    session(key) + ("" if gateway == DEFAULT_GATEWAY else f"?gateway={gateway}")
                    if key
                    else ""
                ),
                session_key_html=wrapped_key(key),
                gateway_label=gateway if show_gateway else "",
                created_iso=ms_iso(row.created_at),
                created_text=ms_text(row.created_at),
                created_ago=ago,
                reason_text=reason,
                reason_short=_cut(reason, REASON_CHARS),
                next_retry_text=ms_text(row.next_retry_at_ms) if row.next_retry_at_ms else "",
            )
        )
    return out
