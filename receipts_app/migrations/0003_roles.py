"""Create the console roles: viewer (read), operator (act), admin (everything)."""

from django.db import migrations


def create_roles(apps, schema_editor):
    from django.contrib.auth.management import create_permissions

    # Permissions are normally created after migrate; make sure they exist now.
    for app_config in apps.get_app_configs():
        app_config.models_module = True
        create_permissions(app_config, apps=apps, verbosity=0)
        app_config.models_module = None

    from opensquilla_site.roles import sync_roles

    sync_roles(apps.get_model("auth", "Group"), apps.get_model("auth", "Permission"))


def drop_roles(apps, schema_editor):
    apps.get_model("auth", "Group").objects.filter(
        name__in=["viewer", "operator", "admin"]
    ).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("receipts_app", "0002_operate_permission"),
        ("sessions_app", "0001_initial"),
        ("opensquilla_site", "0001_initial"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [migrations.RunPython(create_roles, drop_roles)]
