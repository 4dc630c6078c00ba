"""The console roles and the permissions each grants (one definition for migrations and code).

- viewer: read every page and endpoint.
- operator: viewer + requeue, acknowledge, trigger checkpoints/flushes, create requeue plans.
- admin: every permission of the project's apps.
"""

from __future__ import annotations

from typing import Any

VIEW_CODENAMES = (
    "view_memorydurablereceipt",
    "view_receiptevent",
    "view_requeueplan",
    "view_session",
    "view_transcriptentry",
)
OPERATOR_EXTRA = ("operate_receipts", "add_requeueplan")
PROJECT_APPS = ("receipts_app", "sessions_app", "opensquilla_site", "operations_app")
ROLE_NAMES = ("viewer", "operator", "admin")


def sync_roles(group_model: Any, permission_model: Any) -> None:
    """Create or refresh the three groups. Takes the models so migrations can pass theirs."""
    perms = permission_model.objects

    def by_codename(codenames: tuple[str, ...]) -> list[Any]:
        return list(perms.filter(codename__in=codenames, content_type__app_label__in=PROJECT_APPS))

    viewer, _ = group_model.objects.get_or_create(name="viewer")
    viewer.permissions.set(by_codename(VIEW_CODENAMES))
    operator, _ = group_model.objects.get_or_create(name="operator")
    operator.permissions.set(by_codename(VIEW_CODENAMES + OPERATOR_EXTRA))
    admin, _ = group_model.objects.get_or_create(name="admin")
    admin.permissions.set(list(perms.filter(content_type__app_label__in=PROJECT_APPS)))


def ensure_roles() -> None:
    """Recreate the groups if missing (e.g. after a test flush); cheap when they exist."""
    from django.contrib.auth.models import Group, Permission

    if Group.objects.filter(name__in=ROLE_NAMES).count() == len(ROLE_NAMES):
        return
    from django.apps import apps
    from django.contrib.auth.management import create_permissions

    for app_config in apps.get_app_configs():
        create_permissions(app_config, verbosity=0)
    sync_roles(Group, Permission)
