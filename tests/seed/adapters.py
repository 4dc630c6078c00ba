"""Plumbing for the seed port: upstream's storage and manager shapes over our services.

Each method forwards to exactly one product function, so the seed's assertions exercise
the real ledger, session services and checkpoint code.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from receipts_app import checkpoint, ledger
from sessions_app import services


class SessionStorage:
    @classmethod
    async def open(cls, _path: Path) -> SessionStorage:
        # The database is pytest-django's test database; the path is not needed.
        return cls()

    async def close(self) -> None:
        return None

    upsert_memory_durable_receipt = staticmethod(ledger.aupsert_memory_durable_receipt)
    update_memory_durable_receipt = staticmethod(ledger.aupdate_memory_durable_receipt)
    list_memory_durable_receipts = staticmethod(ledger.alist_memory_durable_receipts)
    get_transcript = staticmethod(services.aget_transcript)


class SessionManager:
    def __init__(self, storage: SessionStorage, checkpoint_workspace_dir: Path | None = None):
        self.storage = storage
        self._checkpoint_workspace_dir = checkpoint_workspace_dir

    async def create(self, key: str) -> Any:
        return await services.acreate_session(key)

    async def append_message(self, key: str, **fields: Any) -> Any:
        return await services.aappend_message(key, **fields)

    async def record_memory_checkpoint(self, key: str, **kwargs: Any) -> Any:
        return await checkpoint.arecord_memory_checkpoint(
            key, workspace_dir=self._checkpoint_workspace_dir, **kwargs
        )
