"""Provider request correlation: which session, turn and execution a provider call is for.

Upstream (0.5.1, #786) hands every flush an identity of the work that caused it, so an
operator can match a provider's bill to the flush or repair behind it. ``execute`` binds the
identity for the duration of one flush; the provider reads it with
:func:`current_provider_request_correlation` when it builds its request, so no provider
signature changes and the segments a flush extracts in parallel all inherit it (asyncio
tasks copy the context).
"""

from __future__ import annotations

import contextvars
import re
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

SESSION_FLUSH_CALL_KIND = "auxiliary.session_flush"

# The HTTP headers the OpenAI-compatible provider sends (upstream's names, see docs/WORKERS.md).
CORRELATION_HEADERS = {
    "session_id": "X-OpenSquilla-Session-Id",
    "turn_id": "X-OpenSquilla-Turn-Id",
    "execution_id": "X-OpenSquilla-Execution-Id",
    "call_kind": "X-OpenSquilla-Call-Kind",
}
# Header-safe ids: no spaces, no control characters, bounded, as upstream checks them.
_SAFE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")


@dataclass(frozen=True)
class ProviderRequestCorrelation:
    """Opaque identities of one provider-bound unit of work (upstream's field names)."""

    session_id: str
    turn_id: str
    execution_id: str
    call_kind: str = SESSION_FLUSH_CALL_KIND

    def to_dict(self) -> dict[str, str]:
        return {
            "session_id": self.session_id,
            "turn_id": self.turn_id,
            "execution_id": self.execution_id,
            "call_kind": self.call_kind,
        }

    def headers(self) -> dict[str, str]:
        """The request headers, or none at all when any id is unsafe to send.

        All or nothing: a partial identity would be matched to the wrong work.
        """
        values = self.to_dict()
        if not all(_SAFE_ID.fullmatch(value or "") for value in values.values()):
            return {}
        return {CORRELATION_HEADERS[name]: value for name, value in values.items()}


def session_flush_correlation(
    session_id: str | None, turn_id: str
) -> ProviderRequestCorrelation | None:
    """A fresh execution of a session flush for ``turn_id``; None without a session id."""
    if not isinstance(session_id, str) or not session_id:
        return None
    return ProviderRequestCorrelation(
        session_id=session_id,
        turn_id=turn_id,
        execution_id=uuid.uuid4().hex,
        call_kind=SESSION_FLUSH_CALL_KIND,
    )


def coerce_correlation(
    value: ProviderRequestCorrelation | Mapping[str, Any] | None, *, turn_id: str
) -> ProviderRequestCorrelation | None:
    """The correlation ``execute`` binds; a mapping (the older form) is read by field name.

    An empty ``turn_id`` takes the flush's own turn id, which is only known once the
    transcript is normalised (``flush:<first>-<last>``).
    """
    if value is None:
        return None
    if isinstance(value, Mapping):
        session_id = str(value.get("session_id") or "")
        if not session_id:
            return None
        value = ProviderRequestCorrelation(
            session_id=session_id,
            turn_id=str(value.get("turn_id") or ""),
            execution_id=str(value.get("execution_id") or uuid.uuid4().hex),
            call_kind=str(value.get("call_kind") or SESSION_FLUSH_CALL_KIND),
        )
    if not value.turn_id:
        value = replace(value, turn_id=turn_id)
    return value


_ACTIVE: contextvars.ContextVar[ProviderRequestCorrelation | None] = contextvars.ContextVar(
    "opensquilla_provider_request_correlation", default=None
)


def current_provider_request_correlation() -> ProviderRequestCorrelation | None:
    """The correlation bound to the running flush, if any."""
    return _ACTIVE.get()


@contextmanager
def bind_provider_request_correlation(
    correlation: ProviderRequestCorrelation | None,
) -> Iterator[None]:
    """Bind ``correlation`` for one flush; None is bound too, so an outer one never leaks in."""
    token = _ACTIVE.set(correlation)
    try:
        yield
    finally:
        _ACTIVE.reset(token)
