"""``manage.py export_receipts --format jsonl|csv [--output FILE] [filters]``.

Streams the ledger newest first with keyset pagination (no OFFSET), so exporting a million
rows costs the same per page as the first. JSONL is lossless; CSV writes NULL as an empty
cell (see docs/CLI.md).
"""

from __future__ import annotations

import csv
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from django.core.management.base import BaseCommand, CommandError

from receipts_app.ledger import LEDGER_FIELDS
from receipts_app.management import cli
from receipts_app.models import MemoryDurableReceipt
from receipts_app.selectors import ReceiptFilter, page_receipts

# ``gateway``: the gateway the receipt belongs to (session keys and idempotency keys are
# unique only within it), as the API names it.
EXPORT_FIELDS: tuple[str, ...] = LEDGER_FIELDS + ("agent_id", "resolved_by_receipt_id", "gateway")
PAGE_SIZE = 500
# Where a field is on the row when its name differs (the gateway's name is its column).
_COLUMN = {"gateway": "gateway_id"}


def receipt_record(row: MemoryDurableReceipt) -> dict[str, Any]:
    return {name: getattr(row, _COLUMN.get(name, name)) for name in EXPORT_FIELDS}


def iter_receipts(receipt_filter: ReceiptFilter) -> Iterator[MemoryDurableReceipt]:
    cursor: str | None = None
    while True:
        page = page_receipts(receipt_filter, cursor=cursor, limit=PAGE_SIZE)
        yield from page.rows
        if not page.has_more:
            return
        cursor = page.next_cursor


def write_export(rows: Iterator[MemoryDurableReceipt], fmt: str, out: IO[str]) -> int:
    count = 0
    if fmt == "jsonl":
        for row in rows:
            out.write(json.dumps(receipt_record(row), ensure_ascii=False, sort_keys=True) + "\n")
            count += 1
        return count
    writer = csv.DictWriter(out, fieldnames=list(EXPORT_FIELDS), lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: ("" if v is None else v) for k, v in receipt_record(row).items()})
        count += 1
    return count


class Command(BaseCommand):
    help = "Export receipts as JSONL or CSV, filtered exactly like the API's receipt list."

    def add_arguments(self, parser):
        parser.add_argument("--format", choices=("jsonl", "csv"), default="jsonl")
        parser.add_argument(
            "--output", type=Path, default=None, help="file to write (default: stdout)"
        )
        cli.add_filter_arguments(parser)

    def handle(self, *args, **options):
        params = cli.filter_params(options)
        unknown = cli.unknown_filter_keys(params, ReceiptFilter.PARAMS)
        if unknown:
            raise CommandError(f"unknown filter keys: {', '.join(unknown)}")
        receipt_filter = cli.call(ReceiptFilter.from_params, params)
        output: Path | None = options["output"]
        with cli.cli_errors():
            if output is None:
                count = write_export(
                    iter_receipts(receipt_filter), options["format"], cli.raw_stream(self.stdout)
                )
            else:
                count = self._write_file(output, receipt_filter, options["format"])
        self.stderr.write(f"exported {count} receipts")

    def _write_file(self, output: Path, receipt_filter: ReceiptFilter, fmt: str) -> int:
        # Written beside the target and renamed at the end: a failed export never leaves a
        # truncated file that looks complete.
        directory = output.resolve().parent
        if not directory.is_dir():
            raise CommandError(f"output directory does not exist: {directory}")
        fd, tmp_name = tempfile.mkstemp(prefix=f".{output.name}.", suffix=".tmp", dir=directory)
        try:
            with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
                count = write_export(iter_receipts(receipt_filter), fmt, handle)
            os.replace(tmp_name, output)
        except BaseException:
            Path(tmp_name).unlink(missing_ok=True)
            raise
        return count
