"""Which RPCs a gateway no longer answers, from its version or its retired ledger."""

from __future__ import annotations

import pytest

from operations_app.gateway_link.capabilities import RETIRED_IN_0_5_5, unanswered_methods


@pytest.mark.parametrize(
    ("version", "retired", "gone"),
    [
        ("0.3.0", False, ()),
        ("0.5.3", False, ()),
        ("0.5.4", False, ()),
        ("0.5.5", False, RETIRED_IN_0_5_5),
        ("v0.5.6rc1", False, RETIRED_IN_0_5_5),
        ("1.0.0", False, RETIRED_IN_0_5_5),
        ("", False, ()),
        ("0.5.3", True, RETIRED_IN_0_5_5),  # the mirror saw V044 before the link saw 0.5.5
        (None, True, RETIRED_IN_0_5_5),
    ],
)
def test_the_repair_rpcs_are_gone_from_0_5_5_or_a_retired_ledger(version, retired, gone):
    assert unanswered_methods(version, ledger_retired=retired) == gone
    assert ("memory.repair.run" in unanswered_methods(version, ledger_retired=retired)) == bool(
        gone
    )
