"""Failure groups per agent, kept through memberships (issue 22, items 5 and 9).

- ``FailureGroupMember``: one row per failed receipt, naming the group it is counted in.
- ``FailureGroupCount`` gains ``agent_id``; its key is (agent, scope, status, fingerprint).
- Fingerprints read a bounded prefix of the reason with linear-time masks
  (``receipts_app.failure_groups``): the groups are regrouped here, with writers held off, so
  no kept count refers to an old grouping.
- The triggers feed the groups every status at risk (``statuses.AT_RISK_STATUSES``): the
  failure statuses and ``checkpoint_requeued``, frozen below; they are re-installed (SQLite)
  or their functions replaced (PostgreSQL, whose truncate trigger now also empties the
  memberships).

The regrouping is written out here (the table shapes of this migration), with only the
fingerprint function imported, so a later change of the live code cannot break it.
"""

from importlib import import_module

from django.db import migrations, models

from receipts_app.failure_groups import fingerprint_reason
from receipts_app.ledger import triggers

_0007 = import_module("receipts_app.migrations.0007_ledger_counts")
# Frozen here: the statuses at risk as of this migration (0007's failure statuses, and
# requeued checkpoints), and the count key (0007's; 0017 adds the gateway).
AT_RISK_STATUSES = (*_0007.FAILURE_STATUSES, "checkpoint_requeued")
COUNT_KEY = _0007.COUNT_KEY
_T = "receipts_app_memorydurablereceipt"


def regroup(apps, schema_editor):
    connection = schema_editor.connection
    vendor = connection.vendor
    marks = ", ".join(["%s"] * len(AT_RISK_STATUSES))
    with connection.cursor() as cur:
        for sql in triggers.lock_writers(vendor):
            cur.execute(sql)
        if vendor == "postgresql":
            statements = triggers.postgres_functions(AT_RISK_STATUSES, COUNT_KEY)
        else:
            statements = [*triggers.uninstall(vendor), *triggers.install(vendor, AT_RISK_STATUSES, COUNT_KEY)]
        for sql in statements:
            cur.execute(sql)
        for table in (
            "receipts_app_failureinbox",
            "receipts_app_failuregroupmember",
            "receipts_app_failuregroupcount",
        ):
            cur.execute(f"DELETE FROM {table}")  # noqa: S608
        cur.execute(
            "SELECT receipt_id, agent_id, scope, status, SUBSTR(reason, 1, 4096), created_at "  # noqa: S608
            f"FROM {_T} WHERE status IN ({marks}) ORDER BY id",
            list(AT_RISK_STATUSES),
        )
        groups: dict[tuple, list] = {}
        members = []
        for rid, agent, scope, status, reason, created in cur.fetchall():
            key = (agent or "", scope, status, fingerprint_reason(reason))
            members.append((rid, *key, int(created)))
            group = groups.setdefault(key, [0, int(created), int(created), rid])
            group[0] += 1
            group[1] = min(group[1], int(created))
            if int(created) >= group[2]:
                group[2], group[3] = int(created), rid
        cur.executemany(
            "INSERT INTO receipts_app_failuregroupmember "
            "(receipt_id, agent_id, scope, status, fingerprint, created_at) "
            "VALUES (%s, %s, %s, %s, %s, %s)",
            members,
        )
        cur.executemany(
            "INSERT INTO receipts_app_failuregroupcount (agent_id, scope, status, fingerprint, "
            "count, first_seen, last_seen, sample_receipt_id) "
            "VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
            [(*key, *values) for key, values in groups.items()],
        )


def ungroup(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    failure_statuses = AT_RISK_STATUSES[:-1]  # 0007's list
    if vendor == "postgresql":
        statements = triggers.postgres_functions(failure_statuses, COUNT_KEY)
    else:
        statements = [*triggers.uninstall(vendor), *triggers.install(vendor, failure_statuses, COUNT_KEY)]
    with schema_editor.connection.cursor() as cur:
        for sql in statements:
            cur.execute(sql)
        cur.execute("DELETE FROM receipts_app_failuregroupcount")


class Migration(migrations.Migration):

    dependencies = [
        ('receipts_app', '0013_cheaper_counting'),
    ]

    operations = [
        migrations.CreateModel(
            name='FailureGroupMember',
            fields=[
                ('id', models.BigAutoField(primary_key=True, serialize=False)),
                ('receipt_id', models.CharField(max_length=128, unique=True)),
                ('agent_id', models.CharField(blank=True, default='', max_length=64)),
                ('scope', models.CharField(max_length=64)),
                ('status', models.CharField(max_length=64)),
                ('fingerprint', models.CharField(max_length=300)),
                ('created_at', models.BigIntegerField()),
            ],
        ),
        migrations.RemoveConstraint(
            model_name='failuregroupcount',
            name='failure_group_key_uniq',
        ),
        migrations.AddField(
            model_name='failuregroupcount',
            name='agent_id',
            field=models.CharField(blank=True, default='', max_length=64),
        ),
        migrations.AddConstraint(
            model_name='failuregroupcount',
            constraint=models.UniqueConstraint(fields=('agent_id', 'scope', 'status', 'fingerprint'), name='failure_group_key_uniq'),
        ),
        migrations.AddIndex(
            model_name='failuregroupmember',
            index=models.Index(fields=['fingerprint', 'agent_id', 'scope', 'status', 'id'], name='idx_failure_member_group'),
        ),
        # Reverse: groups of several agents would collide under 0013's key; empty them
        # (``check_counts --fix`` regroups).
        migrations.RunPython(regroup, ungroup),
    ]
