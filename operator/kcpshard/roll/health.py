"""Is the serving path whole? A shard says Ready only when a client gets answers. Pure.

Ready=True needs the front to confirm the active slot (its backend and port) and that slot's kcp to
pass its own /readyz (the host agent's `Ready` condition on the KcpSlot). Otherwise the shard stalls
with a reason that names the part that is down, and recovers by itself once it is back: nothing the
operator could restart would help (a kcp whose store does not answer is not fixed by a new kcp).
"""

from __future__ import annotations

import datetime

from kcpshard.api import conditions as cond
from kcpshard.api.models import SlotName
from kcpshard.k8s import names
from kcpshard.roll.actions import Stall, Wait
from kcpshard.roll.observed import FrontAvailability, Observed
from kcpshard.roll.rollout import job_of

# kcp's /readyz checks that depend on the store (k8s.io/apiserver's etcd health checks).
_STORE_CHECKS = ("etcd", "etcd-readiness")


def front_down(obs: Observed, active: SlotName | None) -> Stall | Wait | None:
    """None while the front Deployment is available and not being replaced. Else, once it has been down
    (or a replacement has made no progress) for roll.frontStartTimeoutSeconds: FrontFailed, naming the
    node and its pods' state. Before that, a serving shard whose front is down says FrontNotServing (no
    client gets an answer meanwhile); otherwise wait: a new shard for its front, and any shard while a
    replacement starts beside the serving front (which goes only once the new one is Ready), so no roll
    flips while two fronts run."""
    availability = obs.front_availability
    if availability is None or (availability.available and availability.replacing_since is None):
        return None
    if availability.node_down:
        return node_down(obs, availability.node_down)
    replacing = availability.available
    since_text = availability.replacing_since if replacing else availability.since
    timeout = obs.spec.roll.front_start_timeout_seconds
    until = (cond.parse_time(since_text) if since_text else obs.now) + datetime.timedelta(seconds=timeout)
    deployment = names.front_name(obs.name)
    detail = _pods_state(availability, deployment)
    node = obs.spec.node
    if obs.now >= until and replacing:
        serves = "the front it replaces serves on" if obs.status.active_slot else "nothing serves yet"
        return Stall(
            "FrontFailed",
            f"the new front on node {node} did not become ready within {timeout}s ({detail}); "
            f"{serves}: see kubectl describe deployment/{deployment}",
        )
    if obs.now >= until:
        return Stall(
            "FrontFailed",
            f"the front on node {node} has not been available for {timeout}s: {detail}; see kubectl "
            f"describe deployment/{deployment} and check that node {node} exists and runs pods",
        )
    if replacing:
        return Wait(f"the front on node {node} is being replaced ({detail})", until=until)
    if active is not None:
        return Stall(
            "FrontNotServing",
            f"the front on node {node} is not running ({detail}); clients get no answers from revision "
            f"{obs.status.active_revision} until it is",
        )
    return Wait(f"waiting for the front on node {node} to start ({detail})", until=until)


def node_down(obs: Observed, why: str) -> Stall:
    """The node is not Ready: its pods' state is unknown to Kubernetes, so the front's Deployment says
    unavailable whether or not HAProxy serves. Say so, with what the front agent (which reports to the
    API server itself, not through the kubelet) last said; no FrontFailed: restarting nothing would help."""
    front = obs.status.front
    if front is not None and front.observed_backend and front.observed_at:
        last = f"the front agent last reported serving slot {front.observed_backend} at {front.observed_at}"
    else:
        last = "the front agent has not reported serving"
    return Stall(
        "NodeNotReady",
        f"{why}: Kubernetes cannot see or manage the shard's pods there ({last}); the shard recovers by "
        f"itself once node {obs.spec.node} is Ready again: check its kubelet",
    )


def _pods_state(availability: FrontAvailability, deployment: str) -> str:
    pods = [p for p in availability.pods if not p.deleting] or list(availability.pods)
    if not pods:
        return f"no pod of deployment {deployment} exists"
    return "; ".join(f"pod {p.name} is {p.phase}" + (f" ({p.state})" if p.state else "") for p in pods)


def serving_problem(obs: Observed, active: SlotName) -> Stall | None:
    """None when the front serves the active slot and its kcp is ready; else what is down."""
    status = obs.status
    front = status.front
    view = obs.slots.get(active)
    port = view.port if view is not None else None
    if front is None or front.observed_backend != active.value or (port and front.observed_port != port):
        seen = f"slot {front.observed_backend} on port {front.observed_port}" if front else "nothing yet"
        return Stall(
            "FrontNotServing",
            f"the front on node {obs.spec.node} does not serve slot {active.value} (it reports {seen}); "
            f"clients get no answers from revision {status.active_revision}: see kubectl logs "
            f"deployment/{names.front_name(obs.name)}",
        )
    failed = view.failed("Ready") if view is not None else None
    if failed is None:
        return None
    detail = str(failed.get("message") or failed.get("reason") or "not ready")
    check = detail.removeprefix("[-]").split(" ", 1)[0]
    if check in _STORE_CHECKS:
        store = ", ".join(obs.spec.store.etcd.endpoints) if obs.spec.store.etcd else "its store"
        return Stall(
            "StoreNotReady",
            f"slot {active.value} serves revision {status.active_revision}, but its kcp cannot reach the "
            f"store ({store}): {detail}; clients get errors until the store answers again",
        )
    return Stall(
        "SlotNotReady",
        f"slot {active.value} serves revision {status.active_revision}, but its kcp is not ready: {detail}; "
        f"clients get errors until it is (kubectl logs job/{job_of(obs, active.value)})",
    )
