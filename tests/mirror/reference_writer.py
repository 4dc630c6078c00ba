"""Writes to a sessions.db through the real OpenSquilla 0.3.0 ``SessionStorage``.

Run by the reference venv's Python 3.12 (``var/bench/ref-venv``), never imported by the suite:

    ref-venv/bin/python tests/mirror/reference_writer.py DB PLAN [--rate N] [--count N]

Plans: ``churn`` (new sessions and messages, new receipts, status updates, one deleted
session) and ``load`` (``--count`` receipts plus two messages each, as fast as it can or at
``--rate`` writes per second; ``--status`` is every receipt's status, ``checkpoint_saved`` by
default). Prints one JSON line per committed write when ``--trace`` is
given (the benchmark's lag probe), and a JSON summary at the end. ``receipts`` writes one
session (``--key``) with ``--messages`` messages starting with ``--text``, then one receipt per
``--statuses`` entry (comma-separated; ``repair_*`` ones in scope ``repair``), each failure with
the reason ``--reason`` and its number (a gateway's own content and failures).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
import uuid
from pathlib import Path

from opensquilla.session.models import MemoryDurableReceipt, SessionNode, TranscriptEntry
from opensquilla.session.storage import SessionStorage


def now_ms() -> int:
    return int(time.time() * 1000)


async def new_session(storage: SessionStorage, key: str) -> str:
    session_id = str(uuid.uuid4())
    now = now_ms()
    await storage.upsert_session(
        SessionNode(session_key=key, session_id=session_id, created_at=now, updated_at=now)
    )
    return session_id


async def message(storage: SessionStorage, key: str, session_id: str, text: str) -> None:
    await storage.append_transcript_entry(
        TranscriptEntry(session_id=session_id, session_key=key, role="user", content=text)
    )


async def receipt(
    storage: SessionStorage,
    key: str,
    session_id: str,
    turn: str,
    status: str,
    *,
    scope: str = "checkpoint",
    reason: str = "disk full",
) -> MemoryDurableReceipt:
    return await storage.upsert_memory_durable_receipt(
        MemoryDurableReceipt(
            session_key=key,
            session_id=session_id,
            turn_id=turn,
            scope=scope,
            idempotency_key=f"{scope}:{key}:{turn}",
            status=status,
            reason=reason if status.endswith("_failed") else None,
        )
    )


async def receipts(
    storage: SessionStorage, key: str, text: str, messages: int, statuses: list[str], reason: str
) -> dict:
    session_id = await new_session(storage, key)
    for i in range(messages):
        await message(storage, key, session_id, f"{text} {i}")
    for i, status in enumerate(statuses):
        scope = "repair" if status.startswith("repair") else "checkpoint"
        await receipt(
            storage, key, session_id, f"turn-{i}", status, scope=scope, reason=f"{reason} {i}"
        )
    return {"session_id": session_id, "receipts": len(statuses)}


def waiting_flag(go: Path) -> Path:
    """The file ``churn`` creates when it starts waiting for ``go``."""
    return go.with_name(go.name + ".waiting")


async def churn(storage: SessionStorage, pause: float, delete_when: Path | None) -> dict:
    sessions = {}
    receipts = []
    deleted: list[str] = []
    for i in range(6):
        key = f"agent:{'ops' if i % 2 else 'main'}:telegram:group:-100{i}:sender:{i}"
        sessions[key] = await new_session(storage, key)
    for round_ in range(20):
        for key, session_id in sessions.items():
            await message(storage, key, session_id, f"round {round_}")
            status = "checkpoint_failed" if round_ % 3 == 0 else "checkpoint_saved"
            receipts.append(
                await receipt(storage, key, session_id, f"maintenance_{uuid.uuid4().hex}", status)
            )
        if round_ == 10:
            # The test says when the follower has caught up (the sessions, and round 9's
            # failures still failed), so the deletion and the recoveries below are changes
            # to something mirrored, whatever the machine's load.
            if delete_when is not None:
                waiting_flag(delete_when).touch()
            while delete_when is not None and not delete_when.exists():
                await asyncio.sleep(0.05)
        # the repair side moves earlier failures on, bumping updated_at
        for old in receipts[-12:-6]:
            if old.status == "checkpoint_failed":
                await storage.update_memory_durable_receipt(
                    old.receipt_id, status="checkpoint_recovered", attempt_count=1
                )
        if round_ == 10:
            doomed = next(iter(sessions))
            await storage.delete_session(doomed)
            deleted.append(doomed)
            del sessions[doomed]
        await asyncio.sleep(pause)
    return {"deleted": deleted}


async def load(
    storage: SessionStorage, count: int, rate: float, trace: bool, status: str = "checkpoint_saved"
) -> dict:
    key = "agent:main:main"
    session_id = await new_session(storage, key)
    gap = 1.0 / rate if rate else 0.0
    start = time.perf_counter()
    for i in range(count):
        turn = f"turn-{i:07d}"
        await message(storage, key, session_id, f"message {i}")
        row = await receipt(storage, key, session_id, turn, status)
        if trace:
            print(json.dumps({"key": row.idempotency_key, "committed_ms": now_ms()}), flush=True)
        if gap:
            delay = start + (i + 1) * gap - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
    return {"receipts": count}


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("db")
    parser.add_argument("plan", choices=("churn", "load", "receipts"))
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--rate", type=float, default=0.0)
    parser.add_argument("--pause", type=float, default=0.05)
    parser.add_argument("--trace", action="store_true")
    parser.add_argument("--status", default="checkpoint_saved", help="load: each receipt's status")
    parser.add_argument("--key", default="agent:main:webchat:default", help="receipts: the key")
    parser.add_argument("--text", default="message", help="receipts: each message's start")
    parser.add_argument("--messages", type=int, default=2, help="receipts: how many messages")
    parser.add_argument("--statuses", default="checkpoint_saved", help="receipts: comma list")
    parser.add_argument("--reason", default="disk full", help="receipts: each failure's reason")
    parser.add_argument("--delete-when", type=Path, default=None, help="churn: wait for this file")
    args = parser.parse_args()
    storage = await SessionStorage.open(args.db)
    try:
        if args.plan == "churn":
            summary = await churn(storage, args.pause, args.delete_when)
        elif args.plan == "receipts":
            statuses = [s for s in args.statuses.split(",") if s]
            summary = await receipts(
                storage, args.key, args.text, args.messages, statuses, args.reason
            )
        else:
            summary = await load(storage, args.count, args.rate, args.trace, args.status)
    finally:
        await storage.close()
    print(json.dumps({"done": True, **summary}), flush=True)


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
