"""Faults, with a real Celery worker where the fault lives in the worker.

1. The workspace read-only, full, or not a directory: ``checkpoint_failed`` receipts whose
   reason is the operating system's own words.
2. The broker down while an operator requeues: the call succeeds, the row waits as
   ``checkpoint_requeued``, and once the broker is back the lost-work sweep re-sends it and
   a real worker finishes it.
3. The database connection dropped under a running web process: the next request is a
   clean JSON error or already succeeds, and the one after that succeeds.
4. A worker SIGKILLed in the middle of a checkpoint (file written, receipt not yet): no
   half row; the work comes back no earlier and no later than the recovery times derived from
   the tasks' limits (the sweep at twice the checkpoint's hard limit, a Redis redelivery just
   after the longest hard limit), and completes once.

The worker fixtures come from ``tests/worker/conftest.py`` (imported, not copied).
"""

# ruff: noqa: F811 - the worker fixtures are imported by name and requested as arguments
from __future__ import annotations

import errno
import os
import sqlite3
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from django.db import connection
from django.test import override_settings

from opensquilla_site.celery import app as celery_app
from opensquilla_site.timeutil import now_ms
from opensquilla_site.tokens import create_api_token
from opensquilla_site.wsgi import application
from receipts_app import checkpoint, ledger, task_limits, tasks
from receipts_app.audit import Actor
from receipts_app.checkpoint import writer as checkpoint_writer
from receipts_app.models import MemoryDurableReceipt, OutboxMessage, ReceiptEvent
from receipts_app.requeue import requeue_receipt, sweep_lost_work
from tests.factories import make_session, make_user
from tests.worker.conftest import (  # noqa: F401 - fixtures, used by name
    BROKER_IS_REDIS,
    BROKER_URL,
    _broker_reachable,
    celery_queue,
    service_marks,
    shared_workspaces,
    start_worker,
    wait_for,
    worker_database_url,
)

# Transactional: a real worker process must see committed rows (roles come from the factories).
TX = pytest.mark.django_db(transaction=True)


def worker_test(fn):
    """``worker`` always, ``redis`` too when the broker is Redis (a skip then fails CI)."""
    for mark in service_marks():
        fn = mark(fn)
    return fn


ELEVEN_MINUTES_MS = 11 * 60 * 1000


def checkpoint_rows(session_key: str) -> list[MemoryDurableReceipt]:
    return list(
        MemoryDurableReceipt.objects.filter(session_key=session_key, scope="checkpoint").order_by(
            "id"
        )
    )


def failed_checkpoint_of(session) -> MemoryDurableReceipt:
    """A ``checkpoint_failed`` row, made the way production makes one: no workspace."""
    with override_settings(OPENSQUILLA_CHECKPOINT_WORKSPACE=None):
        with pytest.raises(RuntimeError, match="not configured"):
            checkpoint.record_memory_checkpoint(session.session_key)
    return MemoryDurableReceipt.objects.get(
        session_key=session.session_key, status="checkpoint_failed"
    )


# --- 1. the workspace read-only, full, or not a directory -----------------------------------


def _mount_tmpfs(target: Path, options: str) -> bool:
    target.mkdir(parents=True, exist_ok=True)
    result = subprocess.run(  # noqa: S603,S607 - fixed argv
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(target)],
        capture_output=True,
        check=False,
    )
    return result.returncode == 0


def _fill(directory: Path) -> None:
    fd = os.open(directory / "filler", os.O_WRONLY | os.O_CREAT)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError as exc:
        assert exc.errno == errno.ENOSPC
    finally:
        os.close(fd)


@pytest.fixture
def small_mounts() -> Iterator[list[Path]]:
    mounted: list[Path] = []
    yield mounted
    for path in mounted:
        subprocess.run(["umount", "-l", str(path)], check=False)  # noqa: S603,S607


def session_dir(workspace: Path, session_key: str) -> Path:
    return workspace / Path(checkpoint.checkpoint_relative_path(session_key, "t")).parent


@worker_test
@TX
def test_unwritable_workspace_leaves_failure_receipts_with_the_real_reason(
    start_worker, shared_workspaces, small_mounts
):
    workspace = shared_workspaces.checkpoint
    healthy, readonly, full, blocked = (
        make_session(f"agent:main:webchat:{name}", messages=2)
        for name in ("healthy", "readonly", "full", "blocked")
    )
    # Each session's checkpoint folder gets its own fault, so one worker shows all of them.
    ro_dir = session_dir(workspace, readonly.session_key)
    full_dir = session_dir(workspace, full.session_key)
    real_mounts = _mount_tmpfs(ro_dir, "ro,size=64k")
    if real_mounts:
        small_mounts.append(ro_dir)
        assert _mount_tmpfs(full_dir, "size=16k")
        small_mounts.append(full_dir)
        _fill(full_dir)
    blocked_dir = session_dir(workspace, blocked.session_key)
    blocked_dir.parent.mkdir(parents=True, exist_ok=True)
    blocked_dir.write_text("a regular file where the session's folder should be")

    start_worker()
    sessions = [healthy, blocked] + ([readonly, full] if real_mounts else [])
    for session in sessions:
        tasks.checkpoint_session.delay(session.session_key)
    wait_for(
        lambda: all(checkpoint_rows(s.session_key) for s in sessions),
        what="a checkpoint receipt for every session",
    )

    def only_row(session) -> MemoryDurableReceipt:
        rows = checkpoint_rows(session.session_key)
        assert len(rows) == 1, rows
        return rows[0]

    assert only_row(healthy).status == "checkpoint_saved"
    expected = {blocked.session_key: "File exists"}
    if real_mounts:
        expected.update(
            {readonly.session_key: "Read-only file system", full.session_key: "No space left"}
        )
    for session_key, words in expected.items():
        row = checkpoint_rows(session_key)[0]
        assert row.status == "checkpoint_failed", session_key
        assert words in row.reason, (session_key, row.reason)
        assert row.source_path is None and row.content_hash is None
        assert row.coverage_entry_count == 2  # what it would have covered is on record
    if not real_mounts:
        pytest.skip("mount is not permitted here: read-only/full covered in-process below")


@pytest.mark.django_db
def test_workspace_under_a_file_or_unset_fails_with_the_real_reason(tmp_path, settings):
    session = make_session("agent:main:webchat:notdir", messages=1)
    plain_file = tmp_path / "plain"
    plain_file.write_text("x")

    with pytest.raises(NotADirectoryError):
        checkpoint.record_memory_checkpoint(session.session_key, workspace_dir=plain_file / "ws")
    settings.OPENSQUILLA_CHECKPOINT_WORKSPACE = None
    with pytest.raises(RuntimeError):
        checkpoint.record_memory_checkpoint(session.session_key, turn_id="second")

    reasons = sorted(r.reason for r in checkpoint_rows(session.session_key))
    assert len(reasons) == 2
    assert any("Not a directory" in r for r in reasons)
    assert any("workspace_dir is not configured" in r for r in reasons)


@pytest.mark.django_db
@pytest.mark.parametrize(
    "code, words", [(errno.ENOSPC, "No space left on device"), (errno.EROFS, "Read-only")]
)
def test_disk_full_or_read_only_during_the_write_is_recorded(code, words, workspace, monkeypatch):
    """The same faults, simulated in-process (works where ``mount`` is not allowed)."""
    session = make_session("agent:main:webchat:enospc", messages=1)

    def refuse(*_args, **_kwargs):
        raise OSError(code, os.strerror(code))

    # The writer's own os module: the atomic replace is where a full or read-only disk bites.
    monkeypatch.setattr(checkpoint_writer.os, "replace", refuse)
    with pytest.raises(OSError):
        checkpoint.record_memory_checkpoint(session.session_key)
    (row,) = checkpoint_rows(session.session_key)
    assert row.status == "checkpoint_failed" and words in row.reason
    assert not [p for p in workspace.rglob("*") if p.is_file()]  # no torn temp file left


# --- 2. the broker down while receipts are written ------------------------------------------


UNREACHABLE_BROKER = "redis://127.0.0.1:1/0"  # nothing listens on port 1


@pytest.fixture
def broker_down():
    """Point this process's Celery producer at a port nothing listens on, then restore."""
    saved = celery_app.conf.broker_url, celery_app.conf.broker_write_url
    saved_retry = celery_app.conf.task_publish_retry

    def reset_pool() -> None:
        celery_app._pool = None  # type: ignore[attr-defined]
        celery_app.amqp._producer_pool = None  # type: ignore[attr-defined]

    def down() -> None:
        celery_app.conf.broker_url = UNREACHABLE_BROKER
        celery_app.conf.broker_write_url = UNREACHABLE_BROKER
        celery_app.conf.task_publish_retry = False
        reset_pool()

    def up() -> None:
        celery_app.conf.broker_url, celery_app.conf.broker_write_url = saved
        celery_app.conf.task_publish_retry = saved_retry
        reset_pool()

    down()
    yield up
    up()


@worker_test
@TX
def test_broker_down_loses_nothing_and_the_sweep_sends_the_work_when_it_is_back(
    broker_down, start_worker, shared_workspaces, client, settings
):
    session = make_session("agent:main:webchat:broker", messages=2)
    failed = failed_checkpoint_of(session)
    user = make_user("broker-op", "operator")
    _token, plaintext = create_api_token(user=user, name="broker", scope="operate")
    auth = {"Authorization": f"Bearer {plaintext}"}

    # The broker is down: the API still answers, the row is requeued, the send is lost.
    response = client.post(
        f"/api/v1/receipts/{failed.receipt_id}/requeue",
        {"reason": "broker test"},
        content_type="application/json",
        headers=auth,
    )
    assert response.status_code == 200, response.content
    assert response.json()["outcome"] == "requeued"
    now_requeued = ledger.get_memory_durable_receipt(failed.receipt_id)
    assert now_requeued.status == "checkpoint_requeued"
    trigger = client.post(
        f"/api/v1/sessions/{session.session_key}/checkpoints",
        {},
        content_type="application/json",
        headers=auth,
    )
    assert trigger.status_code == 202  # accepted: its message waits in the outbox, unsent
    assert OutboxMessage.objects.get(task_id=trigger.json()["task_id"]).sent_at is None
    rows_before = MemoryDurableReceipt.objects.count()

    # The broker is back and a worker runs. Ten minutes pass (the row is aged, never slept).
    broker_down()
    start_worker()
    MemoryDurableReceipt.objects.filter(pk=now_requeued.pk).update(
        updated_at=now_requeued.updated_at - ELEVEN_MINUTES_MS
    )
    requeue_task = OutboxMessage.objects.get(kwargs__requeue_of=failed.receipt_id).task_id
    swept = sweep_lost_work(now_ms())
    # Both messages are sent again by the outbox, once each: the requeue's ("requeued") and
    # "checkpoint now"'s; the state sweep leaves the requeued row to the outbox.
    assert sorted(swept["outbox_resent"]) == sorted([trigger.json()["task_id"], requeue_task])
    assert swept["checkpoints_resent"] == []

    recovered = wait_for(
        lambda: (
            (r := ledger.get_memory_durable_receipt(failed.receipt_id)).status
            == "checkpoint_recovered"
            and r
        ),
        what="the swept checkpoint to be recovered by the worker",
    )
    saved = ledger.get_memory_durable_receipt(recovered.resolved_by_receipt_id)
    assert saved.status == "checkpoint_saved" and saved.session_id == session.session_id
    assert (shared_workspaces.checkpoint / saved.source_path).is_file()
    assert MemoryDurableReceipt.objects.count() == rows_before + 1  # only the saved row is new
    actions = set(
        ReceiptEvent.objects.filter(receipt_id=failed.receipt_id).values_list("action", flat=True)
    )
    assert "requeue" in actions
    wait_for(lambda: not OutboxMessage.objects.exists(), what="every accepted task to end")
    # A second sweep finds nothing left to send.
    assert sweep_lost_work(now_ms() + ELEVEN_MINUTES_MS)["checkpoints_resent"] == []


# --- 3. the database connection dropped under a running web process --------------------------


def _kill_backend() -> None:
    """What a database restart does to a live connection."""
    if connection.vendor == "postgresql":
        import psycopg

        pid = connection.connection.info.backend_pid
        with psycopg.connect(worker_database_url(), autocommit=True) as other:
            other.execute("SELECT pg_terminate_backend(%s)", [pid])
    else:
        connection.connection.close()  # behind Django's back, as a vanished server would


@pytest.mark.parametrize(
    "persistent",
    [
        pytest.param(False, id="conn_max_age=0"),
        # SQLite has no server to lose, and Django treats a SQLite connection as always usable.
        pytest.param(True, id="persistent", marks=pytest.mark.postgres),
    ],
)
@TX
def test_a_dropped_database_connection_is_a_clean_error_then_recovers(persistent, monkeypatch):
    if persistent and connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL: set DATABASE_URL=postgres://...")
    user = make_user("db-reader", "viewer")
    _token, plaintext = create_api_token(user=user, name="db", scope="read")
    make_session("agent:main:webchat:db", messages=1)
    # Persistent connections are where a restart bites: the process keeps a dead socket.
    monkeypatch.setitem(connection.settings_dict, "CONN_MAX_AGE", 600 if persistent else 0)
    # A connection takes its lifetime when it opens (kept by default now): reopen under this one.
    connection.close()
    web = httpx.Client(
        transport=httpx.WSGITransport(app=application),
        base_url="http://testserver",
        headers={"Authorization": f"Bearer {plaintext}"},
    )
    first = web.get("/api/v1/sessions")
    assert first.status_code == 200 and first.json()["items"]

    connection.ensure_connection()
    _kill_backend()

    second = web.get("/api/v1/sessions")
    assert "Traceback" not in second.text
    assert second.headers["content-type"].startswith("application/json")
    if second.status_code != 200:
        # Measured on PostgreSQL with a persistent connection: one 500 ``internal_error``
        # (no trace), then recovery. CONN_HEALTH_CHECKS would turn it into a 200.
        assert second.status_code in (500, 503), second.text
        assert second.json()["code"] in ("internal_error", "database_unavailable")
    third = web.get("/api/v1/sessions")
    assert third.status_code == 200, third.text
    assert third.json()["items"][0]["session_key"] == "agent:main:webchat:db"
    connection.close()


# --- 4. SIGKILL mid-checkpoint ----------------------------------------------------------------


class LedgerWriteLock:
    """Hold the receipts table against writes (reads still pass), from another connection."""

    def __init__(self) -> None:
        self._release = threading.Event()
        self._held = threading.Event()
        self._thread = threading.Thread(target=self._hold, daemon=True)
        self.error: BaseException | None = None

    def _hold(self) -> None:
        try:
            url = worker_database_url()
            if url.startswith("sqlite:///"):
                conn = sqlite3.connect(url[len("sqlite:///") :], timeout=30, isolation_level=None)
                conn.execute("BEGIN IMMEDIATE")  # the write lock; WAL readers continue
                self._held.set()
                self._release.wait(120)
                conn.execute("ROLLBACK")
                conn.close()
                return
            import psycopg

            with psycopg.connect(url.replace("postgres://", "postgresql://", 1)) as conn:
                conn.execute(f"LOCK TABLE {MemoryDurableReceipt._meta.db_table} IN SHARE MODE")
                self._held.set()
                self._release.wait(120)
                conn.rollback()
        except BaseException as exc:  # noqa: BLE001 - surfaced by the test
            self.error = exc
            self._held.set()

    def __enter__(self) -> LedgerWriteLock:
        self._thread.start()
        self._held.wait(30)
        if self.error:
            raise self.error
        return self

    def __exit__(self, *exc: object) -> None:
        self._release.set()
        self._thread.join(30)


def _redeliver_after(queue: str, age_s: float) -> int:
    """Age this test's unacknowledged Redis messages to ``age_s`` seconds since delivery, then
    run kombu's own redelivery scan with the broker options the product configures. Returns
    how many of them it put back on the queue (none while they are younger than the
    visibility timeout)."""
    from kombu.utils.json import loads

    with celery_app.connection_for_write() as conn:
        channel = conn.default_channel
        client = channel.client
        ours = [
            tag
            for tag, raw in client.hgetall(channel.unacked_key).items()
            if loads(raw)[2] == queue  # another run's in-flight work is not ours to touch
        ]
        for tag in ours:
            client.zadd(channel.unacked_index_key, {tag: time.time() - age_s})
        channel.qos.restore_visible(num=1000, interval=1)
        still_unacked = client.hgetall(channel.unacked_key)
        return sum(1 for tag in ours if tag not in still_unacked)


@worker_test
@TX
def test_a_worker_killed_mid_checkpoint_leaves_no_half_row_and_the_work_completes(
    start_worker, shared_workspaces, celery_queue
):
    session = make_session(f"agent:main:webchat:kill-{uuid.uuid4().hex[:6]}", messages=3)
    failed = failed_checkpoint_of(session)
    result = requeue_receipt(
        receipt_id=failed.receipt_id, actor=Actor("ops", "console"), reason="kill test"
    )
    assert str(result.outcome) == "requeued"  # its message waits for a worker

    checkpoint_dir = shared_workspaces.checkpoint / "memory" / ".checkpoints"
    with LedgerWriteLock():
        first = start_worker()
        # The JSONL is written before the receipt: once it exists, the worker is blocked on
        # the receipt write we are holding. Kill it there.
        wait_for(
            lambda: list(checkpoint_dir.rglob("*.jsonl")),
            what="the worker to write the checkpoint file",
        )
        first.kill_hard()
    assert first.process.returncode is not None

    # Nothing half-done: the requeued row still waits, and no saved row exists.
    assert ledger.get_memory_durable_receipt(failed.receipt_id).status == "checkpoint_requeued"
    assert [r.status for r in checkpoint_rows(session.session_key)] == ["checkpoint_requeued"]

    # Recovery is timed from the tasks' limits (receipts_app/task_limits.py), not fixed: the
    # sweep re-sends a lost checkpoint once it is twice the task's hard limit old, and Redis
    # redelivers just after the longest hard limit (never while a task may still be running).
    assert task_limits.LOST_CHECKPOINT_AFTER_SECONDS <= 2 * task_limits.CHECKPOINT.hard
    redelivered = 0
    if BROKER_IS_REDIS:
        visibility = task_limits.VISIBILITY_TIMEOUT_SECONDS
        assert task_limits.LONGEST_HARD_SECONDS < visibility < 2 * task_limits.LONGEST_HARD_SECONDS
        assert _redeliver_after(celery_queue, visibility - 5) == 0  # not before the timeout
        redelivered = _redeliver_after(celery_queue, visibility + 1)
        assert redelivered == 1  # acks_late: the killed worker's message was never acked
    start_worker()
    if not redelivered:
        # The embedded broker hid the message when it was fetched: the outbox, which still
        # holds it (its task never ended), sends it again once it is older than the task's
        # hard limit + the margin (aged, not slept); the state sweep leaves the row to it, so
        # the work is one message.
        lost_after_ms = (task_limits.CHECKPOINT.hard + task_limits.MARGIN_SECONDS) * 1000
        kept = OutboxMessage.objects.filter(kwargs__requeue_of=failed.receipt_id)
        (task_id,) = kept.values_list("task_id", flat=True)
        kept.update(sent_at=now_ms() - lost_after_ms + 5_000)
        MemoryDurableReceipt.objects.filter(receipt_id=failed.receipt_id).update(
            updated_at=now_ms() - task_limits.LOST_CHECKPOINT_AFTER_SECONDS * 1000
        )
        swept = sweep_lost_work(now_ms())
        assert swept["outbox_resent"] == swept["checkpoints_resent"] == []  # not before its time
        kept.update(sent_at=now_ms() - lost_after_ms)
        swept = sweep_lost_work(now_ms())
        assert (swept["outbox_resent"], swept["checkpoints_resent"]) == ([task_id], [])

    wait_for(
        lambda: (
            ledger.get_memory_durable_receipt(failed.receipt_id).status == "checkpoint_recovered"
        ),
        what="the interrupted checkpoint to complete",
    )
    rows = checkpoint_rows(session.session_key)
    assert sorted(r.status for r in rows) == ["checkpoint_recovered", "checkpoint_saved"]
    saved = next(r for r in rows if r.status == "checkpoint_saved")
    assert saved.coverage_entry_count == 3
    files = list(checkpoint_dir.rglob("*.jsonl"))
    assert [f.relative_to(shared_workspaces.checkpoint).as_posix() for f in files] == [
        saved.source_path
    ]
