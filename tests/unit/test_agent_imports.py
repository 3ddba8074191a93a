"""The agents start without pydantic: kcp's start in every roll waits on the slot agent's own start, and
pydantic's import was about a third of it; in the front agent it was a quarter of its memory. Neither
checks anything a model would."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize("agent", ["slot", "front"])
def test_an_agent_does_not_import_pydantic(agent: str) -> None:
    code = f"import sys, kcpshard.agent.{agent}; print([m for m in sys.modules if m.startswith('pydantic')])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
