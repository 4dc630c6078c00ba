"""The ledger workload both sides run: ours (Django venv) and the reference (its own venv).

Standard library only, because ``reference_ledger.py`` imports it from Python 3.12 in a
virtualenv that has opensquilla but not Django. Every figure in the side-by-side comparison
comes from rows built here, so both implementations see byte-identical data.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import random
import statistics
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = ROOT / "var" / "bench"

# The figures the issue asks for, and a small set for smoke runs.
FULL = {
    "upserts": 20_000,
    "conflicts": 20_000,
    "ledger_rows": 200_000,
    "lookups": 2_000,
    "status_lists": 200,
    "updates": 10_000,
}
QUICK = {
    "upserts": 1_000,
    "conflicts": 1_000,
    "ledger_rows": 20_000,
    "lookups": 200,
    "status_lists": 30,
    "updates": 500,
}

AGENTS = ("main", "support", "research", "ops", "billing", "triage", "coder", "writer")
# Realistic ledger mix: mostly successes, ~5% failures (checkpoint and repair).
STATUS_MIX = (
    ("checkpoint_saved", 55),
    ("flush_appended", 20),
    ("preimage_saved", 10),
    ("repair_done", 5),
    ("repair_pending", 3),
    ("checkpoint_failed", 3),
    ("repair_failed", 2),
    ("distill_failed", 1),
    ("repair_abandoned", 1),
)
SCOPE_FOR = {
    "checkpoint_saved": "checkpoint",
    "checkpoint_failed": "checkpoint",
    "flush_appended": "flush",
    "preimage_saved": "preimage",
}
LISTED_STATUS = "checkpoint_failed"  # the "list by status" operation reads this tab
BASE_MS = 1_760_000_000_000

RECEIPT_COLUMNS = (
    "receipt_id",
    "session_key",
    "session_id",
    "turn_id",
    "scope",
    "source_path",
    "target_path",
    "content_hash",
    "coverage_turn_id",
    "coverage_hash",
    "coverage_entry_count",
    "idempotency_key",
    "status",
    "reason",
    "attempt_count",
    "next_retry_at_ms",
    "created_at",
    "updated_at",
    "schema_version",
)


def _weighted_statuses() -> list[str]:
    out: list[str] = []
    for status, weight in STATUS_MIX:
        out.extend([status] * weight)
    return out


_STATUS_TABLE = _weighted_statuses()


def _uuid_for(tag: str, i: int) -> str:
    h = hashlib.md5(f"{tag}:{i}".encode()).hexdigest()  # noqa: S324 - ids, not security
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-a{h[17:20]}-{h[20:32]}"


def session_for(i: int, sessions: int) -> tuple[str, str]:
    """(session_key, session_id) of row ``i`` spread over ``sessions`` sessions."""
    s = i % sessions
    agent = AGENTS[s % len(AGENTS)]
    return f"agent:{agent}:chat-{s:06d}", _uuid_for("sid", s)


def receipt_row(tag: str, i: int, *, sessions: int = 5_000, status: str | None = None) -> dict:
    """Row ``i`` of data set ``tag``: deterministic, distinct idempotency key per (tag, i)."""
    key, sid = session_for(i, sessions)
    status = status or _STATUS_TABLE[(i * 7919) % len(_STATUS_TABLE)]
    scope = SCOPE_FOR.get(status, "flush")
    created = BASE_MS + i * 13
    entries = 2 + i % 200
    failed = status.endswith(("failed", "abandoned", "pending"))
    return {
        "receipt_id": _uuid_for(f"rid-{tag}", i),
        "session_key": key,
        "session_id": sid,
        "turn_id": f"turn-{i}",
        "scope": scope,
        "source_path": f"/data/sessions/{sid}/transcript.jsonl",
        "target_path": f"/data/memory/{key.split(':')[1]}/{scope}/{i}.jsonl",
        "content_hash": hashlib.sha256(f"c{tag}{i}".encode()).hexdigest(),
        "coverage_turn_id": f"turn-{i}",
        "coverage_hash": hashlib.sha256(f"cov{tag}{i}".encode()).hexdigest(),
        "coverage_entry_count": entries,
        "idempotency_key": f"{scope}:{key}:{sid}:{tag}:{i}",
        "status": status,
        "reason": "OSError: [Errno 28] No space left on device" if failed else None,
        "attempt_count": (i % 4) if failed else 0,
        "next_retry_at_ms": (created + 60_000) if status in ("repair_pending",) else None,
        "created_at": created,
        "updated_at": created,
        "schema_version": 1,
    }


def coverage_probe(row: dict) -> dict:
    """The exact coverage lookup's arguments for a stored row (docs/UPSTREAM.md#reads-and-orderings)."""
    return {
        "session_key": row["session_key"],
        "session_id": row["session_id"],
        "scope": row["scope"],
        "status": row["status"],
        "coverage_turn_id": row["coverage_turn_id"],
        "coverage_hash": row["coverage_hash"],
        "coverage_entry_count": row["coverage_entry_count"],
        "limit": 1,
    }


def probe_indexes(ledger_rows: int, count: int, seed: int = 7) -> list[int]:
    """Seeded rows the coverage lookups hit: checkpoint_saved rows spread over the ledger."""
    rng = random.Random(seed)
    out: list[int] = []
    while len(out) < count:
        i = rng.randrange(ledger_rows)
        if receipt_row("seed", i)["status"] == "checkpoint_saved":
            out.append(i)
    return out


class Timer:
    """Per-operation latencies plus the wall time of the whole loop."""

    def __init__(self) -> None:
        self.samples: list[float] = []
        self._t0 = 0.0
        self.wall = 0.0

    def __enter__(self) -> Timer:
        self._t0 = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall = time.perf_counter() - self._t0

    def summary(self, *, unit_count: int | None = None) -> dict[str, Any]:
        n = unit_count if unit_count is not None else len(self.samples)
        return summarize(self.samples, wall=self.wall, count=n)


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    lo = int(k)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def summarize(samples: list[float], *, wall: float, count: int) -> dict[str, Any]:
    out: dict[str, Any] = {
        "count": count,
        "wall_s": round(wall, 4),
        "ops_per_s": round(count / wall, 1) if wall > 0 else None,
    }
    if samples:
        out.update(
            p50_ms=round(percentile(samples, 0.50) * 1000, 3),
            p99_ms=round(percentile(samples, 0.99) * 1000, 3),
            mean_ms=round(statistics.fmean(samples) * 1000, 3),
        )
    return out


def machine_info() -> dict[str, Any]:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_gib = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                mem_gib = round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    return {
        "nproc": os.cpu_count(),
        "memory_gib": mem_gib,
        "cpu": cpu,
        "python": platform.python_version(),
        "loadavg": os.getloadavg(),
    }


def git_commit(tree: Path = ROOT) -> dict[str, Any]:
    """The commit the benchmark ran on, and whether the tree had uncommitted changes."""
    import subprocess

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=tree, capture_output=True, text=True)
        return done.stdout.strip() if done.returncode == 0 else ""

    return {
        "commit": git("rev-parse", "--short", "HEAD") or "unknown",
        "dirty": bool(git("status", "--porcelain", "--untracked-files=no")),
    }


def write_result(name: str, data: dict[str, Any]) -> Path:
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    data = {
        "name": name,
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        **git_commit(),
        **data,
    }
    path = RESULTS_DIR / f"{name}.json"
    path.write_text(json.dumps(data, indent=2, default=str) + "\n")
    return path
