"""Every name the operator gives an owned object fits Kubernetes' limits for the longest shard name the
CRD admits, stays unique per input, and is unchanged for names that already fit."""

from __future__ import annotations

import re

import pytest

from kcpshard.api.models import MAX_SHARD_NAME, SHARD_NAME_RULE, SlotName, shard_name_problems
from kcpshard.k8s import names

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
LONGEST = "a" + "-b" * 31  # 63 characters, dashes where a cut may land
REVISION = "0123456789abcdef"


def _all_names(shard: str) -> dict[str, str]:
    slot = names.slot_object_name(shard, SlotName.B)
    return {
        "shared secret": names.shared_secret_name(shard),
        "kcpslot": slot,
        "slot job": names.slot_job_name(shard, SlotName.B, REVISION, 123),
        "slot admin secret": names.slot_admin_secret_name(slot),
        "front": names.front_name(shard),
        "admin secret": names.admin_kubeconfig_secret_name(shard),
        "backup job": names.backup_job_name(shard, "roll-" + REVISION),
        "lease": names.lease_name(shard),
    }


@pytest.mark.parametrize("shard", ["root", "s" * 40, LONGEST, "x" * MAX_SHARD_NAME])
def test_every_owned_name_is_a_dns_label(shard: str) -> None:
    for what, name in _all_names(shard).items():
        assert len(name) <= 63, what
        assert DNS_LABEL.match(name), (what, name)


def test_names_that_fit_are_unchanged() -> None:
    assert names.slot_job_name("root", SlotName.A, REVISION, 2) == "root-a-01234567-2"
    assert names.front_name("root") == "root-front"
    assert names.lease_name("root") == "kcpshard-root"


def test_long_names_differ_where_their_inputs_differ() -> None:
    a = names.slot_job_name(LONGEST, SlotName.A, REVISION, 1)
    b = names.slot_job_name(LONGEST, SlotName.A, REVISION, 2)
    other = names.slot_job_name(LONGEST, SlotName.B, REVISION, 1)
    assert len({a, b, other}) == 3
    assert a == names.slot_job_name(LONGEST, SlotName.A, REVISION, 1)  # stable


def test_fit_keeps_the_head_and_cuts_no_dash_before_the_hash() -> None:
    fitted = names.fit("a" * 54 + "-" + "b" * 20)
    assert len(fitted) == 63
    assert fitted.startswith("a" * 54)
    assert "--" not in fitted


def test_shard_name_rule_and_its_operator_check_agree() -> None:
    assert SHARD_NAME_RULE["rule"] == f"self.metadata.name.size() <= {MAX_SHARD_NAME}"
    assert shard_name_problems("s" * MAX_SHARD_NAME) == []
    assert shard_name_problems("s" * (MAX_SHARD_NAME + 1)) == [SHARD_NAME_RULE["message"]]
