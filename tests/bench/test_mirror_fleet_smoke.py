"""``bench/mirror_fleet.py`` at a tiny size: the light writer (``bench/light_writer.py``), two gateways each followed by
its own process, a short and a long session. Fails when the bench crashes or when the
figures it prints say rows were lost or duplicated."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# Real processes (writers, followers): one at a time with the suite's other such tests.
pytestmark = pytest.mark.xdist_group("real-processes")


def test_mirror_fleet_with_the_light_writer_runs_and_loses_nothing(tmp_path):
    result = tmp_path / "mirror_fleet_smoke.json"
    command = [
        sys.executable,
        str(ROOT / "bench" / "mirror_fleet.py"),
        *("--writer", "light", "--gateways", "2", "--rate", "10", "--seconds", "1"),
        *("--idle-seconds", "0.5", "--long-session", "200"),
        *("--database-url", f"sqlite:///{tmp_path / 'ledger.sqlite3'}"),
        *("--work-dir", str(tmp_path / "work"), "--result", str(result)),
    ]
    done = subprocess.run(  # noqa: S603 - our own interpreter and bench
        command, cwd=ROOT, capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "lag p50" in done.stdout and "follower CPU per row, long session / short" in done.stdout
    figures = json.loads(result.read_text())
    assert figures["writer"] == "light"
    for phase in (figures, figures["long_session"]):
        assert phase["overall"]["not_applied"] == 0
        for gateway in phase["per_gateway"].values():
            assert gateway["applied"] == gateway["committed"] == 10
            lost = gateway["entries_lost"] + gateway["receipts_lost"]
            assert lost == 0 and gateway["entries_duplicated"] + gateway["receipts_duplicated"] == 0
        assert phase["cpu_budget"]["follower_cpu_ms_per_row_applied"] > 0
