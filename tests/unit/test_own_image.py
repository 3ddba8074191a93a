"""Without --image, the agents run the operator's own image, read from its pod."""

from __future__ import annotations

from typing import Any

import pytest

from fakes import RecordingApi
from kcpshard.controller.main import _parser, operator_kwargs
from kcpshard.controller.own_image import own_image
from kcpshard.k8s.api import PODS, ApiError


class PodApi(RecordingApi):
    default_namespace = "kcpshard-system"


def _pod(*containers: tuple[str, str]) -> dict[str, Any]:
    spec = {"containers": [{"name": name, "image": image} for name, image in containers]}
    return {"metadata": {"name": "op-1", "namespace": "kcpshard-system"}, "spec": spec}


async def test_the_operator_containers_image_from_its_own_pod(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POD_NAME", "op-1")
    api = PodApi()
    api.put(PODS, _pod(("sidecar", "proxy:1"), ("operator", "registry.test/kcpshard:0.2.0")))
    assert await own_image(api) == "registry.test/kcpshard:0.2.0"  # type: ignore[arg-type]
    assert api.requests == [("get", "pods", "op-1")]


async def test_no_pod_or_an_unreadable_one_leaves_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    api = PodApi()
    monkeypatch.delenv("POD_NAME", raising=False)
    assert await own_image(api) is None  # type: ignore[arg-type]
    monkeypatch.setenv("POD_NAME", "op-1")
    api.fail("get", "pods", error=ApiError(403, "Forbidden", "no"))
    assert await own_image(api) is None  # type: ignore[arg-type]


def test_only_a_missing_image_flag_asks_for_the_pods_image() -> None:
    assert operator_kwargs(_parser().parse_args([]))["memo"].config.image_from_pod is True
    given = operator_kwargs(_parser().parse_args(["--image", "mine:1"]))["memo"].config
    assert given.image == "mine:1" and given.image_from_pod is False
