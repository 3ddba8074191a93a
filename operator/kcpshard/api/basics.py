"""The API's names that need no pydantic: the host agents import these, and start faster without it
(kcp's start in a roll waits on the slot agent's start)."""

from __future__ import annotations

import enum

GROUP = "kcpshard.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"

# The store endpoints the host agent checks and kcp's etcd client dials (kcpshard.agent.storecheck parses
# with the same list): the CRD admits no other scheme.
STORE_SCHEMES = ("http", "https")


class SlotName(enum.StrEnum):
    A = "a"
    B = "b"

    def other(self) -> SlotName:
        return SlotName.B if self is SlotName.A else SlotName.A
