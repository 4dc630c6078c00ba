"""The console roles and the permissions each grants (one definition for migrations and code).

- viewer: read every page and endpoint.
- operator: viewer + requeue, acknowledge, trigger checkpoints/flushes, create requeue plans.
- admin: every permission of the project's apps.

Each role grants an API scope (``scope_for_user``): admin → ``admin``, operator → ``operate``,
viewer → ``read``. A token acts with the lower of its own scope and that one.
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
ADMIN_GROUP = "admin"
OPERATE_PERMISSION = "receipts_app.operate_receipts"
VIEW_PERMISSION = "receipts_app.view_memorydurablereceipt"


def scope_from_grants(*, is_superuser: bool, admin: bool, operate: bool, view: bool) -> str | None:
    """The one mapping from what a user holds to an API scope."""
    if is_superuser or admin:
        return "admin"
    if operate:
        return "operate"
    if view:
        return "read"
    return None


def scope_for_user(user: Any) -> str | None:
    """The API scope a user's current role grants, or None when they have no role."""
    if not getattr(user, "is_active", False):
        return None
    return scope_from_grants(
        is_superuser=user.is_superuser,
        admin=user.groups.filter(name=ADMIN_GROUP).exists(),
        operate=user.has_perm(OPERATE_PERMISSION),
        view=user.has_perm(VIEW_PERMISSION),
    )


def grant_annotations(user_ref: Any) -> dict[str, Any]:
    """``Exists`` annotations giving ``scope_from_grants`` its inputs for the user at
    ``user_ref`` (an ``OuterRef``), so a token lookup reads its user's role in the same query."""
    from django.contrib.auth.models import Group, Permission
    from django.db.models import Exists, Q

    def holds(permission: str) -> Exists:
        app_label, codename = permission.split(".", 1)
        return Exists(
            Permission.objects.filter(
                Q(user=user_ref) | Q(group__user=user_ref),
                codename=codename,
                content_type__app_label=app_label,
            )
        )

    return {
        "grant_admin": Exists(Group.objects.filter(user=user_ref, name=ADMIN_GROUP)),
        "grant_operate": holds(OPERATE_PERMISSION),
        "grant_view": holds(VIEW_PERMISSION),
    }


def scope_of_annotated(token: Any) -> str | None:
    """The role scope of a token's user, from a row annotated with ``grant_annotations``."""
    if not token.user.is_active:
        return None
    return scope_from_grants(
        is_superuser=token.user.is_superuser,
        admin=token.grant_admin,
        operate=token.grant_operate,
        view=token.grant_view,
    )


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
