"""Regenerate ``tests/golden/`` with the reference implementation (PyPI ``opensquilla==0.3.0``).

Runs inside ``var/bench/ref-venv`` (Python 3.12, built by ``bench/reference_venv.sh``); started
with any other interpreter it builds that venv if needed and re-executes itself there.

    .venv/bin/python bench/make_golden.py --out /tmp/golden        # write a fresh copy
    .venv/bin/python bench/make_golden.py --out /tmp/golden --compare tests/golden

Two kinds of output (see ``tests/golden/README.md``):

* the byte-exact vectors (``session_keys.json``, ``event_hashes.json``, ``checkpoint_paths.json``,
  ``checkpoints.json``): fixed inputs fed to the reference's own functions. They come out
  identical on every run: the one case without ``created_at`` is stamped by the reference with
  its clock, so the clock is pinned to the instant of the committed run.
* ``opensquilla-0.3.0/sessions.db`` and ``workspace/``: a ledger written by the reference's
  ``SessionStorage``, ``SessionManager`` and ``SessionFlushService``. Session ids, receipt ids,
  timestamps and generated text differ from run to run; the shape (sessions, entries per role,
  receipts with their scopes, statuses, reasons and attempts, files) does not, and
  ``--compare`` checks exactly that shape.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sqlite3
import subprocess
import sys
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
REF_PYTHON = ROOT / "var" / "bench" / "ref-venv" / "bin" / "python"
VECTOR_FILES = (
    "session_keys.json",
    "event_hashes.json",
    "checkpoint_paths.json",
    "checkpoints.json",
)
DB_DIR = "opensquilla-0.3.0"

# --- Byte-exact vectors: inputs -------------------------------------------------------------

SESSION_KEY_INPUTS: list[str | None] = [
    "webchat:default",
    "  agent:Ops:discord:group:1  ",
    "agent:default:main",
    "agent::x",
    "agent:",
    "agent:My Bot!:webchat:ABC",
    "agent:op%:x",
    "agent:op_:x",
    "agent:" + "A" * 70 + ":s",
    "subagent:agent:OPS:subagent:r1",
    "subagent:foo",
    "subagent:webchat:default",
    "cron:nightly:run:1",
    "webchat:abc",
    "agent",
    "Agent:Main:x",
    "",
    "   ",
    "agent:main:webchat:abc",
    "agent:DEFAULT:telegram:direct:42",
    "agent:ünïcode:x",
    "agent:a.b:c",
    "agent:--x--:y",
    "agent:main:webchat:abc:thread:7",
    None,
]

EVENT_HASH_INPUTS = ["", "a", " a\n", "Grüße", '{"k": 1}']

CHECKPOINT_PATH_INPUTS = [
    ("agent:main:webchat:abc", "turn-1"),
    ("../abc", "a/b"),
    ("..-", "-.."),
    (".-", "x y z"),
    ("agent:main:telegram:direct:+33 6 12", "cmp_ABC.def"),
]


def _entry(
    id: int | None,
    role: str,
    content: Any,
    *,
    created_at: int | None = 1700000000000,
    token_count: int | None = None,
    tool_call_id: str | None = None,
    tool_calls: list[dict] | None = None,
    reasoning_content: str | None = None,
) -> dict[str, Any]:
    # The key order is the order the committed checkpoints.json lists an entry's fields in.
    return {
        "id": id,
        "role": role,
        "content": content,
        "tool_call_id": tool_call_id,
        "tool_calls": tool_calls,
        "reasoning_content": reasoning_content,
        "created_at": created_at,
        "token_count": token_count,
    }


CHECKPOINT_CASES: list[tuple[str, list[dict[str, Any]]]] = [
    ("single_user", [_entry(5, "user", "hi")]),
    ("no_ids", [_entry(None, "user", "hi", created_at=None)]),
    (
        "conversation",
        [
            _entry(1, "user", "Remember that my sister's birthday is May 3rd.", token_count=12),
            _entry(
                2,
                "assistant",
                "Noted: your sister's birthday is May 3rd.",
                created_at=1700000001000,
                token_count=10,
            ),
            _entry(7, "user", "  padded content with spaces  \n", created_at=1700000002000),
        ],
    ),
    (
        "unicode_and_json",
        [
            _entry(10, "user", "Grüße — 日本語 🚀"),
            _entry(11, "assistant", '{"answer": 42, "list": [1, 2]}', created_at=1700000000500),
            _entry(12, "system", "system note", created_at=1700000001000),
        ],
    ),
    (
        "tools_and_reasoning",
        [
            _entry(20, "user", "What's the weather in Paris?"),
            _entry(
                21,
                "assistant",
                "",
                created_at=1700000000100,
                tool_calls=[
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                    },
                    {"id": "call_2", "name": "lookup", "args": {"q": "x"}},
                ],
                reasoning_content="Need the weather tool.",
            ),
            _entry(22, "tool", "18C and sunny", created_at=1700000000200, tool_call_id="call_1"),
            _entry(
                23,
                "assistant",
                "It is 18C and sunny.",
                created_at=1700000000300,
                reasoning_content="Summarise.",
            ),
        ],
    ),
    ("none_content", [_entry(30, "assistant", None)]),
]
# Each case is built twice: with the derived turn id, then with an explicit compaction id.
CHECKPOINT_TURN_ID_ARGS: list[str | None] = [None, "cmp_123"]
CHECKPOINT_SESSION = {"session_key": "agent:main:webchat:abc", "session_id": "session-1"}
CHECKPOINT_SOURCE = "session_manager"
# The committed run's clock (2026-11-29), in ms, when it built the first case whose entries have
# no ``created_at`` ("no_ids"); it read 1 ms more for the next such build. Only those show it.
PINNED_CLOCK_MS = 1795967984682


def _write_json(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")


def make_vectors(out: Path) -> None:
    from opensquilla.memory import checkpoint as ref_checkpoint
    from opensquilla.session.keys import canonicalize_session_key

    _write_json(
        out / "session_keys.json",
        [{"input": k, "canonical": canonicalize_session_key(k)} for k in SESSION_KEY_INPUTS],
    )
    _write_json(
        out / "event_hashes.json",
        [
            {"input": s, "checkpoint_event_hash": ref_checkpoint.checkpoint_event_hash(s)}
            for s in EVENT_HASH_INPUTS
        ],
    )
    _write_json(
        out / "checkpoint_paths.json",
        [
            {
                "session_key": key,
                "turn_id": turn,
                "relative_path": ref_checkpoint.checkpoint_relative_path(
                    session_key=key, turn_id=turn
                ).as_posix(),
            }
            for key, turn in CHECKPOINT_PATH_INPUTS
        ],
    )

    cases = []
    stamped_builds = 0
    scratch = out / ".checkpoint-scratch"
    for name, entries in CHECKPOINT_CASES:
        for turn_id_arg in CHECKPOINT_TURN_ID_ARGS:
            objects = [SimpleNamespace(**entry) for entry in entries]
            clock_ms = PINNED_CLOCK_MS + stamped_builds
            # Half a millisecond past the pinned value: int(time() * 1000) cannot round below it.
            ref_checkpoint.time = lambda ms=clock_ms: (ms + 0.5) / 1000  # type: ignore[attr-defined]
            if any(entry["created_at"] is None for entry in entries):
                stamped_builds += 1
            events = ref_checkpoint.build_checkpoint_events(
                **CHECKPOINT_SESSION,
                entries=objects,
                source=CHECKPOINT_SOURCE,
                turn_id=turn_id_arg,
            )
            written = ref_checkpoint.append_checkpoint_events(scratch, events)
            body = (scratch / written.relative_path).read_text(encoding="utf-8")
            cases.append(
                {
                    "name": name,
                    **CHECKPOINT_SESSION,
                    "turn_id_arg": turn_id_arg,
                    "source": CHECKPOINT_SOURCE,
                    "entries": entries,
                    "checkpoint_turn_id": ref_checkpoint.checkpoint_turn_id(objects),
                    "checkpoint_coverage_hash": ref_checkpoint.checkpoint_coverage_hash(objects),
                    "coverage_entry_count": len(objects),
                    "relative_path": written.relative_path,
                    "event_count": written.event_count,
                    "file_content_hash": written.content_hash,
                    "file_body": body,
                    "event_body_hash": ref_checkpoint.checkpoint_event_hash(
                        "\n".join(ref_checkpoint.serialize_checkpoint_event(e) for e in events)
                    ),
                }
            )
    _write_json(out / "checkpoints.json", cases)
    _remove_tree(scratch)


def _remove_tree(path: Path) -> None:
    if not path.exists():
        return
    for child in sorted(path.rglob("*"), key=lambda p: len(p.parts), reverse=True):
        child.rmdir() if child.is_dir() else child.unlink()
    path.rmdir()


# --- sessions.db + workspace ----------------------------------------------------------------

WORDS = (
    "deploy receipt tuesday meeting paris memory 日本語 🚀 birthday invoice report budget "
    "rollback checkpoint weather grüße flush agent"
).split()


class _Scenario(SimpleNamespace):
    key: str  # as the gateway created it
    plain_turns: int  # user + assistant
    tool_turns: int  # user + assistant(tool_calls) + tool + assistant
    flush_as: str | None  # the key the flush was called with (upstream keeps it verbatim)


SCENARIOS = [
    _Scenario(
        key="agent:main:webchat:s1-0",
        plain_turns=4,
        tool_turns=0,
        flush_as="agent:main:webchat:s1-0",
    ),
    _Scenario(key="agent:main:webchat:s1-1", plain_turns=3, tool_turns=1, flush_as=None),
    _Scenario(
        key="agent:main:webchat:s1-2",
        plain_turns=5,
        tool_turns=4,
        flush_as="agent:main:webchat:s1-2",
    ),
    _Scenario(key="agent:main:webchat:s1-3", plain_turns=3, tool_turns=0, flush_as=None),
    _Scenario(key="agent:main:webchat:s1-4", plain_turns=7, tool_turns=1, flush_as=None),
    _Scenario(key="agent:main:webchat:s1-5", plain_turns=3, tool_turns=5, flush_as=None),
    # Created and flushed under non-canonical spellings: the ledger row is canonical, the
    # flush's source path, archive name and idempotency key keep the caller's spelling.
    _Scenario(
        key="agent:Ops:discord:group:1",
        plain_turns=3,
        tool_turns=1,
        flush_as="agent:Ops:discord:group:1",
    ),
    _Scenario(key="webchat:default", plain_turns=4, tool_turns=3, flush_as="webchat:default"),
    _Scenario(
        key="agent:main:telegram:direct:142",
        plain_turns=4,
        tool_turns=2,
        flush_as="agent:main:telegram:direct:142",
    ),
]
# What the repair worker had left on three repair rows when the database was copied.
REPAIR_OUTCOMES = {
    "agent:main:webchat:s1-2": {
        "status": "repair_abandoned",
        "reason": "empty_raw_excerpt",
        "attempt_count": 4,
    },
    "agent:ops:discord:group:1": {
        "status": "repair_pending",
        "reason": "OSError",
        "attempt_count": 2,
        "next_retry_at_ms": 4102444800000,  # 2100-01-01: never due during a test
    },
    "agent:main:telegram:direct:142": {
        "status": "repair_abandoned",
        "reason": "empty_raw_excerpt",
        "attempt_count": 4,
    },
}
# Two failed checkpoints of the first session, written as a failing writer records them.
FAILED_CHECKPOINTS = [
    ("agent:main:webchat:s1-0", "disk full"),
    ("agent:main:webchat:s1-0", "permission denied"),
]


def _sentence(rng: random.Random, low: int, high: int) -> str:
    words = [rng.choice(WORDS) for _ in range(rng.randint(low, high))]
    return " ".join(words).capitalize() + "."


class _UnparseableProvider:
    """A flush model whose answers never parse: the flush archives raw and queues a repair."""

    async def complete(self, *, messages: Any, max_tokens: int) -> Any:
        return SimpleNamespace(content="I could not decide what to remember.", usage=None)


class _MemorySaveOnly:
    """A tool registry offering only ``memory_save`` (the flush refuses to run without it)."""

    def to_tool_definitions(self, *args: Any) -> list[Any]:
        return [SimpleNamespace(name="memory_save")]


async def make_ledger(out_dir: Path, seed: int = 9) -> None:
    from opensquilla.memory.session_flush import SessionFlushService
    from opensquilla.session.manager import SessionManager
    from opensquilla.session.models import MemoryDurableReceipt
    from opensquilla.session.storage import SessionStorage

    rng = random.Random(seed)
    workspace = out_dir / "workspace"
    workspace.mkdir(parents=True)
    storage = await SessionStorage.open(str(out_dir / "sessions.db"))
    manager = SessionManager(storage, time_prefix_tz="UTC", checkpoint_workspace_dir=workspace)

    async def write_flush_receipt(receipt: Any, **row: Any) -> None:
        # The embedder supplies the receipt writer; this one keys rows the way the ledger this
        # data was first copied from did.
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

    call = 0
    for scenario in SCENARIOS:
        await manager.create(scenario.key)
        turns = ["plain"] * scenario.plain_turns + ["tool"] * scenario.tool_turns
        rng.shuffle(turns)
        for kind in turns:
            await manager.append_message(scenario.key, "user", _sentence(rng, 3, 10))
            if kind == "tool":
                call_id = f"call_{call}"
                call += 1
                tool_call = {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                }
                await manager.append_message(scenario.key, "assistant", "", tool_calls=[tool_call])
                await manager.append_message(scenario.key, "tool", "18C", tool_call_id=call_id)
            reasoning = _sentence(rng, 3, 5) if rng.random() < 0.25 else None
            await manager.append_message(
                scenario.key, "assistant", _sentence(rng, 4, 25), reasoning_content=reasoning
            )
        await manager.record_memory_checkpoint(scenario.key, turn_id=f"cmp_{uuid.uuid4().hex[:8]}")
        if scenario.flush_as:
            transcript = await manager.get_transcript(scenario.key)
            await flush.execute(transcript, scenario.flush_as)

    for session_key, outcome in REPAIR_OUTCOMES.items():
        rows = await storage.list_memory_durable_receipts(session_key=session_key, scope="repair")
        for row in rows:
            await storage.update_memory_durable_receipt(row.receipt_id, **outcome)

    for session_key, reason in FAILED_CHECKPOINTS:
        node = await manager.get_session(session_key)
        await storage.upsert_memory_durable_receipt(
            MemoryDurableReceipt(
                session_key=session_key,
                session_id=node.session_id,
                turn_id="cmp_failed",
                scope="checkpoint",
                idempotency_key=(
                    f"checkpoint:{session_key}:cmp_failed:deadbeef:failed:"
                    f"{rng.randrange(10**15, 10**16)}"
                ),
                status="checkpoint_failed",
                reason=reason,
                attempt_count=1,
            )
        )
    await storage.close()


# --- comparison -----------------------------------------------------------------------------


def ledger_shape(db_dir: Path) -> dict[str, Any]:
    """What must not change between runs: everything but ids, timestamps and generated text."""
    conn = sqlite3.connect(db_dir / "sessions.db")
    try:
        sessions = conn.execute(
            "SELECT session_key, status, agent_id FROM sessions ORDER BY session_key"
        ).fetchall()
        entries = conn.execute(
            "SELECT session_key, role, tool_calls IS NOT NULL, count(*) FROM transcript_entries"
            " GROUP BY 1, 2, 3 ORDER BY 1, 2, 3"
        ).fetchall()
        receipts = conn.execute(
            "SELECT session_key, scope, status, reason, attempt_count, next_retry_at_ms,"
            " CASE WHEN turn_id GLOB 'cmp_[0-9a-f]*' THEN 'cmp_<random>' ELSE turn_id END,"
            " coverage_entry_count, source_path IS NOT NULL,"
            " target_path IS NOT NULL FROM memory_durable_receipts ORDER BY 1, 2, 3, 4, 5"
        ).fetchall()
        tables = [
            r[0]
            for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table' ORDER BY 1")
        ]
    finally:
        conn.close()

    def file_shape(path: Path) -> str:
        rel = path.relative_to(db_dir / "workspace").as_posix()
        if ".raw_fallbacks" in rel:  # <date>-<key>-preimage-<hash>.md
            return "raw:" + path.name[len("YYYY-MM-DD-") :].rsplit("-", 1)[0]
        return "checkpoint:" + path.parent.name

    files = sorted(file_shape(p) for p in (db_dir / "workspace").rglob("*") if p.is_file())
    return {
        "tables": tables,
        "sessions": sessions,
        "entries": entries,
        "receipts": receipts,
        "files": files,
    }


def compare(fresh: Path, committed: Path) -> list[str]:
    problems = []
    for name in VECTOR_FILES:
        if (fresh / name).read_bytes() != (committed / name).read_bytes():
            problems.append(f"{name}: bytes differ")
    got, want = ledger_shape(fresh / DB_DIR), ledger_shape(committed / DB_DIR)
    for part in want:
        if got[part] != want[part]:
            problems.append(
                f"{DB_DIR}: {part} differ:\n  fresh     {got[part]}\n  committed {want[part]}"
            )
    return problems


def _ensure_reference_interpreter() -> None:
    try:
        import opensquilla.session.storage  # noqa: F401
    except ImportError:
        subprocess.run(["bash", str(ROOT / "bench" / "reference_venv.sh")], check=True)
        os.execv(str(REF_PYTHON), [str(REF_PYTHON), __file__, *sys.argv[1:]])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="an empty or new directory")
    parser.add_argument(
        "--compare", type=Path, help="a golden directory to check the output against"
    )
    args = parser.parse_args()
    _ensure_reference_interpreter()

    out = args.out.resolve()
    if out.exists() and any(out.iterdir()):
        parser.error(f"{out} is not empty")
    out.mkdir(parents=True, exist_ok=True)
    make_vectors(out)
    asyncio.run(make_ledger(out / DB_DIR))
    print(f"wrote {out}")
    if args.compare:
        problems = compare(out, args.compare.resolve())
        for problem in problems:
            print(problem)
        print("identical vectors, same ledger shape" if not problems else "MISMATCH")
        return 1 if problems else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
