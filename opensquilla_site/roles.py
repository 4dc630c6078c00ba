"""The console roles and the permissions each grants (one definition for migrations and code).

- viewer: read every page and endpoint.
- operator: viewer + requeue, acknowledge, trigger checkpoints/flushes, create requeue plans.
- admin: every permission of the project's apps.

Each role grants an API scope (``scope_for_user``): admin → ``admin``, operator → ``operate``,
viewer → ``read``. A token acts with the lower of its own scope and that one.
"""

# SQL below interpolates table names from model metadata only; values are bound parameters.
# ruff: noqa: S608

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


def grant_columns_sql(user_id: str) -> tuple[str, list[str]]:
    """Three boolean columns, ``grant_admin``, ``grant_operate`` and ``grant_view``, that give
    ``scope_from_grants`` its inputs for the user whose id is the SQL expression ``user_id``,
    with their parameters, so a token lookup reads its user's role in the same statement.

    Each permission is two ``EXISTS`` (held directly, held through a group), each an index
    probe: the ORM's one ``EXISTS`` over ``user = x OR group.user = x`` could use no index and,
    compiled per request, was most of an API call's time (bench/concurrent_writers.py).
    """
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group, Permission
    from django.contrib.contenttypes.models import ContentType

    user_model = get_user_model()
    user_groups = user_model.groups.through._meta.db_table  # type: ignore[attr-defined]
    user_perms = user_model.user_permissions.through._meta.db_table  # type: ignore[attr-defined]
    group_perms = Group.permissions.through._meta.db_table
    group, perm, ctype = Group._meta.db_table, Permission._meta.db_table, ContentType._meta.db_table
    held_permission = (
        f"JOIN {perm} p ON p.id = x.permission_id "
        f"JOIN {ctype} ct ON ct.id = p.content_type_id "
        "WHERE p.codename = %s AND ct.app_label = %s"
    )

    def holds(permission: str) -> tuple[str, list[str]]:
        app_label, codename = permission.split(".", 1)
        sql = (
            f"(EXISTS (SELECT 1 FROM {user_perms} x {held_permission} AND x.user_id = {user_id})"
            f" OR EXISTS (SELECT 1 FROM {user_groups} ug "
            f"JOIN {group_perms} x ON x.group_id = ug.group_id {held_permission} "
            f"AND ug.user_id = {user_id}))"
        )
        return sql, [codename, app_label, codename, app_label]

    operate, operate_params = holds(OPERATE_PERMISSION)
    view, view_params = holds(VIEW_PERMISSION)
    admin = (
        f"EXISTS (SELECT 1 FROM {user_groups} ug JOIN {group} g ON g.id = ug.group_id "
        f"WHERE g.name = %s AND ug.user_id = {user_id})"
    )
    sql = f"{admin} AS grant_admin, {operate} AS grant_operate, {view} AS grant_view"
    return sql, [ADMIN_GROUP, *operate_params, *view_params]


def scope_of_annotated(token: Any) -> str | None:
    """The role scope of a token's user, from a row read with ``grant_columns_sql``."""
    if not token.user.is_active:
        return None
    return scope_from_grants(
        is_superuser=token.user.is_superuser,
        admin=bool(token.grant_admin),
        operate=bool(token.grant_operate),
        view=bool(token.grant_view),
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
