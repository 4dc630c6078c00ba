"""Two real OpenSquilla 0.3.0 gateways in one console, under their own names.

Both databases are written by PyPI ``opensquilla==0.3.0``'s ``SessionStorage`` (the reference
venv, tests/mirror/reference_writer.py) with the same plan, so everything a second gateway
would collide on overlaps: the session key ``agent:main:main``, every idempotency key, and the
transcript entry ids 1..N. Imported (and followed) under two gateway names, nothing is skipped,
nothing is mixed, and each gateway's receipts point at its own sessions.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from receipts_app.counts import receipt_counts
from receipts_app.importer import ImportSourceError, import_opensquilla
from receipts_app.mirror.follower import build_follower
from receipts_app.mirror.models import MirrorSource
from receipts_app.mirror.sources import parse_sources
from receipts_app.mirror.state import mirror_states
from receipts_app.models import MemoryDurableReceipt
from sessions_app import services as session_services
from sessions_app.gateways import Gateway, using_gateway
from sessions_app.models import Session, TranscriptEntry

from .test_reference_writer import WRITER, ref_python  # noqa: F401

pytestmark = [pytest.mark.reference, pytest.mark.django_db]

KEY = "agent:main:main"
RECEIPTS = 12


def _written(python: Path, db: Path) -> Path:
    db.parent.mkdir(parents=True)
    done = subprocess.run(  # noqa: S603 - our own venv, fixed argv
        [str(python), str(WRITER), str(db), "load", "--count", str(RECEIPTS)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.splitlines()[-1])["receipts"] == RECEIPTS
    return db


@pytest.fixture(scope="module")
def two_dbs(ref_python, tmp_path_factory) -> tuple[Path, Path]:  # noqa: F811
    """Written once for the module (the writer's start-up is most of the cost); read-only after."""
    root = tmp_path_factory.mktemp("gateways")
    return _written(ref_python, root / "a" / "sessions.db"), _written(
        ref_python, root / "b" / "sessions.db"
    )


def _gateway_rows(name: str) -> tuple[Session, list[MemoryDurableReceipt]]:
    with using_gateway(name):
        session = session_services.get_session(KEY)
        receipts = list(MemoryDurableReceipt.objects.order_by("idempotency_key"))
    assert session is not None
    return session, receipts


def test_two_overlapping_gateways_import_side_by_side(two_dbs, tmp_path, settings):
    settings.OPENSQUILLA_CHECKPOINT_WORKSPACE = str(tmp_path / "ours")
    db_a, db_b = two_dbs
    first = import_opensquilla(db_path=db_a, workspace=None, gateway="host-a")
    second = import_opensquilla(db_path=db_b, workspace=None, gateway="host-b")

    for report in (first, second):
        assert report.sessions.created == 1 and report.sessions.skipped == 0
        assert report.receipts.created == RECEIPTS and report.receipts.skipped == 0
        assert report.transcript_entries.created == RECEIPTS
        assert not any("kept over imported" in w for w in report.warnings)
    # Entry ids 1..N of both: each gateway's keep theirs, under ids of ours.
    for name in ("host-a", "host-b"):
        own = TranscriptEntry.objects.filter(gateway_id=name).values_list(
            "gateway_entry_id", flat=True
        )
        assert sorted(own) == list(range(1, RECEIPTS + 1))

    session_a, receipts_a = _gateway_rows("host-a")
    session_b, receipts_b = _gateway_rows("host-b")
    assert session_a.session_id != session_b.session_id
    assert [r.idempotency_key for r in receipts_a] == [r.idempotency_key for r in receipts_b]
    assert {r.session_id for r in receipts_a} == {session_a.session_id}
    assert {r.session_id for r in receipts_b} == {session_b.session_id}
    with using_gateway("host-b"):
        transcript = session_services.get_transcript(session_b.session_id)
    assert [e.content for e in transcript] == [f"message {i}" for i in range(RECEIPTS)]
    assert {e.gateway_id for e in transcript} == {"host-b"}
    assert TranscriptEntry.objects.filter(gateway_id="host-a").count() == RECEIPTS
    # Nothing landed in local, and the counts say so per gateway.
    assert not Session.objects.filter(gateway_id="local").exists()
    per_gateway: dict[str, int] = {}
    for row in receipt_counts():
        per_gateway[row.gateway_id] = per_gateway.get(row.gateway_id, 0) + row.count
    assert per_gateway == {"host-a": RECEIPTS, "host-b": RECEIPTS}

    gateway = Gateway.objects.get(name="host-b")
    assert gateway.source == str(db_b.resolve()) and gateway.last_seen_at
    # A storage-only 0.3.0 file: storage version 7, no migration table, so no release named.
    assert (gateway.schema_version, gateway.opensquilla_version) == ("7", "")

    again = import_opensquilla(db_path=db_b, workspace=None, gateway="host-b")
    assert not again.changed  # idempotent within its gateway


def test_a_receipt_id_another_gateway_holds_gets_a_new_one(two_dbs, tmp_path, settings):
    settings.OPENSQUILLA_CHECKPOINT_WORKSPACE = str(tmp_path / "ours")
    db_a, _db_b = two_dbs
    import_opensquilla(db_path=db_a, workspace=None, gateway="host-a")
    # The same file under a second name: the very same receipt ids arrive again.
    copy = import_opensquilla(db_path=db_a, workspace=None, gateway="copy")
    assert copy.receipts.created == RECEIPTS and copy.remapped_receipt_ids == RECEIPTS
    assert MemoryDurableReceipt.objects.values("receipt_id").distinct().count() == 2 * RECEIPTS
    assert any("gateway host-a" in w for w in copy.warnings)


def test_the_command_takes_a_gateway_and_refuses_a_bad_name(two_dbs, tmp_path, settings):
    settings.OPENSQUILLA_CHECKPOINT_WORKSPACE = str(tmp_path / "ours")
    db_a, _ = two_dbs
    with pytest.raises(CommandError, match="--gateway: gateway name 'Host A' is not a slug"):
        call_command("import_opensquilla", str(db_a), "--gateway", "Host A", "--no-progress")
    assert not MemoryDurableReceipt.objects.exists()
    call_command("import_opensquilla", str(db_a), "--gateway", "host-a", "--no-progress")
    assert set(MemoryDurableReceipt.objects.values_list("gateway_id", flat=True)) == {"host-a"}


def test_two_gateways_at_one_path_are_two_sources_with_their_own_lease(two_dbs, tmp_path, settings):
    """Two Docker hosts both at /var/lib/opensquilla/state/sessions.db: the same path, two
    gateways, so two source rows, two cursors and two leases (neither stands by)."""
    settings.OPENSQUILLA_CHECKPOINT_WORKSPACE = str(tmp_path / "ours")
    db_a, _ = two_dbs
    one = build_follower(db_path=db_a, workspace=None, gateway="docker-1", interval=0.1)
    two = build_follower(db_path=db_a, workspace=None, gateway="docker-2", interval=0.1)
    assert one.poll() == "synced" and two.poll() == "synced"
    assert one.poll() == "idle" and two.poll() == "idle"
    sources = MirrorSource.objects.order_by("gateway_id")
    assert [(s.gateway_id, s.path) for s in sources] == [
        ("docker-1", str(db_a.resolve())),
        ("docker-2", str(db_a.resolve())),
    ]
    assert {s["gateway"] for s in mirror_states() if s["status"] == "ok"} == {
        "docker-1",
        "docker-2",
    }
    for name in ("docker-1", "docker-2"):
        session, receipts = _gateway_rows(name)
        assert len(receipts) == RECEIPTS and {r.session_id for r in receipts} == {
            session.session_id
        }


def test_configured_sources_are_named_gateways():
    parsed = parse_sources("host-a=/srv/a/sessions.db:/srv/a/ws, host-b=/srv/b/sessions.db")
    assert [(s.gateway, str(s.db_path), s.workspace) for s in parsed] == [
        ("host-a", "/srv/a/sessions.db", Path("/srv/a/ws")),
        ("host-b", "/srv/b/sessions.db", None),
    ]
    for bad in ("/srv/a/sessions.db", "Host=/x.db", "a=/x.db a=/y.db"):
        with pytest.raises(ImportSourceError):
            parse_sources(bad)


def test_two_gateways_entries_with_one_own_id_are_stored_side_by_side():
    """Two followers insert entries with the same own id at once: ids of ours are drawn by the
    database, so nothing competes, and each entry keeps the id its gateway gave it."""
    from receipts_app.importer.rows import insert_entries

    for name in ("a", "b"):
        Gateway.objects.get_or_create(name=name, defaults={"display_name": name})
        with using_gateway(name):
            insert_entries(
                [
                    TranscriptEntry(
                        gateway_entry_id=7,
                        session_id=f"{name}-session",
                        session_key=KEY,
                        message_id=f"{name}-7",
                        role="user",
                        content=f"{name}'s",
                        created_at=1,
                    )
                ]
            )
    stored = {e.gateway_id: e for e in TranscriptEntry.objects.filter(gateway_entry_id=7)}
    assert {name: (e.own_id, e.content) for name, e in stored.items()} == {
        "a": (7, "a's"),
        "b": (7, "b's"),
    }
    assert stored["a"].pk != stored["b"].pk
