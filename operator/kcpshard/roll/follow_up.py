"""What a handler saw decides the next action of the same round: a failure, a refusal of the API
server, kcp's lease holder, the probe. Pure."""

from __future__ import annotations

from kcpshard.kcp import flags as kcp_flags
from kcpshard.roll import lease, steps
from kcpshard.roll.actions import Action, Advance, Stall, Step
from kcpshard.roll.failures import failure_action
from kcpshard.roll.observed import LeaseReading, Observed
from kcpshard.roll.outcomes import (
    Failed,
    HolderSeen,
    LeaseWatched,
    NoNewHolder,
    Outcome,
    ProbeNotReady,
    ProbeReady,
    Refused,
    SlotCreated,
)
from kcpshard.roll.rollout import deadline, job_of, roll_spec
from kcpshard.roll.route import next_step

# A request the API server refused (400, 403, 422) is asked again this rarely, while the shard is Stalled.
API_REJECTED = "ApiRejected"
REFUSED_RETRY_SECONDS = 60.0


def follow_up(obs: Observed, outcome: Outcome) -> Action:
    """What a handler saw decides the next action of the same round."""
    if isinstance(outcome, Failed):
        return failure_action(obs, outcome.reason, outcome.message)
    if isinstance(outcome, Refused):
        return Stall(
            reason=API_REJECTED,
            message=f"the API server refused a request of the operator ({outcome.status} {outcome.reason}): "
            f"{outcome.message}; the operator tries again every {REFUSED_RETRY_SECONDS:.0f}s and on any "
            "change of the shard",
        )
    rollout = obs.status.rollout
    if rollout is None:
        raise ValueError(f"{outcome!r} with no roll under way")
    if isinstance(outcome, SlotCreated):
        # Stamped when the Job was created: the node's start of it runs from there (the report's slotStart)
        stamps = (("slotCreated", outcome.at),)
        return Advance(next_step(rollout, Step.STARTING), f"slot {outcome.slot} created", stamps=stamps)
    spec = roll_spec(obs)
    if isinstance(outcome, LeaseWatched):
        first = obs.kcp_lease or LeaseReading()
        until = deadline(rollout, spec.roll.lease_timeout_seconds)
        return lease.after_watch(first, outcome.last, rollout, kcp_flags.front_url(spec), obs.now, until)
    if isinstance(outcome, HolderSeen):
        return lease.handed_over(outcome.holder, rollout)
    if isinstance(outcome, NoNewHolder):
        return failure_action(
            obs,
            "LeaseTimeout",
            f"no new holder of kcp's controller lease within {outcome.waited:.0f}s ({outcome.detail}); kcp's "
            f"controllers are not running: see kubectl logs job/{job_of(obs, rollout.to_slot)}",
        )
    if isinstance(outcome, ProbeReady):
        ready = f"workspace {outcome.workspace} became Ready in {outcome.ready_seconds:.2f}s"
        return steps.probed(rollout, f"{ready} and was deleted", outcome.stamps)
    if isinstance(outcome, ProbeNotReady):
        return failure_action(
            obs,
            "ProbeFailed",
            f"the probe workspace did not become Ready within {outcome.waited:.0f}s ({outcome.detail}); the "
            "shard serves, but its controllers do not work: see kcp's logs",
        )
    raise TypeError(f"no rule follows {outcome!r}")
