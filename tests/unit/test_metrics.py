"""The operator's metrics follow the shard's status and the roll report, and go with the shard."""

from typing import Any

from prometheus_client import REGISTRY

from kcpshard import metrics


def _value(name: str, **labels: str) -> float | None:
    return REGISTRY.get_sample_value(name, labels)


def _shard(generation: int, observed: int, rollout: bool = False, **conditions: str) -> dict[str, Any]:
    status: dict[str, Any] = {
        "observedGeneration": observed,
        "conditions": [{"type": t, "status": s} for t, s in conditions.items()],
    }
    if rollout:
        status["rollout"] = {"step": "Flipping"}
    return {"metadata": {"generation": generation}, "status": status}


def test_a_finished_roll_is_counted_by_result_and_reason_and_its_steps_observed() -> None:
    ok = {"namespace": "ns", "shard": "root", "result": "Succeeded", "reason": ""}
    before = _value("kcpshard_rolls_total", **ok) or 0.0
    steps_before = _value("kcpshard_roll_step_seconds_count", step="leaseHandover") or 0.0
    metrics.roll_ended("ns", "root", "Succeeded", None, {"leaseHandover": 2.5, "total": 8.0})
    metrics.roll_ended("ns", "root", "Aborted", "BackupFailed", {})
    assert _value("kcpshard_rolls_total", **ok) == before + 1
    aborted = {**ok, "result": "Aborted", "reason": "BackupFailed"}
    assert (_value("kcpshard_rolls_total", **aborted) or 0.0) >= 1
    assert _value("kcpshard_roll_step_seconds_count", step="leaseHandover") == steps_before + 1


def test_ready_stalled_and_rolling_come_from_the_status_of_the_current_generation() -> None:
    labels = {"namespace": "ns", "shard": "gauges"}
    metrics.shard_seen("ns", "gauges", _shard(3, 3, Ready="True", Stalled="False"))
    assert _value("kcpshard_shard_ready", **labels) == 1
    assert _value("kcpshard_stalled", **labels) == 0
    assert _value("kcpshard_roll_in_progress", **labels) == 0
    # A new generation not yet observed is not Ready, whatever the old condition says.
    metrics.shard_seen("ns", "gauges", _shard(4, 3, rollout=True, Ready="True"))
    assert _value("kcpshard_shard_ready", **labels) == 0
    assert _value("kcpshard_roll_in_progress", **labels) == 1
    metrics.shard_seen("ns", "gauges", _shard(4, 4, Ready="False", Stalled="True"))
    assert _value("kcpshard_stalled", **labels) == 1


def test_a_shard_this_replica_stops_acting_on_leaves_no_series() -> None:
    metrics.shard_seen("ns", "gone", _shard(1, 1, Ready="True"))
    assert _value("kcpshard_shard_ready", namespace="ns", shard="gone") == 1
    metrics.forget("ns", "gone")
    metrics.forget("ns", "gone")  # twice: nothing left to remove is no error
    for name in ("kcpshard_shard_ready", "kcpshard_stalled", "kcpshard_roll_in_progress"):
        assert _value(name, namespace="ns", shard="gone") is None


def test_front_restarts_count_up_per_shard() -> None:
    before = _value("kcpshard_front_restarts_total", namespace="ns", shard="front") or 0.0
    metrics.front_restarted("ns", "front", 2)
    assert _value("kcpshard_front_restarts_total", namespace="ns", shard="front") == before + 2


def test_a_failed_roll_is_one_series_with_its_current_reason_until_a_roll_succeeds() -> None:
    def failed(reason: str) -> float | None:
        return _value("kcpshard_failed_roll", namespace="ns", shard="f", reason=reason)

    body = _shard(2, 2, Ready="True")
    body["status"]["failedRoll"] = {"result": "Aborted", "reason": "BackupFailed"}
    metrics.shard_seen("ns", "f", body)
    assert failed("BackupFailed") == 1
    body["status"]["failedRoll"]["reason"] = "NeverReady"
    metrics.shard_seen("ns", "f", body)
    assert failed("BackupFailed") is None and failed("NeverReady") == 1
    del body["status"]["failedRoll"]
    metrics.shard_seen("ns", "f", body)
    assert failed("NeverReady") is None
