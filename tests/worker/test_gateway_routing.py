"""Work runs where its gateway lives: two real OpenSquilla 0.3.0 gateways, one real worker.

Both ``sessions.db`` files are written by PyPI ``opensquilla==0.3.0``'s ``SessionStorage`` (the
reference venv, tests/mirror/reference_writer.py) with the same plan, so their session key
``agent:main:main`` and every idempotency key overlap; each is imported under its own gateway
name (``a`` and ``b``) into this test's database. A real Celery worker is started the way
``Procfile.edge`` starts one on gateway b's host: consuming only b's queue, with b's checkpoint
workspace and ``OPENSQUILLA_GATEWAY=b``. A requeue of b's ``checkpoint_failed`` through the API
is run by that worker and its checkpoint file lands in b's workspace only; a requeue of a's is
accepted with the warning that no live worker consumes a's queue, and nothing runs it.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from receipts_app.importer import import_opensquilla
from receipts_app.models import MemoryDurableReceipt, OutboxMessage
from sessions_app.gateways import gateway_queue, using_gateway
from tests.api.conftest import fast_password_hashing, operator  # noqa: F401
from tests.conftest import require_postgres  # noqa: F401
from tests.mirror.test_reference_writer import WRITER, ref_python  # noqa: F401
from tests.worker.conftest import service_marks, wait_for

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
    start_worker,
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
    for name in ("a", "b"):
        db = _write_gateway(ref_python, tmp_path / f"gateway-{name}" / "sessions.db")
        report = import_opensquilla(db_path=db, workspace=None, gateway=name)
        assert report.sessions.created == 1 and report.receipts.created == RECEIPTS
    failed_a, failed_b = _newest_failed("a"), _newest_failed("b")
    assert failed_a.session_key == failed_b.session_key == KEY  # the keys overlap

    # Gateway b's edge worker: b's queue only, b's workspace, OPENSQUILLA_GATEWAY=b.
    worker = start_worker(
        queue=f"{prefix}b",
        OPENSQUILLA_GATEWAY="b",
        OPENSQUILLA_GATEWAY_QUEUE_PREFIX=prefix,
        OPENSQUILLA_CHECKPOINT_WORKSPACE=str(workspace_b),
        OPENSQUILLA_MEMORY_WORKSPACE=str(workspace_b),
    )

    response = operator.post(f"/receipts/{failed_b.receipt_id}/requeue", {"reason": "retry b"})
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["outcome"] == "requeued" and body["status"] == "checkpoint_requeued"
    assert body["warning"] is None  # b's worker is live on b's queue
    assert OutboxMessage.objects.get(task_id=body["task_id"]).queue == gateway_queue("b")

    def recovered() -> MemoryDurableReceipt | None:
        row = MemoryDurableReceipt.objects.get(receipt_id=failed_b.receipt_id)
        if row.status == "checkpoint_failed" and row.reason != failed_b.reason:
            pytest.fail(f"the retake failed: {row.reason}\n{worker.log()}")
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
    assert "checkpoint_session" in worker.log()

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
