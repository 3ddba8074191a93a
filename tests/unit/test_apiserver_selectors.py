"""Label and field selectors of the emulated API server."""

import pytest

from kcpshard_testkit.apiserver.errors import ApiError
from kcpshard_testkit.apiserver.selectors import FieldSelector, LabelSelector

LABELS = {"app": "kcp", "tier": "front", "slot": "a"}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("app=kcp", True),
        ("app==kcp", True),
        ("app!=kcp", False),
        ("app=other", False),
        ("missing!=x", True),
        ("tier in (front, back)", True),
        ("tier in (back)", False),
        ("tier notin (back)", True),
        ("tier notin (front,back)", False),
        ("missing notin (x)", True),
        ("slot", True),
        ("missing", False),
        ("!missing", True),
        ("!slot", False),
        ("app=kcp,tier in (front),!missing", True),
        ("app=kcp,tier=back", False),
        ("", True),
    ],
)
def test_label_selector(text: str, expected: bool) -> None:
    assert LabelSelector.parse(text).matches(LABELS) is expected


def test_label_selector_gt_lt() -> None:
    assert LabelSelector.parse("n>3").matches({"n": "5"})
    assert not LabelSelector.parse("n<3").matches({"n": "5"})


def test_label_selector_refuses_garbage() -> None:
    with pytest.raises(ApiError) as err:
        LabelSelector.parse("app=(kcp")
    assert err.value.code == 400


def test_label_selector_from_match_expressions() -> None:
    sel = LabelSelector.from_match(
        {
            "matchLabels": {"app": "kcp"},
            "matchExpressions": [{"key": "tier", "operator": "In", "values": ["front"]}],
        }
    )
    assert sel.matches(LABELS)
    assert not sel.matches({"app": "kcp", "tier": "back"})


OBJ = {"metadata": {"name": "p1", "namespace": "ns1"}, "spec": {"nodeName": "n1", "hostNetwork": True}}
ALLOWED = ("metadata.name", "metadata.namespace", "spec.nodeName", "spec.hostNetwork")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("metadata.name=p1", True),
        ("metadata.name==p1", True),
        ("metadata.name!=p1", False),
        ("metadata.name=p1,metadata.namespace=ns1", True),
        ("metadata.namespace=other", False),
        ("spec.nodeName=n1", True),
        ("spec.hostNetwork=true", True),
    ],
)
def test_field_selector(text: str, expected: bool) -> None:
    assert FieldSelector.parse(text, ALLOWED).matches(OBJ) is expected


def test_field_selector_unknown_field_is_400() -> None:
    with pytest.raises(ApiError) as err:
        FieldSelector.parse("spec.other=x", ALLOWED)
    assert err.value.code == 400
    assert err.value.message == "field label not supported: spec.other"


def test_field_selector_aliases() -> None:
    sel = FieldSelector.parse(
        "regarding.name=x", ("involvedObject.name",), {"regarding.name": "involvedObject.name"}
    )
    assert sel.matches({"involvedObject": {"name": "x"}})
