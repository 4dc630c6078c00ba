"""A light gateway writer: plain sqlite3 transactions in OpenSquilla 0.3.0's schema.

The reference ``SessionStorage`` (tests/mirror/reference_writer.py) costs about 6 ms of CPU a
write (a message and a receipt, two commits through its async stack), so ten gateways at 100
writes/s would need six cores for the writers alone. This writer produces the same rows for
the mirror at a fraction of that: the schema is taken from the golden 0.3.0 ``sessions.db``
(tables, indexes and the FTS5 triggers that index every transcript row, as the gateway's
file has them), and each write is one transaction of one transcript row and one
``checkpoint_saved`` receipt, stamped with the wall clock as upstream stamps them.

    python bench/light_writer.py DB create
    python bench/light_writer.py DB load --count N [--rate R] [--trace] [--turn-prefix P]
    python bench/light_writer.py DB prefill --count N      # N transcript rows, one transaction

``load`` and ``prefill`` write into the one session ``agent:main:main`` (created if absent), so
a prefill makes the session long for the loads after it. ``--trace`` prints one JSON line per
committed write, ``{"key": idempotency_key, "committed_ms": ...}``, as the reference writer
does (bench/mirror_fleet.py reads them), and every command ends with a ``{"done": true, ...}``
line carrying the CPU it spent.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "golden" / "opensquilla-0.3.0" / "sessions.db"
SESSION_KEY = "agent:main:main"


def now_ms() -> int:
    return int(time.time() * 1000)


def golden_schema() -> list[str]:
    """The 0.3.0 file's own DDL, in creation order: tables, the FTS5 table (its shadow tables
    are its own to create), the triggers that keep it, and the indexes."""
    source = sqlite3.connect(f"file:{GOLDEN}?mode=ro", uri=True)
    try:
        rows = source.execute(
            "SELECT type, name, sql FROM sqlite_master WHERE sql IS NOT NULL ORDER BY rowid"
        ).fetchall()
    finally:
        source.close()
    shadow = ("transcript_fts_data", "transcript_fts_idx", "transcript_fts_docsize")
    skip = {"sqlite_sequence", *shadow, "transcript_fts_config"}
    return [sql for _type, name, sql in rows if name not in skip]


def connect(path: Path) -> sqlite3.Connection:
    # Autocommit mode: each write is the explicit BEGIN IMMEDIATE ... COMMIT below.
    conn = sqlite3.connect(path, isolation_level=None, timeout=30)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")  # what the gateway's storage sets in WAL mode
    return conn


def create(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    for leftover in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
        leftover.unlink(missing_ok=True)
    conn = connect(path)
    try:
        for statement in golden_schema():
            conn.execute(statement)
    finally:
        conn.close()


def session_id(conn: sqlite3.Connection) -> str:
    row = conn.execute(
        "SELECT session_id FROM sessions WHERE session_key = ?", (SESSION_KEY,)
    ).fetchone()
    if row:
        return str(row[0])
    new = str(uuid.uuid4())
    now = now_ms()
    conn.execute(
        "INSERT INTO sessions (session_key, session_id, created_at, updated_at, started_at)"
        " VALUES (?, ?, ?, ?, ?)",
        (SESSION_KEY, new, now, now, now),
    )
    return new


ENTRY = (
    "INSERT INTO transcript_entries (session_id, session_key, message_id, role, content,"
    " created_at) VALUES (?, ?, ?, 'user', ?, ?)"
)
RECEIPT = (
    "INSERT INTO memory_durable_receipts (receipt_id, session_key, session_id, turn_id, scope,"
    " idempotency_key, status, attempt_count, created_at, updated_at)"
    " VALUES (?, ?, ?, ?, 'checkpoint', ?, 'checkpoint_saved', 1, ?, ?)"
)


def load(path: Path, count: int, rate: float, trace: bool, prefix: str) -> dict[str, float]:
    conn = connect(path)
    sid = session_id(conn)
    gap = 1.0 / rate if rate else 0.0
    start = time.perf_counter()
    cpu = time.process_time()
    for i in range(count):
        turn = f"{prefix}turn-{i:07d}"
        key = f"checkpoint:{SESSION_KEY}:{turn}"
        stamp = now_ms()
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(ENTRY, (sid, SESSION_KEY, str(uuid.uuid4()), f"message {turn}", stamp))
        conn.execute(RECEIPT, (str(uuid.uuid4()), SESSION_KEY, sid, turn, key, stamp, stamp))
        conn.execute("COMMIT")
        if trace:
            print(json.dumps({"key": key, "committed_ms": now_ms()}), flush=True)
        if gap:
            delay = start + (i + 1) * gap - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
    spent = time.process_time() - cpu
    conn.close()
    return {"writes": count, "cpu_s": round(spent, 4)}


def prefill(path: Path, count: int) -> dict[str, float]:
    conn = connect(path)
    cpu = time.process_time()
    conn.execute("BEGIN IMMEDIATE")
    sid = session_id(conn)
    stamp = now_ms()
    conn.executemany(
        ENTRY,
        (
            (sid, SESSION_KEY, str(uuid.uuid4()), f"earlier message {i}", stamp)
            for i in range(count)
        ),
    )
    conn.execute("COMMIT")
    spent = time.process_time() - cpu
    conn.close()
    return {"entries": count, "cpu_s": round(spent, 4)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("db", type=Path)
    parser.add_argument("plan", choices=("create", "load", "prefill"))
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--rate", type=float, default=0.0)
    parser.add_argument("--trace", action="store_true")
    parser.add_argument("--turn-prefix", default="")
    args = parser.parse_args()
    summary: dict[str, float] = {}
    if args.plan == "create":
        create(args.db)
    elif args.plan == "load":
        summary = load(args.db, args.count, args.rate, args.trace, args.turn_prefix)
    else:
        summary = prefill(args.db, args.count)
    print(json.dumps({"done": True, **summary}), flush=True)


if __name__ == "__main__":
    main()
