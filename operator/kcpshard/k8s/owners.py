"""Owner references: a builder the host agents share with the operator, kept apart from the object
builders so an agent does not import pydantic (its start is on the roll's path)."""

from __future__ import annotations

from typing import Any

from kcpshard.api.basics import API_VERSION


def owner_reference(owner: dict[str, Any], *, controller: bool = True) -> dict[str, Any]:
    meta = owner["metadata"]
    return {
        "apiVersion": owner.get("apiVersion", API_VERSION),
        "kind": owner["kind"],
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": controller,
        "blockOwnerDeletion": True,
    }
