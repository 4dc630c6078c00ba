"""Leaves a failing checkpoint and a due repair in a live 0.3.0 gateway's ledger.

Run by the reference venv's Python 3.12 (``var/bench/ref-venv``), never imported by the suite:

    ref-venv/bin/python reference_gateway_writer.py SESSIONS_DB WORKSPACE

Writes through the real ``SessionStorage`` (as the gateway's own session manager would) and
puts the repair's raw-fallback archive in the agent workspace. Prints the receipt ids as JSON.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
import uuid
from pathlib import Path

from opensquilla.session.models import MemoryDurableReceipt, SessionNode, TranscriptEntry
from opensquilla.session.storage import SessionStorage

KEY = "agent:main:webchat:gateway-link"
ARCHIVE = "memory/.raw_fallbacks/gateway-link.md"


async def main(db: Path, workspace: Path) -> dict[str, str]:
    archive = workspace / ARCHIVE
    archive.parent.mkdir(parents=True, exist_ok=True)
    archive.write_text(
        "# Raw flush (timeout)\n\nuser: remember the deploy window\n", encoding="utf-8"
    )
    storage = await SessionStorage.open(str(db))
    try:
        now = int(time.time() * 1000)
        session_id = str(uuid.uuid4())
        await storage.upsert_session(
            SessionNode(session_key=KEY, session_id=session_id, created_at=now, updated_at=now)
        )
        await storage.append_transcript_entry(
            TranscriptEntry(session_id=session_id, session_key=KEY, role="user", content="hi")
        )
        failed = await storage.upsert_memory_durable_receipt(
            MemoryDurableReceipt(
                session_key=KEY,
                session_id=session_id,
                turn_id="cmp_link",
                scope="checkpoint",
                idempotency_key=f"checkpoint:{KEY}:cmp_link:failed",
                status="checkpoint_failed",
                reason="disk full",
                attempt_count=1,
            )
        )
        repair = await storage.upsert_memory_durable_receipt(
            MemoryDurableReceipt(
                session_key=KEY,
                session_id=session_id,
                turn_id="flush:1-1",
                scope="repair",
                source_path=f"session:{KEY}:flush:1-1",
                target_path=ARCHIVE,
                idempotency_key=f"repair:{KEY}:gateway-link",
                status="repair_pending",
                reason="provider_failed_archived",
                attempt_count=1,
            )
        )
    finally:
        await storage.close()
    return {"failed": failed.receipt_id, "repair": repair.receipt_id}


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(Path(sys.argv[1]), Path(sys.argv[2])))))
