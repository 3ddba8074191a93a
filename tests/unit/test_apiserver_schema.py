"""OpenAPI schema validation, defaulting and pruning of custom resources, with kube's messages."""

from pathlib import Path
from typing import Any

import pytest
import yaml

from kcpshard_testkit.apiserver.errors import invalid
from kcpshard_testkit.apiserver.schema import apply_defaults, cel_skipped, prune, unknown_fields, validate

WIDGETS = Path(__file__).parent.parent / "process" / "fixtures" / "widgets.yaml"
SCHEMA: dict[str, Any] = yaml.safe_load(WIDGETS.read_text())["spec"]["versions"][0]["schema"][
    "openAPIV3Schema"
]


def messages(obj: dict[str, Any]) -> list[str]:
    return [c.render() for c in validate(obj, SCHEMA)]


def widget(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": "test.kcpshard.dev/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": spec}


def test_valid_object_has_no_errors() -> None:
    obj = widget(
        size=3,
        color="blue",
        port=443,
        tags=["a"],
        labels={"x": "y"},
        when="2024-01-02T03:04:05Z",
        amount="50%",
        note=None,
        extra={"anything": {"goes": 1}},
    )
    assert messages(obj) == []


def test_required() -> None:
    assert messages({"metadata": {}}) == ["spec: Required value"]
    assert messages(widget()) == ["spec.size: Required value"]


def test_enum_message_as_kube() -> None:
    assert messages(widget(size=1, color="green")) == [
        'spec.color: Unsupported value: "green": supported values: "red", "blue"'
    ]


def test_maximum_and_minimum_messages() -> None:
    assert messages(widget(size=11)) == [
        "spec.size: Invalid value: 11: spec.size in body should be less than or equal to 10"
    ]
    assert messages(widget(size=0)) == [
        "spec.size: Invalid value: 0: spec.size in body should be greater than or equal to 1"
    ]
    assert messages(widget(size=1, port=70000)) == [
        "spec.port: Invalid value: 70000: spec.port in body should be less than or equal to 65535"
    ]


def test_type_errors() -> None:
    assert messages(widget(size="three")) == [
        'spec.size: Invalid value: "string": spec.size in body must be of type integer: "string"'
    ]
    assert messages(widget(size=1, amount=[1])) == [
        'spec.amount: Invalid value: "array": spec.amount in body must be of type integer-or-string: "array"'
    ]
    assert messages(widget(size=2.0)) == []  # an integral float is an integer for kube-openapi


def test_lengths_items_and_formats() -> None:
    assert messages(widget(size=1, note="toolong")) == ["spec.note: Too long: may not be more than 5 bytes"]
    assert messages(widget(size=1, tags=["a", "b", "c", "d"])) == [
        "spec.tags: Too many: 4: must have at most 3 items"
    ]
    assert messages(widget(size=1, tags=[""])) == [
        'spec.tags[0]: Invalid value: "": spec.tags[0] in body should be at least 1 chars long'
    ]
    assert messages(widget(size=1, when="yesterday")) == [
        'spec.when: Invalid value: "yesterday": spec.when in body must be of type date-time: "yesterday"'
    ]
    assert messages(widget(size=1, when="2024-01-02T03:04:05.123+02:00")) == []
    assert (
        'spec.port: Invalid value: 2147483648: spec.port in body must be of type int32: "2147483648"'
        in messages(widget(size=1, port=2**31))
    )
    assert messages(widget(size=1, labels={"k": 1})) == [
        'spec.labels[k]: Invalid value: "integer": spec.labels[k] in body must be of type string: "integer"'
    ]


def test_nullable() -> None:
    assert messages(widget(size=1, note=None)) == []
    assert messages(widget(size=1, color=None)) == [
        'spec.color: Invalid value: "null": spec.color in body must be of type string: "null"'
    ]


def test_invalid_error_wording() -> None:
    causes = validate({"apiVersion": "kcpshard.dev/v1alpha1", "spec": {"size": 1, "color": "Purple"}}, SCHEMA)
    err = invalid("Widget", "test.kcpshard.dev", "demo", causes)
    assert err.code == 422
    assert err.message == (
        'Widget.test.kcpshard.dev "demo" is invalid: spec.color: Unsupported value: "Purple": '
        'supported values: "red", "blue"'
    )
    assert err.details["causes"] == [
        {
            "reason": "FieldValueNotSupported",
            "field": "spec.color",
            "message": 'Unsupported value: "Purple": supported values: "red", "blue"',
        }
    ]
    two = invalid("Widget", "test.kcpshard.dev", "demo", validate(widget(size=0, color="x"), SCHEMA))
    assert two.message.startswith('Widget.test.kcpshard.dev "demo" is invalid: [spec.size: Invalid value: 0')


def test_defaults_are_applied_recursively() -> None:
    obj = widget(size=1)
    apply_defaults(obj, SCHEMA)
    assert obj["spec"]["color"] == "red"
    explicit = widget(size=1, color="blue")
    apply_defaults(explicit, SCHEMA)
    assert explicit["spec"]["color"] == "blue"


def test_null_on_non_nullable_field_is_defaulted() -> None:
    obj = widget(size=1, color=None)
    apply_defaults(obj, SCHEMA)
    assert obj["spec"]["color"] == "red"


def test_pruning_keeps_declared_and_preserved_fields() -> None:
    obj = widget(size=1, bogus=True, extra={"free": {"form": 1}}, labels={"a": "b"})
    obj["topLevel"] = 1
    obj["metadata"]["anything"] = "kept"
    assert sorted(unknown_fields(obj, SCHEMA)) == [".spec.bogus", ".topLevel"]
    prune(obj, SCHEMA)
    assert obj["spec"] == {"size": 1, "extra": {"free": {"form": 1}}, "labels": {"a": "b"}}
    assert "topLevel" not in obj
    assert obj["metadata"]["anything"] == "kept"


@pytest.mark.parametrize("pattern_value", ["v1.2.3", "v0.32.1-rc.1"])
def test_pattern(pattern_value: str) -> None:
    schema = {"type": "string", "pattern": r"^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$"}
    assert validate(pattern_value, schema, "spec.v") == []
    bad = validate("1.2", schema, "spec.v")
    assert bad[0].render() == (
        'spec.v: Invalid value: "1.2": spec.v in body should match '
        "'^v[0-9]+\\.[0-9]+\\.[0-9]+(-[0-9A-Za-z.-]+)?$'"
    )


def test_a_schema_with_cel_rules_says_they_were_not_checked_after_a_blocking_error() -> None:
    with_rules = {**SCHEMA, "x-kubernetes-validations": [{"rule": "self == oldSelf"}]}
    causes = cel_skipped(validate(widget(size=1, color="green"), with_rules), with_rules)
    assert [c.render() for c in causes] == [
        'spec.color: Unsupported value: "green": supported values: "red", "blue"',
        "<nil>: Invalid value: null: some validation rules were not checked because the object was "
        "invalid; correct the existing errors to complete validation",
    ]
    # no rules, or no blocking error: nothing added
    assert cel_skipped(validate(widget(size=1, color="green"), SCHEMA), SCHEMA) == validate(
        widget(size=1, color="green"), SCHEMA
    )
    assert cel_skipped([], with_rules) == []
