"""A following pass costs the same over a 30,000-entry session as over a 30-entry one.

Counted, not timed: the rows a pass reads from the source and the queries of each side, at two
session lengths, with the same write before each pass (bench/mirror_pass_cost.py measures the
CPU of the same passes).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.mirror_pass_cost import measure
from receipts_app.mirror.sync import TAIL_ROWS

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
