"""Roll metrics follow the roll report."""

from prometheus_client import REGISTRY

from kcpshard import metrics


def _value(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_a_finished_roll_is_counted_and_its_steps_observed() -> None:
    before = _value("kcpshard_rolls_total", result="Succeeded")
    steps_before = _value("kcpshard_roll_step_seconds_count", step="leaseHandover")
    metrics.roll_started("ns", "root")
    assert _value("kcpshard_roll_in_progress", namespace="ns", shard="root") == 1
    metrics.roll_finished("ns", "root", "Succeeded", {"leaseHandover": 2.5, "total": 8.0})
    assert _value("kcpshard_rolls_total", result="Succeeded") == before + 1
    assert _value("kcpshard_roll_step_seconds_count", step="leaseHandover") == steps_before + 1
    assert _value("kcpshard_roll_in_progress", namespace="ns", shard="root") == 0
