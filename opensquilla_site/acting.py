"""Who is acting: the name and surface every audited write records.

It lives at the bottom so that every app's surfaces can say who acts, including the session
admin and API, which may not import ``receipts_app``: a session delete they run inside
``acting_as`` reaches the ledger's purge (registered by ``receipts_app``) with that actor.
``receipts_app.audit`` re-exports these names; the ledger records events with the actor of the
current ``acting_as`` block, "system" when there is none.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

SURFACES = ("console", "admin", "api", "cli", "worker", "system")


@dataclass(frozen=True)
class Actor:
    name: str = "system"
    surface: str = "system"

    def __post_init__(self) -> None:
        if self.surface not in SURFACES:
            raise ValueError(f"surface must be one of {', '.join(SURFACES)}; got {self.surface!r}")


SYSTEM = Actor()
WORKER = Actor("worker", "worker")
_current_actor: contextvars.ContextVar[Actor] = contextvars.ContextVar(
    "audit_actor", default=SYSTEM
)


@contextmanager
def acting_as(actor: Actor) -> Iterator[Actor]:
    token = _current_actor.set(actor)
    try:
        yield actor
    finally:
        _current_actor.reset(token)


def current_actor() -> Actor:
    return _current_actor.get()
