"""Test data builders shared by every test package (plain functions over the real services)."""

from __future__ import annotations

import itertools
from typing import Any

from django.contrib.auth.models import Group, User

from opensquilla_site.roles import ensure_roles
from receipts_app import ledger
from receipts_app.models import MemoryDurableReceipt
from sessions_app import services as session_services
from sessions_app.models import Session

_counter = itertools.count(1)


def make_session(key: str | None = None, *, messages: int = 0) -> Session:
    session = session_services.create_session(key or f"agent:main:webchat:s{next(_counter)}")
    for index in range(messages):
        session_services.append_message(
            session.session_key,
            role="user" if index % 2 == 0 else "assistant",
            content=f"message {index}",
        )
    return session


def make_receipt(**fields: Any) -> MemoryDurableReceipt:
    """Upsert a receipt through the ledger; every column can be overridden."""
    n = next(_counter)
    values: dict[str, Any] = {
        "session_key": "agent:main:webchat:abc",
        "session_id": "session-1",
        "turn_id": f"turn-{n}",
        "scope": "checkpoint",
        "idempotency_key": f"test:{n}",
        "status": "checkpoint_saved",
    }
    values.update(fields)
    return ledger.upsert_memory_durable_receipt(MemoryDurableReceipt(**values))


def make_user(username: str, role: str | None = None, *, password: str = "pw-Secret-123") -> User:
    """A user in the ``viewer``, ``operator`` or ``admin`` group (None: no role)."""
    user = User.objects.create_user(username=username, password=password)
    if role:
        # Transactional tests flush the tables, including the groups the migration made.
        ensure_roles()
        user.groups.add(Group.objects.get(name=role))
    if role == "admin":
        user.is_staff = True
        user.save(update_fields=["is_staff"])
    return user
