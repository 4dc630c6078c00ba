"""The API caller and console clients of their own folders, for the mirror's surfaces."""

from tests.api.conftest import fast_password_hashing, operator, reader  # noqa: F401
from tests.console.conftest import operator_client, viewer_client  # noqa: F401
