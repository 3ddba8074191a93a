"""The slot agent starts without pydantic: kcp's start in every roll waits on the agent's own start, and
pydantic's import was about a third of it. The agent checks nothing a model would."""

from __future__ import annotations

import subprocess
import sys


def test_the_slot_agent_does_not_import_pydantic() -> None:
    code = "import sys, kcpshard.agent.slot; print([m for m in sys.modules if m.startswith('pydantic')])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
