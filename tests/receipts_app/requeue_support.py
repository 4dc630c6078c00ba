"""Helpers shared by the requeue, plan, health and task tests."""

from __future__ import annotations

from typing import Any

import pytest

from receipts_app import enqueue
from tests.factories import make_receipt

OPERATOR = "alice"


class SentMessages(list[tuple[str, tuple[Any, ...], dict[str, Any], str]]):
    """The messages, in order; ``queues[i]`` is the queue message ``i`` went to ("": the
    default queue)."""

    def __init__(self) -> None:
        super().__init__()
        self.queues: list[str] = []


@pytest.fixture(name="sent")
def sent_fixture(monkeypatch) -> SentMessages:
    """Messages handed to the broker (after commit): (task name, args, kwargs, task id)."""
    messages = SentMessages()

    def record(task_name, task_id, args, kwargs, *, queue=""):
        messages.append((task_name, tuple(args), dict(kwargs), task_id))
        messages.queues.append(queue)

    monkeypatch.setattr(enqueue, "_send", record)
    return messages


def failed_checkpoint(session, **fields: Any):
    values: dict[str, Any] = {
        "session_key": session.session_key,
        "session_id": session.session_id,
        "scope": "checkpoint",
        "status": "checkpoint_failed",
        "reason": "disk full",
        "coverage_entry_count": 2,
        "attempt_count": 1,
    }
    values.update(fields)
    return make_receipt(**values)


def repair_row(status: str = "repair_failed", **fields: Any):
    values: dict[str, Any] = {
        "scope": "repair",
        "status": status,
        "reason": "provider_failed_archived",
        "attempt_count": 3,
        "target_path": "memory/.raw_fallbacks/x.md",
    }
    values.update(fields)
    return make_receipt(**values)
