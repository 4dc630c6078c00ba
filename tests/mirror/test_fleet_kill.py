"""Two gateways followed at once, each by its own ``import_opensquilla --follow`` process,
both written live by the reference ``SessionStorage`` (opensquilla 0.3.0). The follower of
one is killed with SIGKILL mid-stream and started again: the other gateway's rows keep
arriving meanwhile, and in the end each gateway holds every one of its source's rows exactly
once (docs/MIRROR.md "Exactly once", "Several gateways").
"""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from receipts_app.mirror.models import MirrorSource
from receipts_app.models import MemoryDurableReceipt
from sessions_app.models import TranscriptEntry

from .test_reference_writer import (  # noqa: F401 - fixtures
    CONVERGE_SECONDS,
    ref_python,
    start_follower,
    write,
)

pytestmark = [
    pytest.mark.reference,
    pytest.mark.xdist_group("real-processes"),
    pytest.mark.django_db(transaction=True),
]

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def follow(start_follower) -> Callable[..., subprocess.Popen[bytes]]:  # noqa: F811
    """``follow(db, gateway)``: a follower of ``db`` under ``gateway``'s name."""
    return start_follower


def source_rows(db: Path) -> tuple[dict[str, tuple[str, int]], list[str]]:
    """The source's receipts (key -> status, updated_at) and its messages' ids."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        receipts = {
            key: (status, stamp)
            for key, status, stamp in conn.execute(
                "SELECT idempotency_key, status, updated_at FROM memory_durable_receipts"
            )
        }
        messages = [m for (m,) in conn.execute("SELECT message_id FROM transcript_entries")]
    finally:
        conn.close()
    return receipts, messages


def receipts_of(gateway: str) -> int:
    return MemoryDurableReceipt.objects.filter(gateway_id=gateway).count()


def wait_until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + CONVERGE_SECONDS
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.3)
    raise AssertionError(f"the mirror did not converge: {what}")


def test_killing_one_gateways_follower_never_holds_up_the_other(ref_python, follow, tmp_path):  # noqa: F811
    dbs = {name: tmp_path / name / "sessions.db" for name in ("edge-a", "edge-b")}
    for db in dbs.values():
        db.parent.mkdir()
        seed = write(ref_python, db, "load", "--count", "5")
        assert seed.wait(timeout=120) == 0
    followers = {name: follow(db, name) for name, db in dbs.items()}
    wait_until(
        lambda: MirrorSource.objects.filter(initial_sync_done=True).count() == 2,
        "both initial passes",
    )
    writers = [
        write(ref_python, db, "load", "--count", "1500", "--rate", "100") for db in dbs.values()
    ]
    wait_until(lambda: receipts_of("edge-a") > 100, "edge-a's first live rows")

    followers["edge-a"].send_signal(signal.SIGKILL)
    followers["edge-a"].wait(timeout=30)
    stalled_at = receipts_of("edge-a")
    b_at_kill = receipts_of("edge-b")
    # With edge-a's follower dead, edge-b's rows keep arriving.
    wait_until(lambda: receipts_of("edge-b") >= b_at_kill + 200, "edge-b while edge-a is down")
    assert receipts_of("edge-a") == stalled_at

    follow(dbs["edge-a"], "edge-a")
    for writer in writers:
        out, err = writer.communicate(timeout=300)
        assert writer.returncode == 0, err
    expected = {name: source_rows(db) for name, db in dbs.items()}

    def converged() -> bool:
        for name, (receipts, messages) in expected.items():
            mine = dict(
                (key, (status, stamp))
                for key, status, stamp in MemoryDurableReceipt.objects.filter(
                    gateway_id=name
                ).values_list("idempotency_key", "status", "updated_at")
            )
            if mine != receipts:
                return False
            ours = TranscriptEntry.objects.filter(gateway_id=name).values_list(
                "message_id", flat=True
            )
            if sorted(ours) != sorted(messages):
                return False
        return True

    wait_until(converged, "every row of both gateways, exactly once")
    for name, (receipts, messages) in expected.items():
        assert receipts_of(name) == len(receipts) == 1500  # the seed's 5 keys come again
        assert TranscriptEntry.objects.filter(gateway_id=name).count() == len(messages)
    assert followers["edge-b"].poll() is None  # never stopped
