"""An upstream receipt id with "/" is imported under an id every URL can address."""

from __future__ import annotations

import sqlite3
from io import StringIO
from urllib.parse import quote

import pytest
from django.core.management import call_command

from receipts_app.models import MemoryDurableReceipt
from tests.api.conftest import ApiCaller, _caller
from tests.cli.test_import_opensquilla import writable_copy

pytestmark = pytest.mark.django_db

UPSTREAM_ID = "30dd194d-598e-4dcb-8d2f-b99a4611087a"


@pytest.fixture
def golden(golden_dir):
    return golden_dir / "opensquilla-0.3.0"


def test_a_slashed_upstream_id_is_imported_percent_encoded_and_answers_on_its_url(
    golden, tmp_path, settings
):
    settings.OPENSQUILLA_CHECKPOINT_WORKSPACE = str(tmp_path / "ours")
    db = writable_copy(golden, tmp_path)
    conn = sqlite3.connect(db)
    conn.execute(
        "UPDATE memory_durable_receipts SET receipt_id = ? WHERE receipt_id = ?",
        ("team/a/1", UPSTREAM_ID),
    )
    conn.commit()
    conn.close()

    call_command(
        "import_opensquilla", str(db), "--workspace", str(golden / "workspace"), stdout=StringIO()
    )

    stored = MemoryDurableReceipt.objects.get(receipt_id="team%2Fa%2F1")
    reader: ApiCaller = _caller("reader", "viewer", "read")
    response = reader.get(f"/receipts/{quote(stored.receipt_id, safe='')}")
    assert response.status_code == 200, response.content
    assert response.json()["receipt_id"] == "team%2Fa%2F1"
    assert not MemoryDurableReceipt.objects.filter(receipt_id__contains="/").exists()
