"""Create the console roles: viewer (read), operator (act), admin (everything)."""

from django.db import migrations

VIEW_MODELS = [
    ("receipts_app", "memorydurablereceipt"),
    ("receipts_app", "receiptevent"),
    ("receipts_app", "requeueplan"),
    ("sessions_app", "session"),
    ("sessions_app", "transcriptentry"),
]


def create_roles(apps, schema_editor):
    from django.contrib.auth.management import create_permissions

    # Permissions are normally created after migrate; make sure they exist now.
    for app_config in apps.get_app_configs():
        app_config.models_module = True
        create_permissions(app_config, apps=apps, verbosity=0)
        app_config.models_module = None

    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")

    def perms(codenames):
        return list(Permission.objects.filter(codename__in=codenames))

    view = [f"view_{model}" for _app, model in VIEW_MODELS]
    viewer, _ = Group.objects.get_or_create(name="viewer")
    viewer.permissions.set(perms(view))
    operator, _ = Group.objects.get_or_create(name="operator")
    operator.permissions.set(perms(view + ["operate_receipts", "add_requeueplan"]))
    admin, _ = Group.objects.get_or_create(name="admin")
    admin.permissions.set(
        Permission.objects.filter(
            content_type__app_label__in=["receipts_app", "sessions_app", "opensquilla_site"]
        )
    )


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
