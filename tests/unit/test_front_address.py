"""The front agent reads spec.front without pydantic (front_address.py); it must accept and refuse what
the operator's model FrontSpec does, so the two cannot drift apart."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from kcpshard.agent.front_address import FrontAddress, InvalidFront, front_address
from kcpshard.agent.lognotes import short
from kcpshard.api.models import FrontSpec

CASES: list[dict[str, Any]] = [
    {"port": 6443},
    {"address": "10.0.0.5", "port": 1},
    {"address": "::1", "port": 65535},
    {"address": "127.0.0.1"},  # no port
    {"address": "", "port": 6443},
    {"address": 5, "port": 6443},
    {"port": 0},
    {"port": 65536},
    {"port": 6443.5},
    {},
]
# A string or a boolean port never reaches either reader: the CRD's schema (type: integer) refuses it.
# The model is lax there ("6443" is 6443), the agent strict.


@pytest.mark.parametrize("front", CASES, ids=[str(c) for c in CASES])
def test_the_agent_accepts_and_refuses_what_the_model_does(front: dict[str, Any]) -> None:
    try:
        model = FrontSpec.model_validate(front)
    except ValidationError:
        model = None
    try:
        ours: FrontAddress | None = front_address(front)
    except InvalidFront as exc:
        ours = None
        assert str(exc).split(":")[0] in {"address", "port"}  # names the field
    if model is None:
        assert ours is None, front
    else:
        assert ours == FrontAddress(model.address, model.port), front


def test_short_still_reads_a_validation_error_where_pydantic_is_loaded() -> None:
    with pytest.raises(ValidationError) as info:
        FrontSpec.model_validate({"port": 0})
    assert short(info.value).startswith("port: ")
