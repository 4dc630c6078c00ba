"""bench/scrub.py at a tiny size: every figure comes out, and the nothing-changed cycle reads
no file bytes (the bench asserts it through the scrub's counters)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.django_db


def _bench():
    spec = importlib.util.spec_from_file_location("bench_scrub", ROOT / "bench" / "scrub.py")
    module = importlib.util.module_from_spec(spec)
    # Registered by its name, as an import would: the floor's reader processes find their
    # function through it.
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_the_scrub_bench_runs_at_a_tiny_size(tmp_path, capsys):
    bench = _bench()
    result = bench.measure(tmp_path, 5, 3, rounds=2, disk_bytes=1024 * 1024)
    bench.print_figures(result, "sqlite")
    first, again = result["full"]
    assert (first["checkpoints"], again["checkpoints"]) == (5, 5)
    assert first["mb_per_s"] > 0 and first["cpu_ms_per_mb"] > 0
    assert len(result["rounds"]) == 2 and result["floor_mb_per_s"] > 0
    assert first["ratio_to_disk_min"] <= first["ratio_to_disk"] <= first["ratio_to_disk_max"]
    assert result["unchanged"]["files_read"] == result["unchanged"]["bytes_read"] == 0
    out = capsys.readouterr().out
    assert "of the disk" in out and "(goal >= 0.5)" in out and "% of a core" in out
    assert "of the floor" in out
