"""What one following pass costs at two session lengths (docs/PERFORMANCE.md, "Mirror").

A source in the 0.3.0 schema (a copy of the golden ledger, FTS triggers included) gets one
long session of ``--short`` or ``--long`` entries; a follower (in this process, the mirror's
own ``Follower``) imports it, then runs ``--passes`` passes, each after one write the way
0.3.0 makes it: a transcript row, the session's ``updated_at``, one receipt (plain sqlite3
transactions, a light writer). Per pass, at each length: the CPU time of this process
(``time.process_time``), the rows read from the source (new entries, entries read again, rows
under a fingerprint) and the queries of each side. The goal: the long figure within 20 % of
the short one.

Its own ledger: a SQLite file under ``var/bench/mirror_pass_cost`` (or ``--database-url``).

    .venv/bin/python bench/mirror_pass_cost.py [--short 30] [--long 30000] [--passes 200]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sqlite3
import statistics
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "var" / "bench" / "mirror_pass_cost"
GOLDEN = ROOT / "tests" / "golden" / "opensquilla-0.3.0" / "sessions.db"
KEY = "agent:main:main"


def now_ms() -> int:
    return int(time.time() * 1000)


def make_source(path: Path, entries: int) -> str:
    """A 0.3.0 ``sessions.db`` at ``path``: the golden ledger plus session ``KEY`` with
    ``entries`` messages. Returns that session's id."""
    golden = sqlite3.connect(f"file:{GOLDEN}?mode=ro", uri=True)
    conn = sqlite3.connect(path)
    try:
        golden.backup(conn)
    finally:
        golden.close()
    session_id = str(uuid.uuid4())
    stamp = now_ms()
    with conn:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(
            "INSERT INTO sessions (session_key, session_id, created_at, updated_at) "
            "VALUES (?, ?, ?, ?)",
            (KEY, session_id, stamp, stamp),
        )
        conn.executemany(
            "INSERT INTO transcript_entries (session_id, session_key, message_id, role, "
            "content, created_at) VALUES (?, ?, ?, 'user', ?, ?)",
            ((session_id, KEY, f"m-{i}", f"message {i}", stamp) for i in range(entries)),
        )
    conn.close()
    return session_id


def write_one(path: Path, session_id: str, n: int) -> None:
    """One write as 0.3.0 makes it: a message (its session touched) and a receipt."""
    conn = sqlite3.connect(path)
    stamp = now_ms()
    try:
        with conn:
            conn.execute(
                "INSERT INTO transcript_entries (session_id, session_key, message_id, role, "
                "content, created_at) VALUES (?, ?, ?, 'user', ?, ?)",
                (session_id, KEY, f"w-{n}-{uuid.uuid4().hex[:8]}", f"write {n}", stamp),
            )
            conn.execute("UPDATE sessions SET updated_at = ? WHERE session_key = ?", (stamp, KEY))
            conn.execute(
                "INSERT INTO memory_durable_receipts (receipt_id, session_key, session_id, "
                "turn_id, scope, idempotency_key, status, created_at, updated_at) "
                "VALUES (?, ?, ?, ?, 'checkpoint', ?, 'checkpoint_saved', ?, ?)",
                (
                    str(uuid.uuid4()),
                    KEY,
                    session_id,
                    f"t-{n}",
                    f"k-{n}-{uuid.uuid4()}",
                    stamp,
                    stamp,
                ),
            )
    finally:
        conn.close()


@dataclass
class PassCost:
    entries: int
    passes: int
    cpu_ms_per_pass: float
    source_rows_per_pass: float
    source_queries_per_pass: float
    ledger_queries_per_pass: float


def _source_queries(reads: dict[str, int]) -> int:
    return sum(v for k, v in reads.items() if k.endswith("_queries"))


def _source_rows(reads: dict[str, int]) -> int:
    return (
        reads.get("entries", 0) + reads.get("entries_reread", 0) + reads.get("fingerprint_rows", 0)
    )


def measure(root: Path, entries: int, passes: int, gateway: str) -> PassCost:
    """Follow a fresh source with one session of ``entries`` messages through ``passes``
    passes, one write before each. Runs inside a configured Django (the caller's database)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from receipts_app.mirror.follower import build_follower

    root.mkdir(parents=True, exist_ok=True)
    db = root / f"{gateway}.db"
    session_id = make_source(db, entries)
    follower = build_follower(db_path=db, workspace=None, gateway=gateway)
    assert follower.poll() == "synced"  # the initial import
    source = follower.watch.db
    assert source is not None
    cpu = 0.0
    ledger_queries = 0
    before = dict(source.reads)
    for n in range(passes):
        write_one(db, session_id, n)
        connection.queries_log.clear()  # a full log would make the count below read 0
        with CaptureQueriesContext(connection) as queries:
            started = time.process_time()
            outcome = follower.poll()
            cpu += time.process_time() - started
        assert outcome == "synced", outcome
        ledger_queries += len(queries)
    after = dict(follower.watch.db.reads)
    delta = {k: after.get(k, 0) - before.get(k, 0) for k in after}
    follower.watch.close()
    return PassCost(
        entries=entries,
        passes=passes,
        cpu_ms_per_pass=1000 * cpu / passes,
        source_rows_per_pass=_source_rows(delta) / passes,
        source_queries_per_pass=_source_queries(delta) / passes,
        ledger_queries_per_pass=ledger_queries / passes,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--short", type=int, default=30)
    parser.add_argument("--long", type=int, default=30_000)
    parser.add_argument("--passes", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3, help="alternating runs; medians kept")
    parser.add_argument("--database-url", default="")
    args = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    ledger = OUT / "ledger.sqlite3"
    if not args.database_url and ledger.exists():
        ledger.unlink()
    os.environ["DATABASE_URL"] = args.database_url or f"sqlite:///{ledger}"
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "opensquilla_site.settings")
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from django.core.management import call_command

    # A log line per pass would be part of what is measured.
    logging.getLogger("receipts_app.mirror").setLevel(logging.ERROR)

    call_command("migrate", verbosity=0)
    runs: dict[int, list[PassCost]] = {args.short: [], args.long: []}
    for round_ in range(args.rounds):
        for size in (args.short, args.long):
            name = f"r{round_}-{size}"
            runs[size].append(measure(OUT / "sources", size, args.passes, gateway=name))
    figures = {
        size: {
            "entries": size,
            "passes": args.passes,
            "cpu_ms_per_pass": round(statistics.median(r.cpu_ms_per_pass for r in found), 3),
            "source_rows_per_pass": found[-1].source_rows_per_pass,
            "source_queries_per_pass": found[-1].source_queries_per_pass,
            "ledger_queries_per_pass": found[-1].ledger_queries_per_pass,
        }
        for size, found in runs.items()
    }
    short, long = figures[args.short], figures[args.long]
    ratio = long["cpu_ms_per_pass"] / short["cpu_ms_per_pass"]
    for figure in (short, long):
        print(
            f"{figure['entries']:>7} entries: {figure['cpu_ms_per_pass']:.2f} ms CPU a pass, "
            f"{figure['source_rows_per_pass']:.1f} source rows, "
            f"{figure['source_queries_per_pass']:.1f} source queries, "
            f"{figure['ledger_queries_per_pass']:.1f} ledger queries"
        )
    print(f"long / short CPU: {ratio:.2f} (goal: at most 1.20)")
    print(json.dumps({"short": short, "long": long, "ratio": round(ratio, 3)}))


if __name__ == "__main__":
    main()
