"""What a missing or damaged checkpoint took with it: the loss (docs/STATUSES.md#a-lost-checkpoint).

An entry a checkpoint covered is **lost** when it is in no transcript (the generation's live
transcript or a kept compaction pre-image) and in no other checkpoint of the same session
generation whose file reads back whole. Nothing here writes: the report is what the receipt
page shows and what the operator acknowledges.

How the covered entries are known:

1. **By id, proven by the coverage hash.** A checkpoint's ``coverage_turn_id`` is
   ``through-<max entry id>`` and it covered ``coverage_entry_count`` entries, the active tail
   up to that id. The generation's entries up to that id (live and pre-images, oldest first),
   the last ``count`` of them, are hashed as the writer hashed them; when that equals the
   receipt's ``coverage_hash``, every covered entry is known and still in a transcript:
   nothing is lost, whatever happened to the file.
2. **Otherwise, from the file's intact lines** (a damaged file): each intact entry is looked
   up by fingerprint (``matching``) in the live transcript, the pre-images and the other
   checkpoints; an entry found nowhere is lost, named by its position, role, time and text.
   An entry whose lines are damaged is lost with its content unknown.
3. **Otherwise** (the file is gone and the transcripts no longer hold what it covered): the
   covered entries that no transcript holds are named by their position in the coverage and
   counted as lost; with the file gone their content is unknown, so no other checkpoint can be
   shown to hold them, and nothing says where in the coverage they were.

**Retake** (the requeue: a new checkpoint of the live transcript) is the way out only when
case 1 holds with every covered entry in the live transcript of the session's current
generation: then a retake saves everything this checkpoint held.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from ..checkpoint.hashing import checkpoint_coverage_hash
from ..models import MemoryDurableReceipt
from . import files
from .generation import HeldEntry, compacted_entries, live_entries, live_generation
from .readback import Readback, read_checkpoint

# Whole-file reads of the other checkpoints of the generation, newest first; past this many
# the report says how many it did not read (their entries count as held by none).
OTHER_CHECKPOINTS_READ = 20
# A loss report lists at most this many lost entries (and counts all of them).
LOST_LIST_CAP = 200
# Bytes of one file read for a loss report or a page (whole lines); past it, reading stops.
READ_MAX_BYTES = 256 * 1024 * 1024

_THROUGH = re.compile(r"^through-(-?\d+)$")

# file_state values
WHOLE = "whole"
DAMAGED = "damaged"
MISSING = "missing"
UNREADABLE = "unreadable"
ELSEWHERE = "elsewhere"
NO_FILE = "no_file"


@dataclass(frozen=True)
class LostEntry:
    """One covered entry now in no transcript and no other checkpoint."""

    position: int | None  # in the checkpoint; None when the file that placed it is gone
    role: str | None = None
    timestamp_ms: int | None = None
    preview: str | None = None
    content_known: bool = False


@dataclass
class LossReport:
    receipt_id: str
    file_state: str
    file_message: str
    covered: int
    exact: bool
    held_live: int = 0
    held_compacted: int = 0
    held_other_checkpoints: int = 0
    lost_count: int = 0
    lost: list[LostEntry] = field(default_factory=list)
    retake_possible: bool = False
    retake_reason: str = ""
    other_checkpoints_read: int = 0
    other_checkpoints_unread: int = 0

    @property
    def file_lost(self) -> bool:
        """The file cannot be read back as saved (the page shows this report then)."""
        return self.file_state in (DAMAGED, MISSING, UNREADABLE)

    @property
    def summary(self) -> str:
        if self.file_state == WHOLE:
            return "The file reads back whole: it holds every entry it covered."
        if self.file_state == ELSEWHERE and not self.exact:
            return (
                "The transcripts here no longer prove what this checkpoint covered; whether "
                "anything is lost can be told only where its file is, on its gateway's host."
            )
        if self.lost_count == 0:
            where = "the live transcript" if self.retake_possible else "a transcript kept here"
            return (
                f"Nothing is lost: all {self.covered} entries this checkpoint covered are still "
                f"in {where}."
            )
        return (
            f"{self.lost_count} of {self.covered} entries this checkpoint covered are in no "
            "transcript and in no other checkpoint."
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "receipt_id": self.receipt_id,
            "file_state": self.file_state,
            "file_message": self.file_message,
            "covered": self.covered,
            "exact": self.exact,
            "held_live": self.held_live,
            "held_compacted": self.held_compacted,
            "held_other_checkpoints": self.held_other_checkpoints,
            "lost_count": self.lost_count,
            "lost": [entry.__dict__ for entry in self.lost],
            "retake_possible": self.retake_possible,
            "retake_reason": self.retake_reason,
            "other_checkpoints_read": self.other_checkpoints_read,
            "other_checkpoints_unread": self.other_checkpoints_unread,
            "summary": self.summary,
        }


def read_file(located: files.Located, **options: Any) -> Readback:
    """Read a located checkpoint file (raises OSError as opening or reading does)."""
    assert located.path is not None
    options.setdefault("max_bytes", READ_MAX_BYTES)
    with located.path.open("rb") as handle:
        return read_checkpoint(handle, **options)


def file_state_of(
    receipt: MemoryDurableReceipt, located: files.Located, readback: Readback | None
) -> tuple[str, str]:
    """The file's state for a loss report, with the sentence that explains it."""
    if located.state == files.NO_FILE:
        return NO_FILE, located.message
    if located.state == files.ELSEWHERE:
        return ELSEWHERE, located.message
    if located.state in (files.MISSING, files.OUTSIDE):
        return MISSING, located.message
    if readback is None:
        return UNREADABLE, "The checkpoint file could not be read."
    problems = []
    if not readback.complete:
        problems.append(f"it is larger than the {READ_MAX_BYTES} bytes read here")
    elif receipt.content_hash and readback.sha256 != receipt.content_hash:
        problems.append("its bytes no longer hash to the receipt's content_hash")
    if readback.bad_lines:
        problems.append(f"{len(readback.bad_lines)} line(s) do not parse as checkpoint events")
    damaged = sum(1 for key in readback.keys if not key.intact)
    if damaged:
        problems.append(
            f"{damaged} entr{'y' if damaged == 1 else 'ies'} no longer match their content_hash"
        )
    if not readback.keys:
        problems.append("no event in it parses")
    if problems:
        return DAMAGED, "The checkpoint file is damaged: " + "; ".join(problems) + "."
    return WHOLE, ""


def _through_id(coverage_turn_id: str | None) -> int | None:
    match = _THROUGH.match(coverage_turn_id or "")
    return int(match.group(1)) if match else None


def _covered_by_id(
    receipt: MemoryDurableReceipt, held: list[HeldEntry], count: int
) -> tuple[list[HeldEntry], bool]:
    """The generation's entries the coverage names (up to ``through-N``, the last ``count``),
    and whether the coverage hash proves them to be exactly the covered ones."""
    through = _through_id(receipt.coverage_turn_id)
    if through is None or count <= 0:
        return [], False
    pool = sorted(
        (h for h in held if h.entry_id <= through), key=lambda h: (h.created_at, h.entry_id)
    )[-count:]
    exact = (
        len(pool) == count
        and bool(receipt.coverage_hash)
        and checkpoint_coverage_hash([h.coverage_item() for h in pool]) == receipt.coverage_hash
    )
    return pool, exact


def other_checkpoints(
    receipt: MemoryDurableReceipt, located: files.Located
) -> tuple[Counter[str], int, int]:
    """Fingerprints of the entries in the generation's other checkpoints whose files read back
    whole here, how many were read, and how many were not (beyond the cap or not whole)."""
    rows = list(
        MemoryDurableReceipt.objects.filter(
            gateway_id=receipt.gateway_id,
            session_key=receipt.session_key,
            session_id=receipt.session_id,
            scope="checkpoint",
        )
        .exclude(pk=receipt.pk)
        .exclude(source_path__isnull=True)
        .exclude(source_path=located.stored_path)
        .order_by("-created_at", "-id")[: OTHER_CHECKPOINTS_READ + 1]
    )
    unread = max(0, len(rows) - OTHER_CHECKPOINTS_READ)
    prints: Counter[str] = Counter()
    read = 0
    seen_paths: set[str] = set()
    for row in rows[:OTHER_CHECKPOINTS_READ]:
        other = files.locate_checkpoint(row)
        if other.state != files.READABLE or other.stored_path in seen_paths:
            unread += other.stored_path not in seen_paths
            continue
        seen_paths.add(other.stored_path)
        try:
            readback = read_file(other, limit=0)
        except OSError:
            unread += 1
            continue
        if file_state_of(row, other, readback)[0] != WHOLE:
            unread += 1
            continue
        read += 1
        prints.update(key.fingerprint for key in readback.keys)
    return prints, read, unread


def _take(counter: Counter[str], fingerprint: str) -> bool:
    if counter[fingerprint] > 0:
        counter[fingerprint] -= 1
        return True
    return False


def loss_for_receipt(
    receipt: MemoryDurableReceipt, *, readback: Readback | None = None
) -> LossReport:
    """The loss report of a checkpoint receipt (see the module docstring). ``readback`` is the
    file already read by the caller, if it was."""
    located = files.locate_checkpoint(receipt)
    if readback is None and located.state == files.READABLE:
        try:
            readback = read_file(located, limit=0)
        except OSError:
            readback = None
    state, message = file_state_of(receipt, located, readback)
    live = live_entries(receipt)
    compacted = compacted_entries(receipt)
    count = receipt.coverage_entry_count or (readback.entry_count if readback else 0)
    pool, exact = _covered_by_id(receipt, live + compacted, count)
    report = LossReport(
        receipt_id=receipt.receipt_id,
        file_state=state,
        file_message=message,
        covered=count,
        exact=exact,
    )
    current = live_generation(receipt)
    if exact:
        report.held_live = sum(1 for h in pool if h.live)
        report.held_compacted = len(pool) - report.held_live
    _retake_verdict(report, receipt, current)
    if state in (WHOLE, NO_FILE, ELSEWHERE) or exact:
        # Elsewhere and not proven by the transcripts: only that gateway's host can tell.
        return report

    held_live = Counter(h.fingerprint for h in live)
    held_compacted = Counter(h.fingerprint for h in compacted)
    prints: Counter[str] = Counter()
    if located.state != files.ELSEWHERE:
        prints, report.other_checkpoints_read, report.other_checkpoints_unread = other_checkpoints(
            receipt, located
        )
    lost: list[LostEntry] = []
    if readback is not None and readback.keys:
        for key in readback.keys:
            if not key.intact:
                lost.append(LostEntry(key.position, key.role, key.timestamp_ms, None, False))
            elif _take(held_live, key.fingerprint):
                report.held_live += 1
            elif _take(held_compacted, key.fingerprint):
                report.held_compacted += 1
            elif _take(prints, key.fingerprint):
                report.held_other_checkpoints += 1
            else:
                lost.append(LostEntry(key.position, key.role, key.timestamp_ms, key.preview, True))
        # Lines too damaged to parse may have held whole entries: those are unknown.
        for position in range(readback.entry_count + 1, count + 1):
            lost.append(LostEntry(position))
    else:
        # The file is gone: the transcripts hold what they hold of the coverage; the rest is
        # in no transcript, its content and its place unknown.
        report.held_live = sum(1 for h in pool if h.live)
        report.held_compacted = len(pool) - report.held_live
        lost = [LostEntry(None) for _ in range(count - len(pool))]
    report.lost_count = len(lost)
    report.lost = lost[:LOST_LIST_CAP]
    return report


def _retake_verdict(report: LossReport, receipt: MemoryDurableReceipt, current: str | None) -> None:
    if current is None:
        report.retake_reason = "the session no longer exists here"
    elif current != receipt.session_id:
        report.retake_reason = (
            "the session was reset since: its live transcript is a later generation"
        )
    elif not report.exact:
        report.retake_reason = (
            "the live transcript no longer holds exactly what this checkpoint covered "
            "(the coverage hash does not match)"
        )
    elif report.held_compacted:
        report.retake_reason = (
            f"{report.held_compacted} covered entries were compacted out of the live transcript "
            "(their pre-images are kept here, but a retake saves only the live transcript)"
        )
    else:
        report.retake_possible = True
        report.retake_reason = "the transcript this checkpoint covered is still whole here"
