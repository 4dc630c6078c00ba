"""Audit events name their gateway (``ReceiptEvent.gateway_id``).

Every existing event starts as ``local``'s (on PostgreSQL an ``ADD COLUMN`` with a constant
default: no table rewrite); then, only when some other gateway has rows, events are moved to
the gateway they are about, where it is known:
- an event of a receipt that still exists: the receipt's gateway (receipt ids are unique
  across gateways);
- a session event (no receipt; ``details.session_id``): that session's gateway;
- an import summary (``details.gateway``): the gateway it imported into.
Events of receipts deleted since stay ``local`` (nothing says whose they were).
The time this takes at 1M events is in docs/OPERATIONS.md.
"""

from django.db import migrations, models

import sessions_app.gateways

EV = "receipts_app_receiptevent"
MDR = "receipts_app_memorydurablereceipt"
SESSION = "sessions_app_session"


def _detail(vendor: str, key: str) -> str:
    if vendor == "postgresql":
        return f"(e.details ->> '{key}')"
    return f"json_extract(e.details, '$.{key}')"


def backfill(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    with schema_editor.connection.cursor() as cur:
        cur.execute("SELECT 1 FROM sessions_app_gateway WHERE name <> 'local' LIMIT 1")
        if cur.fetchone() is None:
            return  # one gateway: every event is local's already
    session_id = _detail(vendor, "session_id")
    gateway = _detail(vendor, "gateway")
    if vendor == "postgresql":
        statements = [
            f"UPDATE {EV} e SET gateway_id = r.gateway_id FROM {MDR} r "
            "WHERE r.receipt_id = e.receipt_id AND e.receipt_id <> '' "
            "AND r.gateway_id <> 'local'",
            f"UPDATE {EV} e SET gateway_id = s.gateway_id FROM {SESSION} s "
            f"WHERE e.receipt_id = '' AND s.session_id = {session_id} "
            "AND s.gateway_id <> 'local'",
        ]
    else:
        statements = [
            f"UPDATE {EV} AS e SET gateway_id = (SELECT r.gateway_id FROM {MDR} r "
            "WHERE r.receipt_id = e.receipt_id) WHERE e.receipt_id <> '' AND EXISTS ("
            f"SELECT 1 FROM {MDR} r WHERE r.receipt_id = e.receipt_id "
            "AND r.gateway_id <> 'local')",
            f"UPDATE {EV} AS e SET gateway_id = (SELECT s.gateway_id FROM {SESSION} s "
            f"WHERE s.session_id = {session_id} LIMIT 1) WHERE e.receipt_id = '' AND EXISTS ("
            f"SELECT 1 FROM {SESSION} s WHERE s.session_id = {session_id} "
            "AND s.gateway_id <> 'local')",
        ]
    statements.append(
        f"UPDATE {EV} AS e SET gateway_id = {gateway} WHERE e.action = 'import' "
        f"AND e.receipt_id = '' AND {gateway} IS NOT NULL AND {gateway} <> ''"
    )
    for sql in statements:
        schema_editor.execute(sql, params=None)


class Migration(migrations.Migration):
    dependencies = [
        ("receipts_app", "0017_gateways"),
    ]

    operations = [
        migrations.AddField(
            model_name="receiptevent",
            name="gateway_id",
            field=models.CharField(default=sessions_app.gateways.current_gateway, max_length=64),
        ),
        migrations.RunPython(backfill, migrations.RunPython.noop),
    ]
