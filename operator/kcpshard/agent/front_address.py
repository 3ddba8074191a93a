"""The shard's `spec.front` as the front agent uses it: the address and port HAProxy binds.

The agent reads it without pydantic, as the slot agent does: pydantic's import was a quarter of the
agent's memory, and the agent needs two fields. The checks are `api.spec.FrontSpec`'s (the CRD's
schema applies them before anything reaches the agent); tests/unit/test_front_address.py holds the two
to the same answers.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

DEFAULT_ADDRESS = "127.0.0.1"  # FrontSpec.address's default


class InvalidFront(ValueError):
    """spec.front that the agent cannot bind; the message names the field."""


@dataclass(frozen=True)
class FrontAddress:
    address: str
    port: int


def front_address(front: Mapping[str, Any]) -> FrontAddress:
    """`spec.front` (a mapping from the KcpShard) as an address and a port, or InvalidFront."""
    address = front.get("address", DEFAULT_ADDRESS)
    if not isinstance(address, str) or not address:
        raise InvalidFront("address: must be a non-empty string")
    if "port" not in front:
        raise InvalidFront("port: required")
    port = front["port"]
    if isinstance(port, bool) or not isinstance(port, int):
        raise InvalidFront(f"port: must be an integer, not {port!r}")
    if not 1 <= port <= 65535:
        raise InvalidFront(f"port: {port} is not between 1 and 65535")
    return FrontAddress(address, port)
