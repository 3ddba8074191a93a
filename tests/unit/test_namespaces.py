"""The namespace a shared-cluster test gets: a DNS label of its own."""

from __future__ import annotations

import re

from kcpshard_testkit.namespaces import namespace_for

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def test_a_parametrized_test_gets_a_dns_label_of_at_most_63() -> None:
    name = namespace_for(
        "test_failure_before_the_flip_aborts_and_the_old_slot_keeps_serving[never-ready]",
        "tests/e2e/test_roll_aborts.py::test_failure_before_the_flip_aborts[never-ready]",
    )
    assert DNS_LABEL.match(name) and len(name) <= 63, name
    assert name.startswith("t-failure-before-the-flip-aborts")


def test_two_cases_of_one_test_get_two_namespaces() -> None:
    one = namespace_for("test_x[Retain]", "tests/e2e/test_deletion.py::test_x[Retain]")
    two = namespace_for("test_x[Delete]", "tests/e2e/test_deletion.py::test_x[Delete]")
    assert one != two
    assert one == "t-x-retain-" + one.rsplit("-", 1)[1]
