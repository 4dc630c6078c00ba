"""A following pass costs the same over a 30,000-entry session as over a 30-entry one.

Counted, not timed: the rows a pass reads from the source and the queries of each side, at two
session lengths, with the same write before each pass (bench/mirror_pass_cost.py measures the
CPU of the same passes).
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from bench.mirror_pass_cost import make_source, measure, write_one
from receipts_app.mirror.follower import build_follower
from receipts_app.mirror.sync import TAIL_ROWS
from receipts_app.models import ReceiptEvent
from sessions_app.models import TranscriptEntry

pytestmark = pytest.mark.django_db

PASSES = 6
ROOT = Path(__file__).resolve().parents[2]


def test_a_pass_over_a_long_session_reads_no_more_than_over_a_short_one(tmp_path):
    short = measure(tmp_path / "short", 30, PASSES, gateway="short")
    long = measure(tmp_path / "long", 30_000, PASSES, gateway="long")
    # The same queries on both sides, whatever the session's length.
    assert long.ledger_queries_per_pass == short.ledger_queries_per_pass
    assert long.source_queries_per_pass == short.source_queries_per_pass
    # Rows: the new entry and the session's tail (at most 2 * TAIL_ROWS), never the session.
    assert short.source_rows_per_pass <= 1 + 30 + PASSES
    assert long.source_rows_per_pass <= 1 + 2 * TAIL_ROWS
    assert long.source_rows_per_pass <= 2 * short.source_rows_per_pass


def test_the_bench_prints_its_figures(tmp_path):
    done = subprocess.run(  # noqa: S603 - our own script, fixed argv
        [
            sys.executable,
            str(ROOT / "bench" / "mirror_pass_cost.py"),
            "--short",
            "5",
            "--long",
            "200",
            "--passes",
            "2",
            "--rounds",
            "1",
            "--database-url",
            f"sqlite:///{tmp_path / 'ledger.sqlite3'}",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    figures = json.loads(done.stdout.splitlines()[-1])
    assert figures["long"]["entries"] == 200 and figures["short"]["cpu_ms_per_pass"] > 0
    assert "long / short CPU" in done.stdout


def test_an_edit_in_a_long_session_reads_its_tail_not_the_session(tmp_path):
    """Upstream rewrites its newest, streamed answer in place: the pass reads that session's
    tail again (not its thousands of entries), and answering its coverage around the edit
    counts the transcript instead of reading it (no checkpoint has its entry count)."""
    db = tmp_path / "long.db"
    session_id = make_source(db, 3_000)
    follower = build_follower(db_path=db, workspace=None, gateway="long")
    assert follower.poll() == "synced"
    write_one(db, session_id, 1)
    assert follower.poll() == "synced"
    reads = follower.watch.db.reads
    before = reads["entries_reread"]

    conn = sqlite3.connect(db)
    with conn:
        conn.execute(
            "UPDATE transcript_entries SET content = 'the final answer' WHERE id = "
            "(SELECT MAX(id) FROM transcript_entries WHERE session_id = ?)",
            (session_id,),
        )
        conn.execute(
            "UPDATE sessions SET updated_at = updated_at + 1 WHERE session_id = ?", (session_id,)
        )
    conn.close()
    with CaptureQueriesContext(connection) as queries:
        assert follower.poll() == "synced"

    assert 0 < reads["entries_reread"] - before <= 2 * TAIL_ROWS
    edit = ReceiptEvent.objects.get(action="transcript_edit")
    assert edit.details["gateway"] == "long"
    assert (
        TranscriptEntry.objects.filter(gateway_id="long", content="the final answer").count() == 1
    )
    table = TranscriptEntry._meta.db_table
    whole_reads = [
        q["sql"]
        for q in queries.captured_queries
        if f'FROM "{table}"' in q["sql"]
        and '"message_id" IN' not in q["sql"]  # reads of the batch's own entries
        and "COUNT(" not in q["sql"]
    ]
    assert whole_reads == []
    follower.watch.close()
