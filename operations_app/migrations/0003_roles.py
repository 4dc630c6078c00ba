"""Give the admin role the operations permissions (alert rules, deliveries, heartbeats)."""

from django.db import migrations


def sync(apps, schema_editor):
    from django.contrib.auth.management import create_permissions

    for app_config in apps.get_app_configs():
        app_config.models_module = True
        create_permissions(app_config, apps=apps, verbosity=0)
        app_config.models_module = None

    from opensquilla_site.roles import sync_roles

    sync_roles(apps.get_model("auth", "Group"), apps.get_model("auth", "Permission"))


class Migration(migrations.Migration):
    dependencies = [
        ("operations_app", "0002_alerts"),
        ("receipts_app", "0003_roles"),
    ]

    operations = [migrations.RunPython(sync, migrations.RunPython.noop)]
