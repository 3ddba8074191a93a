"""Merge patch, JSON patch and the light strategic merge patch of the emulated API server."""

from typing import Any

import pytest

from kcpshard_testkit.apiserver.errors import ApiError
from kcpshard_testkit.apiserver.patching import json_patch, merge_patch, strategic_merge_patch

DOC: dict[str, Any] = {
    "metadata": {"name": "x", "labels": {"a": "1", "b": "2"}},
    "spec": {"list": [1, 2], "n": 1},
}


def test_merge_patch_merges_objects_removes_nulls_and_replaces_lists() -> None:
    out = merge_patch(DOC, {"metadata": {"labels": {"a": None, "c": "3"}}, "spec": {"list": [9]}})
    assert out == {"metadata": {"name": "x", "labels": {"b": "2", "c": "3"}}, "spec": {"list": [9], "n": 1}}
    assert DOC["spec"]["list"] == [1, 2]  # the input is not mutated


def test_json_patch_operations() -> None:
    ops = [
        {"op": "add", "path": "/spec/list/-", "value": 3},
        {"op": "add", "path": "/spec/list/0", "value": 0},
        {"op": "replace", "path": "/spec/n", "value": 2},
        {"op": "remove", "path": "/metadata/labels/b"},
        {"op": "copy", "from": "/spec/n", "path": "/spec/m"},
        {"op": "move", "from": "/spec/m", "path": "/spec/k"},
        {"op": "test", "path": "/spec/k", "value": 2},
        {"op": "add", "path": "/metadata/labels/x~1y", "value": "z"},
    ]
    out = json_patch(DOC, ops)
    assert out["spec"] == {"list": [0, 1, 2, 3], "n": 2, "k": 2}
    assert out["metadata"]["labels"] == {"a": "1", "x/y": "z"}


def test_json_patch_failed_test_is_422_like_kube() -> None:
    with pytest.raises(ApiError) as err:
        json_patch(DOC, [{"op": "test", "path": "/metadata/name", "value": "other"}])
    assert err.value.code == 422
    assert err.value.reason == "Invalid"
    assert err.value.details["causes"][0]["message"] == "testing value /metadata/name failed: test failed"


def test_json_patch_missing_path_is_422() -> None:
    with pytest.raises(ApiError) as err:
        json_patch(DOC, [{"op": "replace", "path": "/spec/nothere/x", "value": 1}])
    assert err.value.code == 422


def test_json_patch_requires_a_list() -> None:
    with pytest.raises(ApiError) as err:
        json_patch(DOC, {"op": "add"})
    assert err.value.code == 400


def test_strategic_merge_patch_merges_containers_by_name_and_drops_directives() -> None:
    pod = {
        "spec": {"containers": [{"name": "a", "image": "x:1"}, {"name": "b", "image": "y:1"}]},
        "metadata": {"finalizers": ["f1"]},
    }
    patch = {
        "spec": {
            "$setElementOrder/containers": [{"name": "a"}, {"name": "b"}],
            "containers": [{"name": "b", "image": "y:2"}, {"name": "c", "image": "z:1"}],
        },
        "metadata": {"finalizers": ["f2"]},
    }
    out = strategic_merge_patch(pod, patch)
    assert out["spec"]["containers"] == [
        {"name": "a", "image": "x:1"},
        {"name": "b", "image": "y:2"},
        {"name": "c", "image": "z:1"},
    ]
    assert "$setElementOrder/containers" not in out["spec"]
    assert out["metadata"]["finalizers"] == ["f1", "f2"]


def test_strategic_merge_patch_delete_directive() -> None:
    pod = {"spec": {"containers": [{"name": "a"}, {"name": "b"}]}}
    out = strategic_merge_patch(pod, {"spec": {"containers": [{"name": "a", "$patch": "delete"}]}})
    assert out["spec"]["containers"] == [{"name": "b"}]
