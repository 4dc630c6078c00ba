"""Nothing done to a gateway unasked, with real processes (docs/MIRROR.md, "Nothing done to a
gateway unasked"; docs/RELIABILITY.md).

Gateway ``b`` is the real OpenSquilla 0.3.0 ledger of ``tests/golden`` (due ``repair_pending``
rows, raw-fallback archives in its memory workspace, saved checkpoints in its checkpoint
workspace), followed by its own edge set (``Procfile.edge`` under honcho: the follower of b's
``sessions.db`` and a worker for b's queue with b's workspaces). Centrally run beat, with every
schedule it has shortened through the environment, and a central worker. While b repairs its own
rows, several ticks of every schedule leave every byte of b's workspaces and ``sessions.db`` as
they were, and b's rows here unchanged; once an admin hands b's repairs to this console, b's
worker repairs (a sidecar beside an archive, an attempt recorded).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from opensquilla_site.acting import Actor
from receipts_app import handover
from receipts_app.models import MemoryDurableReceipt, ReceiptEvent
from receipts_app.statuses import REPAIR_QUEUE_STATUSES
from tests.worker.celery_app import TEST_QUEUE_ENV
from tests.worker.conftest import (
    BROKER_URL,
    REPO_ROOT,
    service_marks,
    wait_for,
    worker_database_url,
)
from tests.worker.test_gateway_routing import EdgeSet

pytestmark = [*service_marks(), pytest.mark.django_db(transaction=True)]

# Every schedule beat has, shortened so each ticks several times within a minute.
SHORT_SCHEDULES = {
    "OPENSQUILLA_REPAIR_INTERVAL_SECONDS": "1",
    "OPENSQUILLA_SCRUB_TICK_SECONDS": "2",
    "OPENSQUILLA_SCRUB_CYCLE_SECONDS": "2",
    "OPENSQUILLA_SCRUB_FULL_CYCLE_SECONDS": "4",
    "OPENSQUILLA_SCRUB_READ_BYTES_PER_SECOND": "0",
    "OPENSQUILLA_GATEWAY_LINK_INTERVAL_SECONDS": "2",
    "OPENSQUILLA_ALERT_INTERVAL_SECONDS": "2",
    "OPENSQUILLA_AGGREGATE_FOLD_SECONDS": "1",
    "OPENSQUILLA_TIME_AT_RISK_SECONDS": "2",
    "OPENSQUILLA_BROKER_PRUNE_SECONDS": "2",
    "OPENSQUILLA_HEARTBEAT_INTERVAL_SECONDS": "1",
}
# Ticks of each scheduled task seen to succeed before the workspaces are compared again.
TICKS = 12
CENTRAL_TASKS = (
    "receipts_app.tasks.repair_tick",
    "receipts_app.tasks.scrub_tick",
    "receipts_app.tasks.fold_ledger_aggregates",
    "operations_app.tasks.evaluate_alerts",
    "operations_app.tasks.track_time_at_risk",
    "operations_app.tasks.read_gateway_links",
)
ADMIN = Actor("ada", "console")


def _digests(*roots: Path) -> dict[str, str]:
    """sha256 of every file under ``roots`` (hidden ones too), by path. A WAL database's
    ``-shm`` file is left out: it is SQLite's shared-memory index, which every reader, read-only
    ones included, maps and updates; the database and its ``-wal`` are compared."""
    out = {}
    for root in roots:
        for path in sorted(root.rglob("*")):
            if path.is_file() and not path.name.endswith("-shm"):
                out[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def _rows_of_b() -> list[dict[str, Any]]:
    return list(MemoryDurableReceipt._base_manager.filter(gateway_id="b").order_by("id").values())


def _succeeded(log: str, task: str) -> int:
    return len(re.findall(rf"Task {re.escape(task)}\[[^\]]+\] succeeded", log))


class Beat:
    """``celery beat`` with this test's app (its messages go to this test's queues)."""

    def __init__(self, root: Path, env: dict[str, str]) -> None:
        root.mkdir(parents=True, exist_ok=True)
        self.log_path = root / "beat.log"
        full = {**os.environ, **env}
        full.pop("CELERY_TASK_ALWAYS_EAGER", None)
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(  # noqa: S603 - our own venv, fixed argv
                [
                    str(Path(sys.executable).parent / "celery"),
                    "-A",
                    "tests.worker.celery_app",
                    "beat",
                    "--loglevel",
                    "INFO",
                    "-s",
                    str(root / "celerybeat-schedule"),
                ],
                cwd=REPO_ROOT,
                env=full,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=30)


@pytest.fixture
def processes() -> Iterator[list[Any]]:
    started: list[Any] = []
    yield started
    for process in reversed(started):
        process.stop()


def _gateway_b(golden_dir: Path, tmp_path: Path) -> tuple[Path, Path]:
    """b's host: a copy of the golden 0.3.0 ledger and its workspace."""
    golden = golden_dir / "opensquilla-0.3.0"
    state = tmp_path / "host-b" / "state"
    state.mkdir(parents=True)
    for part in golden.glob("sessions.db*"):
        shutil.copyfile(part, state / part.name)
    workspace = tmp_path / "host-b" / "workspace"
    shutil.copytree(golden / "workspace", workspace)
    return state / "sessions.db", workspace


def test_the_edge_sets_running_unasked_leave_bs_workspace_alone_until_its_repairs_are_handed_over(
    golden_dir, celery_queue, start_worker, shared_workspaces, tmp_path, settings, processes
):
    prefix = f"{celery_queue}.gateway."
    settings.OPENSQUILLA_GATEWAY_QUEUE_PREFIX = prefix
    db_b, workspace_b = _gateway_b(golden_dir, tmp_path)
    raw = workspace_b / "memory" / ".raw_fallbacks"
    assert len(list(raw.glob("*.md"))) == 5
    assert list((workspace_b / "memory" / ".checkpoints").rglob("*.jsonl"))
    common = {
        **SHORT_SCHEDULES,
        "DATABASE_URL": worker_database_url(),
        "CELERY_BROKER_URL": BROKER_URL,
        "OPENSQUILLA_ENV_FILE": "",
        "OPENSQUILLA_GATEWAY_QUEUE_PREFIX": prefix,
        "OPENSQUILLA_FLUSH_PROVIDER": "none",
        "CELERY_SKIP_CHECKS": "1",
        "PYTHONUNBUFFERED": "1",
    }

    before = _digests(workspace_b, db_b.parent)
    # b's host: its follower and its worker, with b's own workspaces (memory and checkpoints).
    edge = EdgeSet(
        tmp_path / "host-b" / "edge",
        {
            **common,
            "OPENSQUILLA_VAR_DIR": str(tmp_path / "host-b" / "var"),
            "OPENSQUILLA_GATEWAY": "b",
            "OPENSQUILLA_SOURCES": f"b={db_b}",
            "OPENSQUILLA_CHECKPOINT_WORKSPACE": str(workspace_b),
            "OPENSQUILLA_MEMORY_WORKSPACE": str(workspace_b),
            "WORKER_CONCURRENCY": "1",
        },
    )
    processes.append(edge)

    def followed() -> bool:
        edge.check_running()
        due = MemoryDurableReceipt._base_manager.filter(
            gateway_id="b", status__in=REPAIR_QUEUE_STATUSES, next_retry_at_ms__isnull=True
        )
        return due.count() == 2

    wait_for(followed, what="b's ledger followed by b's edge follower, its 2 due repairs here")

    wait_for(
        lambda: edge.consumes(f"{prefix}b"), what="b's edge worker to say it consumes b's queue"
    )

    # Centrally: beat and a worker for the central tasks, with local's own workspaces.
    central_env = {**common, TEST_QUEUE_ENV: celery_queue}
    central = start_worker(**central_env)
    processes.append(central)
    beat = Beat(tmp_path / "central", {**central_env, "OPENSQUILLA_VAR_DIR": str(tmp_path)})
    processes.append(beat)
    # b's rows as the follower brought them (its 2 due repairs not yet tried: see followed()).
    rows = _rows_of_b()
    last_event = ReceiptEvent.objects.order_by("-id").values_list("id", flat=True).first() or 0

    def ticked(n: int) -> bool:
        edge.check_running()
        assert beat.process.poll() is None, beat.log()
        log = central.log()
        central_ok = all(_succeeded(log, task) >= n for task in CENTRAL_TASKS)
        return central_ok and _succeeded(edge.log(), "receipts_app.tasks.scrub_checkpoints") >= n

    wait_for(lambda: ticked(TICKS), what=f"{TICKS} ticks of every schedule", timeout=90)

    # Not one byte written, no file added, in b's workspaces or its sessions.db; b's rows and
    # their history here as they were (the scrub read b's checkpoints and found them whole).
    assert _digests(workspace_b, db_b.parent) == before
    assert _rows_of_b() == rows
    events = ReceiptEvent.objects.filter(gateway_id="b", id__gt=last_event)
    assert list(events.values_list("action", "to_status")) == []
    assert "receipts_app.tasks.repair_tick[" not in edge.log()  # none reached b's worker

    # An admin hands b's repairs to this console: the next central tick queues b's own pass to
    # b's worker, which repairs b's due rows in b's workspace.
    handover.set_repairs("b", "console", actor=ADMIN, reason="its repair loop is off")

    due = {r["receipt_id"]: r for r in rows if r["status"] in REPAIR_QUEUE_STATUSES}
    due = {k: r for k, r in due.items() if r["next_retry_at_ms"] is None}

    def repaired() -> bool:
        edge.check_running()
        now = MemoryDurableReceipt._base_manager.filter(receipt_id__in=due)
        # A failed attempt backs the row off (its first: attempt 1, due again in 5 minutes).
        return all(r.next_retry_at_ms is not None and r.reason for r in now)

    wait_for(repaired, what="b's worker to repair b's due rows once handed over", timeout=60)
    assert _succeeded(edge.log(), "receipts_app.tasks.repair_tick") >= 1
    # Each archive it tried carries the outcome beside it (the model answered nothing usable).
    sidecars = {p.name for p in (raw / ".repair_receipts").glob("*.md.json")}
    assert {Path(str(r["target_path"])).name + ".json" for r in due.values()} <= sidecars
