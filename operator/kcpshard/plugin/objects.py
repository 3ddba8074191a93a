"""Reading the objects `kubectl kcpshard` gets from the API (plain dicts), and parsing them into the
models the roll's rules take: the plugin judges with the rules the operator decides with
(`kcpshard.roll`), not with a copy of them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from kcpshard.api import conditions as cond
from kcpshard.api.models import KcpShardStatus, RolloutStatus, RollReport

Obj = Mapping[str, Any]
M = TypeVar("M", bound=BaseModel)


class Unreadable(ValueError):
    """An object whose status the models do not accept (written by hand, or by another program)."""


def status_of(obj: Obj | None) -> Obj:
    return (obj or {}).get("status") or {}


def meta(obj: Obj | None) -> Obj:
    return (obj or {}).get("metadata") or {}


def condition(obj: Obj | None, type_: str) -> Obj:
    return cond.find(status_of(obj).get("conditions"), type_) or {}


def version(spec: Obj | None) -> str | None:
    version = ((spec or {}).get("kcp") or {}).get("version")
    return str(version) if version else None


def shard_status(shard: Obj) -> KcpShardStatus:
    return _parse(KcpShardStatus, status_of(shard), f"the status of kcpshard {meta(shard).get('name')}")


def rollout(roll: Obj) -> RolloutStatus:
    return _parse(RolloutStatus, roll, "status.rollout")


def report(roll: Obj) -> RollReport:
    return _parse(RollReport, roll, "a roll's report")


def _parse(model: type[M], data: Obj, what: str) -> M:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise Unreadable(f"{what} does not parse: {problems}") from None
