"""What an import did: counts per kind of row and per file, plus operator-facing warnings."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

# A real ledger can produce thousands of identical warnings; the report keeps the first few
# of each kind and counts the rest, so the summary stays readable.
_WARNINGS_PER_KIND = 10


@dataclass
class Counts:
    created: int = 0
    updated: int = 0
    unchanged: int = 0
    skipped: int = 0

    @property
    def total(self) -> int:
        return self.created + self.updated + self.unchanged + self.skipped

    def line(self) -> str:
        return (
            f"{self.created} created, {self.updated} updated, "
            f"{self.unchanged} unchanged, {self.skipped} skipped"
        )


@dataclass
class FileCounts:
    copied: int = 0
    unchanged: int = 0
    conflicts: int = 0  # a different file already sits at the target path; kept, not replaced
    missing: int = 0  # a receipt names a workspace file the source workspace lacks
    refused: int = 0  # symlinks and other non-regular files are never followed
    hash_mismatches: int = 0  # file bytes disagree with the receipt's content_hash

    def line(self) -> str:
        return (
            f"{self.copied} copied, {self.unchanged} unchanged, {self.conflicts} conflicts, "
            f"{self.missing} missing, {self.refused} refused, "
            f"{self.hash_mismatches} hash mismatches"
        )


@dataclass(frozen=True)
class SkippedRow:
    kind: str  # session, transcript entry, receipt
    rowid: int
    reason: str  # "session_key must not contain control characters…", no position
    detail: str  # the whole problem, with the character and its position
    name: str  # the row's key or id, control characters escaped


@dataclass
class ImportReport:
    source: str
    sessions: Counts = field(default_factory=Counts)
    transcript_entries: Counts = field(default_factory=Counts)
    receipts: Counts = field(default_factory=Counts)
    files: FileCounts = field(default_factory=FileCounts)
    # Transcript entries stored before gateways had their own ids, given theirs back.
    own_ids_restored: int = 0
    # Receipts whose receipt_id another gateway holds, given a new one.
    remapped_receipt_ids: int = 0
    # Compaction summaries and pre-image entries skipped for a control character in a key/id.
    compactions_skipped: int = 0
    gateway: str = "local"
    coverage_columns_present: bool = True
    # The source's OpenSquilla schema, e.g. "25 (V040__document_resources)" (importer.schema).
    source_schema: str = ""
    warnings: list[str] = field(default_factory=list)
    _warning_kinds: dict[str, int] = field(default_factory=dict, repr=False)
    # Every row skipped for a control character, in order (what the live mirror records,
    # ``receipts_app.mirror.models.MirrorSkippedRow``); not part of ``as_dict``.
    skipped_rows: list[SkippedRow] = field(default_factory=list, repr=False)

    def warn(self, kind: str, message: str) -> None:
        seen = self._warning_kinds.get(kind, 0) + 1
        self._warning_kinds[kind] = seen
        if seen <= _WARNINGS_PER_KIND:
            self.warnings.append(message)

    @property
    def suppressed_warnings(self) -> int:
        return sum(max(0, n - _WARNINGS_PER_KIND) for n in self._warning_kinds.values())

    @property
    def changed(self) -> bool:
        rows = (self.sessions, self.transcript_entries, self.receipts)
        return (
            any(c.created or c.updated for c in rows)
            or self.files.copied > 0
            or self.own_ids_restored > 0
        )

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("_warning_kinds", None)
        data.pop("skipped_rows", None)
        data["suppressed_warnings"] = self.suppressed_warnings
        data["changed"] = self.changed
        return data

    def summary_lines(self) -> list[str]:
        lines = [
            *([f"source schema: {self.source_schema}"] if self.source_schema else []),
            f"sessions: {self.sessions.line()}",
            f"transcript entries: {self.transcript_entries.line()}"
            + (f" ({self.own_ids_restored} own ids restored)" if self.own_ids_restored else ""),
            f"receipts: {self.receipts.line()}"
            + (
                f" ({self.remapped_receipt_ids} given new ids)" if self.remapped_receipt_ids else ""
            ),
            f"files: {self.files.line()}",
        ]
        if self.compactions_skipped:
            lines.append(f"compactions: {self.compactions_skipped} skipped")
        if not self.coverage_columns_present:
            lines.append("coverage columns absent in the source: imported as NULL")
        lines.extend(f"warning: {w}" for w in self.warnings)
        if self.suppressed_warnings:
            lines.append(f"warning: … and {self.suppressed_warnings} more warnings")
        return lines
