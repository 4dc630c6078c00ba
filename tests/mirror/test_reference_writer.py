"""The follower (``import_opensquilla --follow`` in its own process) against a real writer:
PyPI ``opensquilla==0.3.0``'s ``SessionStorage`` in the reference venv (``bench/reference_venv.sh``).

Skips with the reason where the venv is missing; CI builds it and may not skip (``reference``
is a service marker in tests/conftest.py).
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from receipts_app.mirror.models import MirroredSession, MirrorSource
from receipts_app.models import MemoryDurableReceipt, ReceiptEvent
from sessions_app.models import Session, TranscriptEntry
from tests.worker.conftest import worker_database_url

pytestmark = [pytest.mark.reference, pytest.mark.django_db(transaction=True)]

ROOT = Path(__file__).resolve().parents[2]
REF_PYTHON = ROOT / "var" / "bench" / "ref-venv" / "bin" / "python"
WRITER = Path(__file__).with_name("reference_writer.py")
CONVERGE_SECONDS = 180


@pytest.fixture(scope="module")
def ref_python() -> Path:
    if not REF_PYTHON.exists():
        pytest.skip(f"no reference venv at {REF_PYTHON}: run bash bench/reference_venv.sh")
    probe = subprocess.run(  # noqa: S603 - our own venv
        [str(REF_PYTHON), "-c", "import opensquilla.session.storage"], capture_output=True
    )
    if probe.returncode != 0:
        pytest.skip(f"{REF_PYTHON} cannot import opensquilla 0.3.0: {probe.stderr[-300:]!r}")
    return REF_PYTHON


def write(ref_python: Path, db: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(  # noqa: S603 - fixed argv
        [str(ref_python), str(WRITER), str(db), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.fixture
def start_follower(tmp_path) -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    """Start ``import_opensquilla DB --follow`` (``gateway``: under that gateway's name);
    every follower still running at the end is stopped."""
    started: list[subprocess.Popen[bytes]] = []
    env = {
        **os.environ,
        "DATABASE_URL": worker_database_url(),
        "OPENSQUILLA_CHECKPOINT_WORKSPACE": str(tmp_path / "ours"),
    }

    def start(db: Path, gateway: str | None = None) -> subprocess.Popen[bytes]:
        named = ["--gateway", gateway] if gateway else []
        log = (tmp_path / f"follower-{gateway or 'local'}-{len(started)}.log").open("wb")
        process = subprocess.Popen(  # noqa: S603 - fixed argv, our own venv
            [
                sys.executable,
                str(ROOT / "manage.py"),
                "import_opensquilla",
                str(db),
                "--follow",
                *named,
                "--interval",
                "0.2",
                "--no-progress",
            ],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        started.append(process)
        return process

    yield start
    for process in started:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()


def source(db: Path) -> dict:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return {
            "receipts": {
                key: (status, updated_at)
                for key, status, updated_at in conn.execute(
                    "SELECT idempotency_key, status, updated_at FROM memory_durable_receipts"
                )
            },
            "sessions": {k for (k,) in conn.execute("SELECT session_key FROM sessions")},
            "entries": conn.execute("SELECT COUNT(*) FROM transcript_entries").fetchone()[0],
            "entry_ids": {i for (i,) in conn.execute("SELECT id FROM transcript_entries")},
        }
    finally:
        conn.close()


def ours() -> dict:
    return {
        "receipts": {
            key: (status, updated_at)
            for key, status, updated_at in MemoryDurableReceipt.objects.values_list(
                "idempotency_key", "status", "updated_at"
            )
        },
        "sessions": set(Session.objects.values_list("session_key", flat=True)),
        # Each entry under its own id, as upstream numbered it (ids of ours are a surrogate).
        "entry_ids": set(TranscriptEntry.objects.values_list("gateway_entry_id", flat=True)),
    }


def wait_until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + CONVERGE_SECONDS
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.3)
    raise AssertionError(f"the mirror did not converge: {what}")


def test_the_mirror_converges_on_a_live_0_3_0_writer(ref_python, start_follower, tmp_path):
    db = tmp_path / "state" / "sessions.db"
    db.parent.mkdir()
    # The gateway creates its database first; the follower then follows it while it writes.
    first = write(ref_python, db, "load", "--count", "5")
    assert first.wait(timeout=120) == 0, first.stderr.read() if first.stderr else ""
    follower = start_follower(db)
    go = tmp_path / "delete-now"
    writer = write(ref_python, db, "churn", "--pause", "0.05", "--delete-when", str(go))
    doomed = "agent:main:telegram:group:-1000:sender:0"

    def caught_up_at_the_pause() -> bool:
        # The writer pauses at round 10 until ``go``; by then it has written round 9's
        # failures, which it recovers only after, so a follower that has caught up here sees
        # each of them fail and then recover (not the recovered state alone).
        if not (go.parent / (go.name + ".waiting")).exists():
            return False
        mirrored = ours()["receipts"]
        now = source(db)["receipts"]
        return (
            Session.objects.filter(session_key=doomed).exists()
            and any(status == "checkpoint_failed" for status, _ in now.values())
            and all(mirrored.get(k) == v for k, v in now.items())
        )

    wait_until(caught_up_at_the_pause, "the first session and round 9's failures")
    go.touch()
    out, err = writer.communicate(timeout=300)
    assert writer.returncode == 0, err
    summary = json.loads(out.strip().splitlines()[-1])
    expected = source(db)

    def converged() -> bool:
        mine = ours()
        return (
            all(mine["receipts"].get(k) == v for k, v in expected["receipts"].items())
            and expected["sessions"] <= mine["sessions"]
            and expected["entry_ids"] <= mine["entry_ids"]
            and MirroredSession.objects.filter(
                session_key__in=summary["deleted"], gone_at__isnull=False
            ).count()
            == len(summary["deleted"])
        )

    wait_until(converged, "receipts, sessions, messages and the deleted session")
    # the deleted session stays here, marked gone, with its history
    assert summary["deleted"] == [doomed]
    deleted = doomed
    assert Session.objects.filter(session_key=deleted).exists()
    assert TranscriptEntry.objects.filter(session_key=deleted).exists()
    assert follower.poll() is None  # still running
    recovered = ReceiptEvent.objects.filter(
        action="status_change", to_status="checkpoint_recovered", actor="opensquilla-mirror"
    )
    assert recovered.exists()


def test_a_follower_killed_mid_sync_and_restarted_loses_and_duplicates_nothing(
    ref_python, start_follower, tmp_path
):
    db = tmp_path / "sessions.db"
    seed = write(ref_python, db, "load", "--count", "3000")
    assert seed.wait(timeout=600) == 0
    writer = write(ref_python, db, "load", "--count", "400", "--rate", "200")
    follower = start_follower(db)
    wait_until(lambda: MemoryDurableReceipt.objects.exists(), "the first batch")
    follower.send_signal(signal.SIGKILL)
    follower.wait(timeout=30)
    assert MemoryDurableReceipt.objects.count() < 3401  # killed mid-way, not after
    start_follower(db)
    out, err = writer.communicate(timeout=300)
    assert writer.returncode == 0, err
    expected = source(db)

    def converged() -> bool:
        # rows are committed batch by batch; the pass records its import event (and marks the
        # initial sync done) in its own transaction after the last batch, so wait for that too
        return (
            ours()["receipts"] == expected["receipts"]
            and ours()["entry_ids"] == expected["entry_ids"]
            and MirrorSource.objects.filter(initial_sync_done=True).exists()
        )

    wait_until(converged, "every receipt and message exactly once, and the initial sync recorded")
    assert TranscriptEntry.objects.count() == expected["entries"]
    assert MemoryDurableReceipt.objects.count() == len(expected["receipts"])
    assert ReceiptEvent.objects.filter(action="import").count() == 1
    assert MirrorSource.objects.get().initial_sync_done
