"""The CRD files are generated from the models; they must not drift."""

from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from kcpshard.api import crds
from kcpshard.api.models import FRONT_ADDRESS_RULE, KcpShardSpec, is_ip, spec_rule_problems

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", sorted(crds.render()))
def test_crd_files_match_the_models(name: str) -> None:
    on_disk = (REPO / "crds" / name).read_text()
    assert on_disk == crds.render()[name], f"crds/{name} is stale: run `kcpshard crds`"


def _walk(node: object, path: str = "") -> list[str]:
    """Paths of schema nodes that break the structural-schema rules."""
    bad = []
    if isinstance(node, dict):
        if "$ref" in node or "anyOf" in node or "allOf" in node:
            bad.append(path)
        for key, value in node.items():
            bad += _walk(value, f"{path}.{key}")
    return bad


@pytest.mark.parametrize("crd", [crds.kcpshard_crd(), crds.kcpslot_crd()], ids=["kcpshard", "kcpslot"])
def test_schemas_are_structural(crd: dict) -> None:
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert _walk(schema) == []

    # every property node carries a type, which a structural schema requires
    def untyped(node: dict, path: str) -> list[str]:
        out = [] if "type" in node or node.get("x-kubernetes-preserve-unknown-fields") else [path]
        for key, sub in node.get("properties", {}).items():
            out += untyped(sub, f"{path}.{key}")
        if isinstance(node.get("items"), dict):
            out += untyped(node["items"], f"{path}[]")
        return out

    assert untyped(schema, "") == []


def test_shard_schema_has_enums_defaults_and_required() -> None:
    spec = crds.kcpshard_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert spec["properties"]["shape"]["enum"] == ["BlueGreen", "Single"]
    assert spec["properties"]["shape"]["default"] == "BlueGreen"
    assert set(spec["required"]) == {"kcp", "node", "store", "front"}
    assert spec["properties"]["front"]["properties"]["port"]["maximum"] == 65535
    # nested defaults apply only when the parent object is defaulted
    assert spec["properties"]["roll"]["default"] == {}
    assert spec["properties"]["roll"]["properties"]["readyTimeoutSeconds"]["default"] == 300


def test_crd_names_and_columns() -> None:
    shard = crds.kcpshard_crd()["spec"]
    assert shard["names"]["shortNames"] == ["kshard"]
    assert [c["name"] for c in shard["versions"][0]["additionalPrinterColumns"] if not c.get("priority")] == [
        "Ready",
        "Active",
        "Revision",
        "Step",
        "Age",
    ]
    slot = crds.kcpslot_crd()["spec"]
    assert [c["name"] for c in slot["versions"][0]["additionalPrinterColumns"] if not c.get("priority")] == [
        "Shard",
        "Slot",
        "Port",
        "Ready",
        "Flipped",
        "Probed",
        "Age",
    ]


def test_example_validates_against_the_model() -> None:
    doc = yaml.safe_load((REPO / "examples" / "kcpshard.yaml").read_text())
    spec = KcpShardSpec.model_validate(doc["spec"])
    assert spec.front.port == 6443
    with pytest.raises(ValidationError):
        KcpShardSpec.model_validate({**doc["spec"], "shape": "Purple"})


def test_the_fleet_example_is_a_root_and_two_shards_that_name_it() -> None:
    docs = list(yaml.safe_load_all((REPO / "examples" / "fleet.yaml").read_text()))
    specs = {doc["metadata"]["name"]: KcpShardSpec.model_validate(doc["spec"]) for doc in docs}
    assert [name for name, spec in specs.items() if spec.shard.root] == ["root"]
    others = [spec for spec in specs.values() if not spec.shard.root]
    assert len(others) == 2
    assert all(
        spec.shard.root_shard_ref is not None and spec.shard.root_shard_ref.name == "root" for spec in others
    )
    # one store, apart by key prefix, and a front port each
    assert len({spec.store.etcd.prefix for spec in specs.values() if spec.store.etcd is not None}) == 3
    assert len({spec.front.port for spec in specs.values()}) == 3


def test_no_category_is_also_a_resource_name() -> None:
    # kubectl expands a category before it looks a name up: `kubectl get kcpshard root` failed with
    # "you must specify only one resource" while `kcpshard` was both a category and a singular name.
    names: set[str] = set()
    categories: set[str] = set()
    for crd in (crds.kcpshard_crd(), crds.kcpslot_crd()):
        given = crd["spec"]["names"]
        names |= {given["plural"], given["singular"], given["kind"].lower(), *given["shortNames"]}
        categories |= set(given["categories"])
    assert categories == {"kcp"}
    assert categories & names == set()


def test_the_front_address_must_be_an_ip_at_apply() -> None:
    spec = crds.kcpshard_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    address = spec["properties"]["front"]["properties"]["address"]
    assert address["x-kubernetes-validations"] == [FRONT_ADDRESS_RULE]
    assert FRONT_ADDRESS_RULE["rule"] == "isIP(self)"  # Kubernetes' CEL IP library, since 1.30


@pytest.mark.parametrize(
    ("address", "ip"),
    [
        ("127.0.0.1", True),
        ("::1", True),
        ("10.0.0.5", True),
        ("localhost", False),
        ("kcp.example.com", False),
        ("127.0.0.256", False),
        ("fe80::1%eth0", False),  # CEL refuses a zone
        ("::ffff:10.0.0.5", False),  # and an IPv4-mapped address
    ],
)
def test_the_operator_checks_the_address_as_cel_does(address: str, ip: bool) -> None:
    # A server that skips CEL: the operator's own check stalls the shard with InvalidSpec instead.
    assert is_ip(address) is ip
    doc = yaml.safe_load((REPO / "examples" / "kcpshard.yaml").read_text())
    spec = KcpShardSpec.model_validate({**doc["spec"], "front": {**doc["spec"]["front"], "address": address}})
    assert any("front.address" in p for p in spec_rule_problems(spec)) is not ip
