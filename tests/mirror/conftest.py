"""The API caller and console clients of their own folders, for the mirror's surfaces."""

from tests.api.conftest import fast_password_hashing, reader  # noqa: F401
from tests.console.conftest import viewer_client  # noqa: F401
