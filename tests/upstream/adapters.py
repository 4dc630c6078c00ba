"""Plumbing for the port of OpenSquilla 0.3.0's own tests (see tests/upstream/README.md).

Each name here stands in for the upstream name the ported tests import, and forwards to
exactly one product function, so the unchanged assertions exercise the real code:
- the provider message types (``Message``, ``ContentBlockText``): upstream's pydantic
  models, redeclared with the same fields because this product has no provider package;
- ``CheckpointEvent`` and the checkpoint functions: the product builds plain dicts, these
  wrap them in attribute access;
- ``SessionStorage``: the ledger (reused from the seed port);
- ``run_memory_repair_once`` / ``MemoryRepairService``: the repair worker, with the memory
  roots and the flush service given explicitly as upstream does (the product reads both
  from settings); upstream's ``config.privacy.disable_network_observability`` becomes the
  ``OPENSQUILLA_PRIVACY_DISABLE_NETWORK_OBSERVABILITY`` setting for each run.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Literal
from unittest import mock

from asgiref.sync import async_to_sync, sync_to_async
from django.test import override_settings
from pydantic import BaseModel

from opensquilla_site.timeutil import now_ms
from receipts_app import checkpoint, repair
from receipts_app.ledger import list_memory_repair_receipts
from receipts_app.statuses import REPAIR_QUEUE_STATUSES
from sessions_app.keys import normalize_agent_id
from tests.seed.adapters import SessionStorage

__all__ = [
    "CheckpointEvent",
    "ContentBlockText",
    "MemoryRepairService",
    "Message",
    "SessionStorage",
    "append_checkpoint_events",
    "build_checkpoint_events",
    "checkpoint_relative_path",
    "list_repair_queue",
    "mark_repair_attempt_failed",
    "run_memory_repair_once",
]


# --- provider message types ---------------------------------------------------------------


class ContentBlockText(BaseModel):
    type: Literal["text"] = "text"
    text: str


class Message(BaseModel):
    role: Literal["user", "assistant"]
    content: str | list[ContentBlockText]
    reasoning_content: str | None = None


# --- checkpoint -----------------------------------------------------------------------------


class CheckpointEvent(SimpleNamespace):
    """Upstream's event dataclass; the product's events are the same fields as a dict."""

    def to_json_dict(self) -> dict[str, Any]:
        return dict(vars(self))


def build_checkpoint_events(**kwargs: Any) -> list[CheckpointEvent]:
    return [CheckpointEvent(**event) for event in checkpoint.build_checkpoint_events(**kwargs)]


def append_checkpoint_events(workspace: Path, events: list[Any]) -> SimpleNamespace:
    dicts = [e.to_json_dict() if hasattr(e, "to_json_dict") else dict(e) for e in events]
    return SimpleNamespace(**checkpoint.append_checkpoint_events(workspace, dicts))


def checkpoint_relative_path(*, session_key: str, turn_id: str) -> Path:
    return Path(checkpoint.checkpoint_relative_path(session_key, turn_id))


# --- repair ---------------------------------------------------------------------------------


async def list_repair_queue(_storage: Any, *, limit: int) -> list[Any]:
    return await sync_to_async(list_memory_repair_receipts)(
        statuses=REPAIR_QUEUE_STATUSES, limit=limit, due_before_ms=now_ms()
    )


async def mark_repair_attempt_failed(
    _storage: Any, receipt: Any, *, reason: str, now_ms: int
) -> Any:
    return await sync_to_async(repair.mark_repair_attempt_failed)(receipt, reason, now_ms)


@contextlib.contextmanager
def _explicit_wiring(
    memory_roots: Mapping[str, Path], session_manager: Any, flush_service: Any
) -> Iterator[None]:
    """Upstream passes roots, summaries and the flush service in; the product looks them up."""
    summaries = getattr(session_manager, "list_degraded_compactions", None)
    # The product finds an agent's root by its normalised id ({agent} in the workspace
    # setting), as upstream's service normalises the keys of the roots it is given.
    roots = {normalize_agent_id(agent): root for agent, root in memory_roots.items()}
    with contextlib.ExitStack() as stack:
        stack.enter_context(
            mock.patch.object(repair, "memory_workspace_for_agent", lambda agent: roots.get(agent))
        )
        stack.enter_context(
            mock.patch.object(repair, "build_repair_flush_service", lambda: flush_service)
        )
        if callable(summaries):
            # create=True: the port also runs against code without the summary branch.
            stack.enter_context(
                mock.patch.object(
                    repair,
                    "compaction_source",
                    lambda: _SyncCompactionSource(session_manager),
                    create=True,
                )
            )
        yield


class _SyncCompactionSource:
    """Upstream's session manager is async; the product's compaction source is sync."""

    def __init__(self, manager: Any) -> None:
        self._manager = manager

    def list_degraded_compactions(self, *, agent_id: str | None, limit: int) -> list[Any]:
        return async_to_sync(self._manager.list_degraded_compactions)(
            agent_id=agent_id, limit=limit
        )

    def get_compaction_preimage(self, summary: Any) -> list[Any]:
        return async_to_sync(self._manager.get_compaction_preimage)(summary)

    def mark_compaction_repair_status(self, summary: Any, status: str) -> None:
        async_to_sync(self._manager.mark_compaction_repair_status)(summary, status)


async def run_memory_repair_once(
    *,
    session_manager: Any,
    flush_service: Any,
    memory_roots: Mapping[str, Path],
    agent_id: str,
    limit: int,
    params: Mapping[str, Any] | None = None,
) -> list[dict[str, Any]]:
    def run() -> list[dict[str, Any]]:
        with _explicit_wiring(memory_roots, session_manager, flush_service):
            extra = {"params": params} if params is not None else {}
            return repair.run_memory_repair_once(
                agent_id, limit=limit, flush_service=flush_service, **extra
            )

    return await sync_to_async(run)()


class MemoryRepairService:
    """Upstream's in-gateway service; here one ``run_repair_tick`` over the given agents."""

    def __init__(
        self,
        *,
        session_manager: Any,
        flush_service: Any,
        memory_roots: Mapping[str, Path],
        agent_ids: tuple[str, ...],
        interval_seconds: float = 60.0,
        max_items_per_tick: int = 5,
        config: Any | None = None,
    ) -> None:
        self._session_manager = session_manager
        self._flush_service = flush_service
        self._memory_roots = memory_roots
        self._agent_ids = agent_ids
        self._limit = max_items_per_tick
        self._config = config

    def _privacy_disabled(self) -> bool:
        """Upstream's ``config.privacy.disable_network_observability``, read on every run."""
        privacy = getattr(self._config, "privacy", None)
        return bool(getattr(privacy, "disable_network_observability", False))

    async def run_once(self) -> list[dict[str, Any]]:
        def run() -> list[dict[str, Any]]:
            with (
                _explicit_wiring(self._memory_roots, self._session_manager, self._flush_service),
                override_settings(
                    OPENSQUILLA_AGENTS=list(self._agent_ids),
                    OPENSQUILLA_REPAIR_MAX_ITEMS_PER_TICK=self._limit,
                    OPENSQUILLA_PRIVACY_DISABLE_NETWORK_OBSERVABILITY=self._privacy_disabled(),
                ),
            ):
                return repair.run_repair_tick()["processed"]

        return await sync_to_async(run)()
