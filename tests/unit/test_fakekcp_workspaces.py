"""The workspace phase steps of the stand-in's controller."""

from __future__ import annotations

from kcpshard_testkit.fakekcp.workspaces import READIED_BY, next_state


def test_phases_in_order_and_readied_by() -> None:
    ws = {"metadata": {"name": "w", "uid": "u"}, "spec": {}, "status": {"phase": "Scheduling"}}
    step1 = next_state(ws, "https://front:6443", "root", "host_1")
    assert step1 is not None and step1["status"]["phase"] == "Initializing"
    assert step1["spec"]["URL"].startswith("https://front:6443/clusters/")
    step2 = next_state(step1, "https://front:6443", "root", "host_1")
    assert step2 is not None and step2["status"]["phase"] == "Ready"
    assert step2["metadata"]["annotations"][READIED_BY] == "host_1"
    assert next_state(step2, "https://front:6443", "root", "host_1") is None
    assert ws["status"]["phase"] == "Scheduling"  # input untouched
