"""Property-based run of our own OpenAPI schema against the app, in process.

Schemathesis generates requests for every operation; each response must not be a server
error and must match the schema (documented status code, content type and body shape).
Examples are few per operation so the suite stays fast; the run still covers every route.
"""

from __future__ import annotations

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from opensquilla_site.tokens import create_api_token
from opensquilla_site.wsgi import application
from tests.factories import make_receipt, make_session, make_user

# The coverage phase enumerates every boundary of every parameter (hundreds of calls per
# operation); the fuzzing phase with a few examples each finds the same classes of bugs here.
CONFIG = schemathesis.Config.from_dict({"phases": {"coverage": {"enabled": False}}})
schema = schemathesis.openapi.from_wsgi("/api/v1/openapi.json", application, config=CONFIG)

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]


@pytest.fixture
def keep_test_connection():
    """The raw WSGI app closes the DB connection after each request (Django's test Client
    suppresses that); closing it would drop the test transaction, so suppress it here too."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


@pytest.fixture
def admin_token(db, workspace, keep_test_connection) -> str:
    user = make_user("fuzzer", "admin")
    _token, plaintext = create_api_token(user=user, name="schemathesis", scope="admin")
    # A little real data, so lookups sometimes find something.
    session = make_session("agent:main:webchat:fuzz", messages=2)
    make_receipt(session_key=session.session_key, session_id=session.session_id)
    make_receipt(scope="repair", status="repair_failed")
    return plaintext


@pytest.mark.django_db
@schema.parametrize()
@settings(
    max_examples=8,
    deadline=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
)
def test_api_conforms_to_its_schema(case, admin_token):
    case.call_and_validate(headers={"Authorization": f"Bearer {admin_token}"}, checks=CHECKS)
