"""The operator's own settings, from its command line: what it runs the agents with and who it is."""

from __future__ import annotations

from dataclasses import dataclass

from kcpshard.k8s import builders


@dataclass(frozen=True)
class OperatorConfig:
    image: str = builders.DEFAULT_IMAGE
    image_from_pod: bool = False  # no --image: the agents take the operator's own image (own_image.py)
    agent_command: tuple[str, ...] = ("kcpshard",)
    identity: str = ""
    lease_seconds: float = 15.0
