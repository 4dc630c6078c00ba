"""Work runs where its gateway lives: two real OpenSquilla 0.3.0 gateways, one real worker.

Both ``sessions.db`` files are written by PyPI ``opensquilla==0.3.0``'s ``SessionStorage`` (the
reference venv, tests/mirror/reference_writer.py) with the same plan, so their session key
``agent:main:main`` and every idempotency key overlap; each is imported under its own gateway
name into this test's database: ``a`` by a one-shot import, ``b`` by the edge process set of b's
host, the shipped ``Procfile.edge`` under honcho (its mirror follows b's ``sessions.db``; its
worker consumes only b's queue, with b's checkpoint workspace and ``OPENSQUILLA_GATEWAY=b``).
A requeue of b's ``checkpoint_failed`` through the API is run by that worker and its checkpoint
file lands in b's workspace only; b's repair tick, queued by the central tick, runs there too;
a requeue of a's is accepted with the warning that no live worker consumes a's queue, and
nothing runs it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from operations_app.liveness import liveness_report
from operations_app.models import Heartbeat
from receipts_app import repair
from receipts_app.importer import import_opensquilla
from receipts_app.models import MemoryDurableReceipt, OutboxMessage
from sessions_app.gateways import REPAIRS_CONSOLE, Gateway, gateway_queue, using_gateway
from tests.api.conftest import fast_password_hashing, operator  # noqa: F401
from tests.conftest import require_postgres  # noqa: F401
from tests.mirror.test_reference_writer import WRITER, ref_python  # noqa: F401
from tests.worker.conftest import (
    BROKER_URL,
    REPO_ROOT,
    service_marks,
    wait_for,
    worker_database_url,
)

pytestmark = [
    *service_marks(),
    pytest.mark.reference,
    pytest.mark.postgres,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("require_postgres"),
]

KEY = "agent:main:main"
RECEIPTS = 3


def _write_gateway(python: Path, db: Path) -> Path:
    """A sessions.db written by the real 0.3.0 storage: one session, RECEIPTS failed checkpoints."""
    db.parent.mkdir(parents=True)
    done = subprocess.run(  # noqa: S603 - our own venv, fixed argv
        [
            str(python),
            str(WRITER),
            str(db),
            "load",
            "--count",
            str(RECEIPTS),
            "--status",
            "checkpoint_failed",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.splitlines()[-1])["receipts"] == RECEIPTS
    return db


class EdgeSet:
    """``Procfile.edge`` under honcho, as ``make run-edge`` starts it on a gateway's host."""

    def __init__(self, root: Path, env: dict[str, str]) -> None:
        root.mkdir(parents=True, exist_ok=True)
        self.log_path = root / "edge.log"
        bin_dir = Path(sys.executable).parent
        procfile = root / "Procfile.edge"
        procfile.write_text(
            (REPO_ROOT / "Procfile.edge").read_text().replace(".venv/bin/", f"{bin_dir}/"),
            encoding="utf-8",
        )
        no_env_file = root / "empty.env"
        no_env_file.write_text("", encoding="utf-8")
        full = dict(os.environ)
        full.pop("CELERY_TASK_ALWAYS_EAGER", None)
        full.update(env)
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(  # noqa: S603 - our own venv's honcho
                [
                    str(bin_dir / "honcho"),
                    "start",
                    "-f",
                    str(procfile),
                    "-d",
                    str(REPO_ROOT),
                    "-e",
                    str(no_env_file),
                ],
                cwd=REPO_ROOT,
                env=full,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def consumes(self, queue: str) -> bool:
        """Whether a running worker says it consumes ``queue`` (its heartbeat), the edge set
        still up."""
        self.check_running()
        return any(
            queue in (details or {}).get("queues", [])
            for details in Heartbeat.objects.filter(kind="worker", state="running").values_list(
                "details", flat=True
            )
        )

    def check_running(self) -> None:
        if self.process.poll() is not None:
            pytest.fail(
                f"the edge process set exited with {self.process.returncode}:\n{self.log()}"
            )

    def stop(self) -> None:
        if self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGINT)
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=30)


@pytest.fixture
def edge_set(tmp_path) -> Iterator[list[EdgeSet]]:
    started: list[EdgeSet] = []
    yield started
    for edge in started:
        edge.stop()


def _newest_failed(gateway: str) -> MemoryDurableReceipt:
    with using_gateway(gateway):
        return MemoryDurableReceipt.objects.filter(
            session_key=KEY, status="checkpoint_failed"
        ).latest("created_at", "id")


def _files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file())


def test_a_requeue_of_gateway_bs_checkpoint_runs_on_bs_worker_into_bs_workspace(
    ref_python,  # noqa: F811
    operator,  # noqa: F811
    edge_set,
    celery_queue,
    shared_workspaces,
    tmp_path,
    settings,
):
    # A queue prefix of this test's own, so no other worker on the broker takes b's work.
    prefix = f"{celery_queue}.gateway."
    settings.OPENSQUILLA_GATEWAY_QUEUE_PREFIX = prefix
    workspace_a, workspace_b = tmp_path / "host-a-workspace", tmp_path / "host-b-workspace"
    workspace_a.mkdir()
    workspace_b.mkdir()
    db_a = _write_gateway(ref_python, tmp_path / "gateway-a" / "sessions.db")
    db_b = _write_gateway(ref_python, tmp_path / "gateway-b" / "sessions.db")
    report = import_opensquilla(db_path=db_a, workspace=None, gateway="a")
    assert report.sessions.created == 1 and report.receipts.created == RECEIPTS

    # Gateway b's host: its mirror follows b's sessions.db (rows only) and its worker consumes
    # b's queue only, with b's workspace; both against this test's database and broker.
    edge = EdgeSet(
        tmp_path / "host-b",
        {
            "DATABASE_URL": worker_database_url(),
            "CELERY_BROKER_URL": BROKER_URL,
            "OPENSQUILLA_ENV_FILE": "",
            "OPENSQUILLA_VAR_DIR": str(tmp_path / "host-b" / "var"),
            "OPENSQUILLA_GATEWAY": "b",
            "OPENSQUILLA_GATEWAY_QUEUE_PREFIX": prefix,
            "OPENSQUILLA_SOURCES": f"b={db_b}",
            "OPENSQUILLA_CHECKPOINT_WORKSPACE": str(workspace_b),
            "OPENSQUILLA_MEMORY_WORKSPACE": str(workspace_b),
            "OPENSQUILLA_FLUSH_PROVIDER": "none",
            "WORKER_CONCURRENCY": "1",
            "CELERY_SKIP_CHECKS": "1",
            "PYTHONUNBUFFERED": "1",
        },
    )
    edge_set.append(edge)

    def followed() -> bool:
        edge.check_running()
        with using_gateway("b"):
            return MemoryDurableReceipt.objects.filter(status="checkpoint_failed").count() == (
                RECEIPTS
            )

    wait_for(followed, what="b's rows followed by b's edge mirror")

    wait_for(
        lambda: edge.consumes(f"{prefix}b"), what="b's edge worker to say it consumes b's queue"
    )

    # The central liveness page lists b's edge processes, each with its gateway, host, state
    # and restarts (from its own heartbeat: b's host has its own supervisor status files).
    def edge_processes() -> dict[str, object]:
        rows = {p.kind: p for p in liveness_report().processes if p.gateway == "b"}
        return rows if {"worker", "mirror"} <= set(rows) else {}

    rows = wait_for(edge_processes, what="b's edge worker and follower on the liveness page")
    for kind, row in rows.items():
        assert (row.name, row.state, row.restarts) == (kind, "running", 0), row
        assert row.host and row.process.endswith(f"@{row.host}")
    failed_a, failed_b = _newest_failed("a"), _newest_failed("b")
    assert failed_a.session_key == failed_b.session_key == KEY  # the keys overlap

    response = operator.post(f"/receipts/{failed_b.receipt_id}/requeue", {"reason": "retry b"})
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["outcome"] == "requeued" and body["status"] == "checkpoint_requeued"
    assert body["warning"] is None  # b's worker is live on b's queue
    assert OutboxMessage.objects.get(task_id=body["task_id"]).queue == gateway_queue("b")

    def recovered() -> MemoryDurableReceipt | None:
        row = MemoryDurableReceipt.objects.get(receipt_id=failed_b.receipt_id)
        if row.status == "checkpoint_failed" and row.reason != failed_b.reason:
            pytest.fail(f"the retake failed: {row.reason}\n{edge.log()}")
        return row if row.status == "checkpoint_recovered" else None

    row = wait_for(recovered, what="b's requeued checkpoint recovered by b's worker")
    saved = MemoryDurableReceipt.objects.get(receipt_id=row.resolved_by_receipt_id)
    assert (saved.gateway_id, saved.status, saved.session_id) == (
        "b",
        "checkpoint_saved",
        failed_b.session_id,
    )
    written = workspace_b / str(saved.source_path)
    assert written.is_file()
    assert len(written.read_text(encoding="utf-8").splitlines()) == RECEIPTS
    assert _files(workspace_b) == [written]
    # Nothing in a's workspace, nor in the central workspace the test process is configured with.
    assert _files(workspace_a) == [] and _files(shared_workspaces.checkpoint) == []
    assert "receipts_app.tasks.checkpoint_session" in edge.log()

    # Nothing unasked: no repair tick goes to a gateway that repairs its own rows. Once their
    # repairs are handed to this console, the central tick queues b's own repair tick to b's
    # live worker, and not a's (none runs).
    assert repair.queue_gateway_ticks() == []
    Gateway.objects.filter(name__in=["a", "b"]).update(repairs=REPAIRS_CONSOLE)
    assert repair.queue_gateway_ticks() == ["b"]
    wait_for(
        lambda: not OutboxMessage.objects.filter(task="repair_tick").exists(),
        what="b's repair tick run by b's worker",
    )
    assert "receipts_app.tasks.repair_tick" in edge.log()

    # Gateway a has no worker: its requeue is accepted, and the operator is told it waits.
    response = operator.post(f"/receipts/{failed_a.receipt_id}/requeue", {"reason": "retry a"})
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["outcome"] == "requeued"
    assert body["warning"] == (
        f"gateway a has no live worker on queue {prefix}a: the work will wait until one starts"
    )
    message = OutboxMessage.objects.get(task_id=body["task_id"])
    assert message.queue == f"{prefix}a"
    # b's worker never takes a's work: a's row stays requeued, and a's workspace stays empty.
    assert MemoryDurableReceipt.objects.get(receipt_id=failed_a.receipt_id).status == (
        "checkpoint_requeued"
    )
    assert _files(workspace_a) == []
    assert _files(workspace_b) == [written]
