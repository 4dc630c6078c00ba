"""Failure groups: bounded fingerprints, per-agent groups, and folds that never go negative
(issue 22, items 5 and 9)."""

from __future__ import annotations

import threading

import pytest
from django.db import connection, connections

from receipts_app import failure_groups
from receipts_app.console.selectors import failure_groups as read_failure_groups
from receipts_app.models import FailureGroupMember, FailureInbox, MemoryDurableReceipt
from receipts_app.selectors import ReceiptFilter, filter_receipts
from tests.factories import make_receipt

pytestmark = pytest.mark.django_db


def _failed(agent: str, reason: str | None, **fields) -> MemoryDurableReceipt:
    return make_receipt(
        session_key=f"agent:{agent}:webchat:s1", status="checkpoint_failed", reason=reason, **fields
    )


def _stored_is_exact() -> None:
    assert failure_groups.stored() == failure_groups.recompute()
    with connection.cursor() as cur:
        cur.execute("SELECT MIN(count) FROM receipts_app_failuregroupcount")
        lowest = cur.fetchone()[0]
    assert lowest is None or lowest >= 0


# --- fingerprints --------------------------------------------------------------------------

# Reasons as the ledger holds them, with the fingerprints they always had.
KNOWN = {
    "OSError: [Errno 28] No space left on device: '/var/ws/memory/a.jsonl'": (
        "OSError: [Errno <n>] No space left on device: '<path>'"
    ),
    "TimeoutError: checkpoint write exceeded 5.0s for agent:main:webchat:s1": (
        "TimeoutError: checkpoint write exceeded <n>s for <session>"
    ),
    "C:\\Users\\ann\\ws\\file.txt not found": "<path> not found",
    "ab:cd/e and x:/y/z": "a<path> and <path>",
    "hash mismatch 0xdeadbeefcafe 123e4567-e89b-12d3-a456-426614174000": (
        "hash mismatch <hex> <id>"
    ),
    "  provider   failed\n after 3 tries ": "provider failed after <n> tries",
    None: "",
}


@pytest.mark.parametrize("reason", list(KNOWN))
def test_fingerprints_of_normal_reasons_are_unchanged(reason):
    assert failure_groups.fingerprint_reason(reason) == KNOWN[reason]


class _Recording:
    """A mask pattern that records how much text the regex engine was handed."""

    def __init__(self, pattern, seen: list[int]):
        self.pattern, self.seen = pattern, seen

    def sub(self, placeholder, text):
        self.seen.append(len(text))
        return self.pattern.sub(placeholder, text)


def test_a_100000_character_reason_fingerprints_from_a_bounded_prefix(monkeypatch):
    seen: list[int] = []
    masks = tuple((_Recording(p, seen), r) for p, r in failure_groups._MASKS)
    monkeypatch.setattr(failure_groups, "_MASKS", masks)
    # A word with no slash: the old path mask backtracked over it at every position.
    reason = "checkpoint failed: " + "q" * 100_000

    fingerprint = failure_groups.fingerprint_reason(reason)

    assert fingerprint == ("checkpoint failed: " + "q" * 300)[: failure_groups.FINGERPRINT_LENGTH]
    assert seen and max(seen) <= failure_groups.FINGERPRINT_INPUT_CHARS


def test_the_fold_reads_a_bounded_prefix_of_long_reasons(monkeypatch):
    long = "disk full " + "x" * 100_000
    _failed("main", long)
    handed: list[int] = []
    real = failure_groups.fingerprint_reason

    def recording(reason):
        handed.append(len(reason or ""))
        return real(reason)

    monkeypatch.setattr(failure_groups, "fingerprint_reason", recording)
    failure_groups.fold_all()
    assert handed == [failure_groups.FINGERPRINT_INPUT_CHARS]
    [group] = read_failure_groups().groups
    assert (group.count, group.fingerprint) == (1, real(long))


def test_the_path_mask_is_linear_on_pathological_input():
    """Same masks, same output, on input whose old form took seconds (no time asserted)."""
    for text, expected in (
        ("q" * 4_000, "q" * 300),
        ("q:" * 2_000, "q:" * 150),
        ("ab/" * 1_300, "<path>"),
    ):
        assert failure_groups.fingerprint_reason(text) == expected


# --- groups per agent, and what they select ---------------------------------------------------


def test_the_same_error_on_two_agents_is_two_groups():
    for agent in ("alpha", "alpha", "beta"):
        _failed(agent, "disk full at /srv/a.jsonl")
    failure_groups.fold_all()
    groups = {(g.agent_id, g.fingerprint): g.count for g in read_failure_groups().groups}
    assert groups == {("alpha", "disk full at <path>"): 2, ("beta", "disk full at <path>"): 1}
    _stored_is_exact()


def test_the_fingerprint_filter_selects_exactly_the_groups_members():
    for _ in range(2):
        _failed("alpha", "timeout while distilling 7 entries")
    for _ in range(3):
        _failed("alpha", "timeout while distilling entries from /x/y")
    _failed("alpha", None)
    failure_groups.fold_all()
    for group in read_failure_groups().groups:
        rows = filter_receipts(ReceiptFilter.from_params(group.filter_params))
        assert rows.count() == group.count
    # The reasonless group's empty fingerprint survives the round trip through parameters.
    assert ReceiptFilter.from_params({"fingerprint": ""}).to_params() == {"fingerprint": ""}


# --- folds that are interrupted, repeated or out of step ---------------------------------------


class Interrupted(Exception):
    """Stands in for Celery's SoftTimeLimitExceeded, raised inside the fold."""


def test_a_fold_interrupted_half_way_leaves_exact_non_negative_counts(monkeypatch):
    rows = [_failed("main", f"disk full {i}") for i in range(6)]
    failure_groups.fold_all()
    # Half resolve, more arrive; the next fold dies on its third fingerprint.
    for row in rows[:3]:
        MemoryDurableReceipt.objects.filter(pk=row.pk).update(status="acknowledged")
    for i in range(4):
        _failed("main", f"disk full {10 + i}")
    real, calls = failure_groups.fingerprint_reason, []

    def dies(reason):
        calls.append(reason)
        if len(calls) == 3:
            raise Interrupted
        return real(reason)

    monkeypatch.setattr(failure_groups, "fingerprint_reason", dies)
    with pytest.raises(Interrupted):
        failure_groups.fold_failure_inbox()
    monkeypatch.setattr(failure_groups, "fingerprint_reason", real)
    # Nothing of the interrupted fold was kept: the group still says what it said before.
    assert [g.count for g in read_failure_groups().groups] == [6]

    failure_groups.fold_all(batch=2)  # and folding again, in small steps, catches up exactly
    assert [g.count for g in read_failure_groups().groups] == [7]
    assert FailureGroupMember.objects.count() == 7
    _stored_is_exact()


def test_a_leave_whose_join_was_never_folded_never_goes_below_zero():
    """The PostgreSQL probe's negative counts: a folder applied receipts' leaves while the
    fold holding their joins kept timing out. A leave now removes a membership, if any."""
    row = _failed("main", "disk full")
    FailureInbox.objects.all().delete()  # its join is held elsewhere (or lost)
    MemoryDurableReceipt.objects.filter(pk=row.pk).update(status="acknowledged")
    failure_groups.fold_all()
    assert read_failure_groups().groups == []
    _stored_is_exact()


def test_folding_the_same_entries_twice_changes_nothing():
    _failed("main", "disk full")
    entries = list(FailureInbox.objects.values())
    failure_groups.fold_all()
    FailureInbox.objects.bulk_create([FailureInbox(**e) for e in entries])  # redelivered
    failure_groups.fold_all()
    assert [g.count for g in read_failure_groups().groups] == [1]
    _stored_is_exact()


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_only_one_postgres_folder_works_at_a_time(require_postgres):
    _failed("main", "disk full")
    held, release = threading.Event(), threading.Event()

    def first_folder():
        try:
            with connections["default"].cursor() as cur:
                cur.execute("BEGIN")
                cur.execute("SELECT pg_advisory_xact_lock(%s)", [failure_groups._FOLD_LOCK])
                held.set()
                release.wait(10)
                cur.execute("COMMIT")
        finally:
            connections["default"].close()

    thread = threading.Thread(target=first_folder)
    thread.start()
    assert held.wait(10)
    try:
        assert failure_groups.fold_failure_inbox() == 0  # skipped: the other one folds
        assert FailureInbox.objects.count() == 1
    finally:
        release.set()
        thread.join()
    assert failure_groups.fold_all() == 1
    _stored_is_exact()


def test_the_same_error_on_two_gateways_is_two_groups():
    """Failure groups are per gateway, as the counts are: one agent's error on two gateways
    is two groups, each listing and planning only its own gateway's rows."""
    from sessions_app.gateways import ensure_gateway, using_gateway

    ensure_gateway("edge")
    for _ in range(2):
        _failed("alpha", "disk full at /srv/a.jsonl")
    with using_gateway("edge"):
        _failed("alpha", "disk full at /srv/b.jsonl")
    failure_groups.fold_all()
    groups = {(g.gateway_id, g.agent_id): g for g in read_failure_groups().groups}
    assert {k: g.count for k, g in groups.items()} == {("local", "alpha"): 2, ("edge", "alpha"): 1}
    for (gateway, _agent), group in groups.items():
        rows = filter_receipts(ReceiptFilter.from_params(group.filter_params))
        assert {r.gateway_id for r in rows} == {gateway} and rows.count() == group.count
    assert set(FailureGroupMember.objects.values_list("gateway_id", flat=True)) == {"local", "edge"}
    with using_gateway("edge"):  # a list scoped to one gateway shows only its groups
        assert [(g.gateway_id, g.count) for g in read_failure_groups().groups] == [("edge", 1)]
    _stored_is_exact()
