"""policy.core and policy.cases: cases builds on core, never the other way, also for types."""

from __future__ import annotations

import pytest

grimp = pytest.importorskip("grimp")


def test_policy_core_does_not_import_cases():
    graph = grimp.build_graph("plguard", exclude_type_checking_imports=False, cache_dir=None)
    assert graph.find_shortest_chain("plguard.policy.core", "plguard.policy.cases") is None
    assert graph.find_shortest_chain("plguard.policy.case", "plguard.policy.core") is None
