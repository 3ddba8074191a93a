"""Ordering of resourceVersions.

Since Kubernetes 1.35 (KEP-5504, "Comparable Resource Version", GA) the resourceVersions of objects of one
type may be compared: each is a decimal integer without leading zeros, and a larger one is a later write.
A server that hands out anything else (an older or a third-party API server) is not ordered: then nothing
is known to be older, and callers keep their old behaviour of taking what arrives.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def _comparable(version: str) -> bool:
    return version.isdecimal() and version.isascii() and (version == "0" or not version.startswith("0"))


def older(version: str | None, than: str | None) -> bool:
    """`version` is known to be an earlier write than `than` (False when either cannot be ordered)."""
    if not version or not than or not (_comparable(version) and _comparable(than)):
        return False
    return (len(version), version) < (len(than), than)


def version_of(obj: Mapping[str, Any] | None) -> str | None:
    value = ((obj or {}).get("metadata") or {}).get("resourceVersion")
    return str(value) if value else None
