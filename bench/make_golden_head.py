"""Write a small ``sessions.db`` with upstream's own code at a later release (0.5.3, HEAD).

The user supplies the upstream source; nothing here fetches or builds it. From a clone or
the fetched bare repository (see ``tests/golden/README.md``):

    git -C <upstream repo> archive v0.5.3 src migrations | tar -x -C /tmp/up-0.5.3
    .venv/bin/python bench/make_golden_head.py --upstream-src /tmp/up-0.5.3/src \\
        --out /tmp/golden-0.5.3        # writes sessions.db.gz and workspace/

``--rewrite DB --text TEXT`` instead writes that streamed answer again under its
``message_id`` into an existing ledger (a copy of the HEAD golden one), through the given
release's ``SessionManager.append_message``: at HEAD that is upstream's own in-place rewrite
(``upsert_transcript_entry_and_touch``). ``tests/mirror/test_inplace_edits.py`` runs it when
``OSQ_UPSTREAM_SRC`` names a HEAD ``src/`` (and the reference venv exists).

The script re-executes itself in the reference venv (``var/bench/ref-venv``, Python 3.12,
built by ``bench/reference_venv.sh``) with ``--upstream-src`` first on ``sys.path``, so the
given release's ``opensquilla`` package shadows the venv's installed 0.3.0; the venv already
has every library the storage needs (aiosqlite, sqlmodel, yoyo-migrations). Like a gateway
boot, it applies upstream's yoyo migrations (``<src>/../migrations`` unless ``--migrations``
says otherwise) before ``SessionStorage`` opens the file, so ``_yoyo_migration`` records
the schema the release ships.

What the ledger holds (every row written through upstream's ``SessionManager``,
``SessionStorage`` and ``SessionFlushService``):
- three sessions, one of them created under a non-canonical key;
- transcript entries, a tool call among them, and (where the release has #1199, after
  0.5.3) one streamed assistant message written twice under the same ``message_id``: the
  second write replaces the row in place, keeping its ``id`` and ``created_at``
  (``upsert_transcript_entry_and_touch``); an older release writes the final text once;
- a checkpoint per session (``checkpoint_saved``, its JSONL file in ``workspace/``);
- a flush whose model never answers usefully: ``preimage_saved`` plus ``repair_pending``
  and its raw-fallback archive;
- then, as a repair worker and an operator would leave them: one repair row
  ``repair_abandoned``, one ``repair_done``, and a ``checkpoint_failed`` row.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import inspect
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
REF_PYTHON = ROOT / "var" / "bench" / "ref-venv" / "bin" / "python"
STREAMED_MESSAGE_ID = "stream-answer-1"
DRAFT_TEXT = "Draft: the deploy window is"
FINAL_TEXT = "The deploy window is Friday 18:00 UTC; rollbacks need two approvals."


class _UnparseableProvider:
    """A flush model whose answers never parse: the flush archives raw and queues a repair."""

    async def complete(self, *, messages: Any, max_tokens: int) -> Any:
        return SimpleNamespace(content="I could not decide what to remember.", usage=None)


class _MemorySaveOnly:
    def to_tool_definitions(self, *args: Any) -> list[Any]:
        return [SimpleNamespace(name="memory_save")]


async def make_ledger(out_dir: Path, migrations: Path) -> None:
    from opensquilla.memory.session_flush import SessionFlushService
    from opensquilla.persistence.migrator import apply_pending
    from opensquilla.session.manager import SessionManager
    from opensquilla.session.models import MemoryDurableReceipt
    from opensquilla.session.storage import SessionStorage

    workspace = out_dir / "workspace"
    workspace.mkdir(parents=True)
    db_path = out_dir / "sessions.db"
    # The gateway's boot order: migrations first, then the storage opens the file.
    apply_pending(str(db_path), migrations)
    storage = await SessionStorage.open(str(db_path))
    manager = SessionManager(storage, time_prefix_tz="UTC", checkpoint_workspace_dir=workspace)

    async def write_flush_receipt(receipt: Any, **row: Any) -> None:
        key = ":".join(
            [
                "flush-receipt",
                row["scope"],
                row["session_key"],
                row["session_id"],
                row.get("turn_id") or "",
                row["status"],
                str(row.get("reason") or ""),
                row.get("target_path") or "",
            ]
        )
        await storage.upsert_memory_durable_receipt(
            MemoryDurableReceipt(
                session_key=row["session_key"],
                session_id=row["session_id"],
                turn_id=row.get("turn_id"),
                scope=row["scope"],
                source_path=row.get("source_path"),
                target_path=row.get("target_path"),
                content_hash=row.get("content_hash"),
                idempotency_key=key,
                status=row["status"],
                reason=row.get("reason"),
                attempt_count=1,
            )
        )

    async def session_id_of(session_key: str) -> str | None:
        node = await manager.get_session(session_key)
        return node.session_id if node else None

    flush = SessionFlushService(
        provider_selector=lambda agent_id: _UnparseableProvider(),
        tool_registry=_MemorySaveOnly(),
        tool_handler=None,  # type: ignore[arg-type]  # never reached: extraction fails first
        receipt_writer=write_flush_receipt,
        session_identity_resolver=session_id_of,
        archive_workspace_resolver=lambda agent_id: workspace,
    )

    # 1. A web chat whose last answer was streamed: written as a draft, then finalised.
    streamed = "agent:main:webchat:head-1"
    await manager.create(streamed)
    await manager.append_message(streamed, "user", "When is the deploy window?")
    await manager.append_message(streamed, "assistant", "Let me check the runbook.")
    await manager.append_message(streamed, "user", "And who approves rollbacks?")
    if "message_id" in inspect.signature(manager.append_message).parameters:
        await manager.append_message(
            streamed, "assistant", DRAFT_TEXT, message_id=STREAMED_MESSAGE_ID
        )
        await manager.append_message(
            streamed, "assistant", FINAL_TEXT, message_id=STREAMED_MESSAGE_ID
        )
    else:
        # Before #1199 (0.5.3 and older) a message is written once, under a fresh id.
        await manager.append_message(streamed, "assistant", FINAL_TEXT)
    await manager.record_memory_checkpoint(streamed, turn_id="cmp_head_1")

    # 2. A tool-using group chat of another agent, flushed by a model that never parses.
    tools = "agent:ops:discord:group:7"
    await manager.create(tools, agent_id="ops")
    await manager.append_message(tools, "user", "What is the weather in Paris?")
    tool_call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
    }
    await manager.append_message(tools, "assistant", "", tool_calls=[tool_call])
    await manager.append_message(tools, "tool", "18C", tool_call_id="call_1")
    await manager.append_message(tools, "assistant", "It is 18C in Paris.")
    await manager.record_memory_checkpoint(tools, turn_id="cmp_head_2")
    await flush.execute(await manager.get_transcript(tools), tools, agent_id="ops")

    # 3. Created under a non-canonical key; flushed, then repaired by the worker.
    plain = "webchat:default"
    await manager.create(plain)
    await manager.append_message(plain, "user", "Remember that I prefer tea.")
    await manager.append_message(plain, "assistant", "Noted: tea, not coffee.")
    await manager.record_memory_checkpoint(plain, turn_id="cmp_head_3")
    await flush.execute(await manager.get_transcript(plain), plain)

    # What a repair worker leaves behind, through the storage API.
    outcomes = {
        tools: {"status": "repair_abandoned", "reason": "empty_raw_excerpt", "attempt_count": 4},
        "agent:main:webchat:default": {"status": "repair_done", "attempt_count": 2},
    }
    for session_key, outcome in outcomes.items():
        rows = await storage.list_memory_durable_receipts(session_key=session_key, scope="repair")
        for row in rows:
            await storage.update_memory_durable_receipt(row.receipt_id, **outcome)

    node = await manager.get_session(streamed)
    await storage.upsert_memory_durable_receipt(
        MemoryDurableReceipt(
            session_key=streamed,
            session_id=node.session_id,
            turn_id="cmp_failed",
            scope="checkpoint",
            idempotency_key=f"checkpoint:{streamed}:cmp_failed:deadbeef:failed:1",
            status="checkpoint_failed",
            reason="disk full",
            attempt_count=1,
        )
    )
    await storage.close()
    _compact(db_path)


async def rewrite_streamed(db_path: Path, text: str) -> None:
    """Write the streamed answer of the golden ledger again, as upstream would finalise it."""
    from opensquilla.session.manager import SessionManager
    from opensquilla.session.storage import SessionStorage

    storage = await SessionStorage.open(str(db_path))
    manager = SessionManager(storage, time_prefix_tz="UTC")
    if "message_id" not in inspect.signature(manager.append_message).parameters:
        raise SystemExit("this release has no in-place rewrite (#1199): nothing to do")
    await manager.append_message(
        "agent:main:webchat:head-1", "assistant", text, message_id=STREAMED_MESSAGE_ID
    )
    await storage.close()


def _compact(db_path: Path) -> None:
    """One self-contained file, gzipped: fold the WAL back in and drop the free pages.

    A release after 0.3.0 creates some 200 tables and indexes, one 4 KiB page each at
    least, so the raw file is close to a megabyte of mostly empty pages; gzip makes it a
    few tens of KB. The tests unpack it into a temporary directory.
    """
    conn = sqlite3.connect(db_path)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.execute("PRAGMA journal_mode=DELETE")
        conn.execute("VACUUM")
    finally:
        conn.close()
    with (
        db_path.open("rb") as raw,
        open(f"{db_path}.gz", "wb") as target,
        gzip.GzipFile(fileobj=target, mode="wb", mtime=0) as packed,
    ):
        packed.write(raw.read())


def summary(db_path: Path) -> dict[str, Any]:
    conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        migrations = [
            r[0] for r in conn.execute("SELECT migration_id FROM _yoyo_migration ORDER BY 1")
        ]
        receipts = conn.execute(
            "SELECT scope, status, count(*) FROM memory_durable_receipts GROUP BY 1, 2 ORDER BY 1, 2"
        ).fetchall()
        return {
            "sessions": conn.execute("SELECT count(*) FROM sessions").fetchone()[0],
            "transcript_entries": conn.execute(
                "SELECT count(*) FROM transcript_entries"
            ).fetchone()[0],
            "receipts": receipts,
            "latest_migration": migrations[-1] if migrations else None,
        }
    finally:
        conn.close()


def _reexec_in_reference_venv(upstream_src: Path) -> None:
    """Run again under the reference interpreter with the given source first on the path."""
    if os.environ.get("OSQ_GOLDEN_HEAD_CHILD") == "1":
        return
    if not REF_PYTHON.exists():
        subprocess.run(["bash", str(ROOT / "bench" / "reference_venv.sh")], check=True)
    env = dict(os.environ, OSQ_GOLDEN_HEAD_CHILD="1", PYTHONPATH=str(upstream_src))
    os.execve(str(REF_PYTHON), [str(REF_PYTHON), __file__, *sys.argv[1:]], env)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--upstream-src", type=Path, required=True, help="upstream's src/ at a tag or commit"
    )
    parser.add_argument(
        "--migrations", type=Path, help="upstream's migrations/ (default: beside --upstream-src)"
    )
    parser.add_argument("--out", type=Path, help="an empty or new directory")
    parser.add_argument(
        "--rewrite", type=Path, help="rewrite the streamed answer in place in this sessions.db"
    )
    parser.add_argument("--text", default="Edited by upstream.", help="the text for --rewrite")
    args = parser.parse_args()
    if (args.out is None) == (args.rewrite is None):
        parser.error("give exactly one of --out and --rewrite")
    upstream_src = args.upstream_src.resolve()
    if not (upstream_src / "opensquilla" / "session" / "storage.py").is_file():
        parser.error(f"{upstream_src} is not upstream's src/ (no opensquilla/session/storage.py)")
    migrations = (args.migrations or upstream_src.parent / "migrations").resolve()
    if not any(migrations.glob("V*.py")):
        parser.error(f"{migrations} holds no V*.py migrations; pass --migrations")
    if args.rewrite is not None:
        _reexec_in_reference_venv(upstream_src)
        asyncio.run(rewrite_streamed(args.rewrite.resolve(), args.text))
        return 0
    out = args.out.resolve()
    if out.exists() and any(out.iterdir()):
        parser.error(f"{out} is not empty")
    _reexec_in_reference_venv(upstream_src)

    import opensquilla

    loaded = Path(opensquilla.__file__).resolve()
    if upstream_src not in loaded.parents:
        parser.error(f"opensquilla was imported from {loaded}, not from {upstream_src}")
    out.mkdir(parents=True, exist_ok=True)
    asyncio.run(make_ledger(out, migrations))
    print(json.dumps(summary(out / "sessions.db")))
    (out / "sessions.db").unlink()
    print(f"wrote {out}/sessions.db.gz and {out}/workspace")
    return 0


if __name__ == "__main__":
    sys.exit(main())
