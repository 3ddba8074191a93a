"""The longest shard name the CRD admits (63 characters, a label value) rolls with every owned object
made, each name within Kubernetes' limits (a Job's name is its pods' job-name label: 63); one character
more is refused at apply by the CRD's rule, with a message that says why. On the real API server, whose
Job validation refused the slot Jobs of long names before."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from kcpshard.api.models import MAX_SHARD_NAME, SHARD_NAME_RULE, SlotName
from kcpshard.k8s import names
from kcpshard.k8s.api import DEPLOYMENTS, JOBS, KCPSHARDS, KCPSLOTS, LEASES, SECRETS
from kcpshard_testkit import scenario
from kcpshard_testkit.kcpbin import make_kcp
from kcpshard_testkit.stack import Stack
from kcpshard_testkit.tcp import free_port

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.timeout(300)]

LONGEST = ("kcp-shard-with-a-name-as-long-as-the-crd-admits-" + "x" * 64)[:MAX_SHARD_NAME]


async def test_one_character_over_the_limit_is_refused_at_apply(stack: Stack, tmp_path: Path) -> None:
    manifest = stack.manifest(LONGEST + "y", free_port())
    path = tmp_path / "long.yaml"
    path.write_text(yaml.safe_dump(manifest))
    done = stack.kubectl("apply", "-f", str(path), check=False)
    print(done.stderr)
    assert done.returncode != 0
    assert SHARD_NAME_RULE["message"] in " ".join(done.stderr.split()), done.stderr
    assert stack.kubectl("get", "kshard", LONGEST + "y", check=False).returncode != 0


async def test_the_longest_name_rolls_with_backup_and_every_owned_object_fits(
    stack: Stack, bin_dir: Path
) -> None:
    port, _ = await scenario.serving_shard(stack, bin_dir, name=LONGEST)
    spec: dict[str, Any] = {
        "kcp": {"binary": make_kcp(bin_dir, "kcp-2", **scenario.FAST)},
        "roll": {"backup": True, "readyTimeoutSeconds": 30},
    }
    async with scenario.traffic(stack, port, name=LONGEST) as load:
        await stack.api.patch(KCPSHARDS, stack.namespace, LONGEST, {"spec": spec})
        shard = await scenario.wait_last_roll(stack, LONGEST)
        await scenario.more_requests(load)
    last = shard["status"]["lastRoll"]
    print(last, load.report)
    assert last["result"] == "Succeeded", last
    assert load.report.failed == 0, load.report.failures
    selector = f"kcpshard.dev/shard={LONGEST}"
    jobs = {
        j["metadata"]["name"]: j for j in (await stack.api.list(JOBS, stack.namespace, selector))["items"]
    }
    assert last["backup"]["job"] in jobs
    slot_jobs = [j for name, j in jobs.items() if name != last["backup"]["job"]]
    # The retired slot's Job went with it; the new slot's runs, its slot and revision in its labels.
    assert [j["metadata"]["labels"]["kcpshard.dev/slot"] for j in slot_jobs] == ["b"], jobs
    active = await stack.api.get(KCPSLOTS, stack.namespace, names.slot_object_name(LONGEST, SlotName.B))
    assert active["status"]["port"]
    await stack.api.get(DEPLOYMENTS, stack.namespace, names.front_name(LONGEST))
    for secret in (names.shared_secret_name(LONGEST), names.admin_kubeconfig_secret_name(LONGEST)):
        await stack.api.get(SECRETS, stack.namespace, secret)
    await stack.api.get(LEASES, stack.namespace, names.lease_name(LONGEST))
    for name in [*jobs, active["metadata"]["name"]]:
        assert len(name) <= 63, name
