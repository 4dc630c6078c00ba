"""docs/PERFORMANCE.md is generated from the kept benchmark JSON and cannot drift from it."""

from __future__ import annotations

import copy
import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _report():
    spec = importlib.util.spec_from_file_location("bench_report", ROOT / "bench" / "report.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_committed_page_is_what_the_report_renders_from_bench_results():
    report = _report()
    committed = (ROOT / "docs" / "PERFORMANCE.md").read_text()
    assert committed == report.render(), (
        "docs/PERFORMANCE.md differs from bench/report.py's output from bench/results/: "
        "run .venv/bin/python bench/report.py (never edit the page by hand)"
    )


def test_every_figure_on_the_page_comes_from_the_json():
    report = _report()
    results = report.load_results()
    changed = copy.deepcopy(results)
    first = changed["carried"]["figures"][0]
    first["value"] = "a value only this test writes"
    first["met"] = not first["met"]
    page = report.render(changed)
    row = next(line for line in page.splitlines() if "a value only this test writes" in line)
    assert ("❌ missed" if first["met"] is False else "✅ met") in row
    assert page != report.render(results)
