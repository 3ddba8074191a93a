"""Bad input, as a person types it with the real kubectl.

What the CRD's schema can judge is refused by the API server, with a message naming the field, and
nothing is created. What only the operator can judge (a non-root shard without its cache kubeconfig, a
kcp version the flag table does not know, a front port another KcpShard has) is accepted and ends in
Stalled=True InvalidSpec with a message saying what to change, before anything runs. What only the node
can judge (the front port held by another process, a store that does not answer) ends in Stalled=True
FrontFailed or StoreUnreachable, and kcp never starts.

Every fault is real: a listening socket holds the port, the store endpoint is a closed port.
"""

from __future__ import annotations

import copy
import json
import socket
from pathlib import Path
from typing import Any

import pytest
import yaml

from kcpshard_testkit import scenario
from kcpshard_testkit.kcpbin import make_kcp
from kcpshard_testkit.stack import Stack
from kcpshard_testkit.tcp import free_port
from kcpshard_testkit.waiting import wait_for

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.timeout(300)]

FAST = scenario.FAST


def _manifest(stack: Stack, name: str, port: int, **spec: Any) -> dict[str, Any]:
    return stack.manifest(name, port, **spec)


def _apply(stack: Stack, tmp_path: Path, manifest: dict[str, Any]) -> tuple[int, str]:
    """`kubectl apply -f` of the manifest written as YAML; (exit code, stdout and stderr)."""
    path = tmp_path / f"{manifest['metadata']['name']}.yaml"
    path.write_text(yaml.safe_dump(manifest, sort_keys=False))
    done = stack.kubectl("apply", "-f", str(path), check=False)
    return done.returncode, done.stdout + done.stderr


async def _stalled_after_apply(stack: Stack, tmp_path: Path, manifest: dict[str, Any], reason: str) -> str:
    """`kubectl apply` of the manifest, accepted; the shard ends Stalled for `reason`: its message."""
    code, output = _apply(stack, tmp_path, manifest)
    assert code == 0, output
    name = manifest["metadata"]["name"]
    stalled = scenario.condition(await scenario.wait_stalled(stack, name, timeout=60), "Stalled")
    print(stalled)
    assert stalled["reason"] == reason, stalled
    return str(stalled["message"])


def _stalled_reason(stack: Stack, name: str) -> str:
    done = stack.kubectl(
        "get", "kshard", name, "-o", 'jsonpath={.status.conditions[?(@.type=="Stalled")].reason}'
    )
    return done.stdout.strip()


def _described_events(stack: Stack, name: str) -> str:
    """The Events part of `kubectl describe` (the conditions above it name the reason too)."""
    described = stack.kubectl("describe", "kshard", name).stdout
    assert "\nEvents:" in described, described
    return described.split("\nEvents:", 1)[1]


async def _nothing_started(stack: Stack, name: str) -> None:
    """No KcpSlot, no slot Job, no kcp process: the shard stalled before its first slot."""
    assert await scenario.slot_names(stack, name) == []
    assert await scenario.slot_jobs(stack, name) == []
    assert scenario.kcp_processes(stack) == []


# ----- refused by the schema ---------------------------------------------------------------------


def _set(manifest: dict[str, Any], path: str, value: Any) -> None:
    *parents, last = path.split(".")
    node = manifest
    for key in parents:
        node = node.setdefault(key, {})
    node[last] = value


def _drop(manifest: dict[str, Any], path: str) -> None:
    *parents, last = path.split(".")
    node = manifest
    for key in parents:
        node = node[key]
    del node[last]


SCHEMA = {
    # case: (edit of the manifest, words kubectl's error must hold)
    "shape-not-in-enum": (
        lambda m: _set(m, "spec.shape", "Sideways"),
        ["spec.shape", "Unsupported value", '"Sideways"', "BlueGreen", "Single"],
    ),
    "no-node": (lambda m: _drop(m, "spec.node"), ["spec.node", "Required value"]),
    "no-front-port": (lambda m: _drop(m, "spec.front.port"), ["spec.front.port", "Required value"]),
    "port-70000": (
        lambda m: _set(m, "spec.front.port", 70000),
        ["spec.front.port", "70000", "less than or equal to 65535"],
    ),
    "version-not-semver": (
        lambda m: _set(m, "spec.kcp.version", "0.32"),
        ["spec.kcp.version", '"0.32"', "should match"],
    ),
    "stop-timeout-inside-shutdown-delay": (
        lambda m: _set(m, "spec.roll", {"stopTimeoutSeconds": m["spec"]["shutdownDelaySeconds"]}),
        ["spec: Invalid value", "roll.stopTimeoutSeconds must be longer than shutdownDelaySeconds"],
    ),
    "ready-timeout-0": (
        lambda m: _set(m, "spec.roll", {"readyTimeoutSeconds": 0}),
        ["spec.roll.readyTimeoutSeconds", "greater than or equal to 1"],
    ),
    # CEL's isIP (Kubernetes' IP library): HAProxy would refuse a name a round later, as FrontFailed
    "front-address-a-name": (
        lambda m: _set(m, "spec.front.address", "localhost"),
        ["spec.front.address", "must be an IP address"],
    ),
}


@pytest.mark.parametrize("case", sorted(SCHEMA))
async def test_schema_refuses_the_manifest_and_nothing_is_created(
    stack: Stack, tmp_path: Path, case: str
) -> None:
    edit, words = SCHEMA[case]
    manifest = copy.deepcopy(_manifest(stack, "bad", free_port()))
    edit(manifest)
    code, output = _apply(stack, tmp_path, manifest)
    print(case, output)
    assert code != 0, output
    assert 'The KcpShard "bad" is invalid:' in output, output
    for word in words:
        assert word in output, (word, output)
    assert "Traceback" not in output
    got = stack.kubectl("get", "kshard", "bad", check=False)
    assert got.returncode != 0
    assert "NotFound" in got.stderr and '"bad" not found' in got.stderr, got.stderr


# ----- judged by the operator --------------------------------------------------------------------


OPERATOR: dict[str, tuple[dict[str, Any], list[str]]] = {
    # case: (spec fields, words the Stalled message must hold). One case shows what a person sees with
    # kubectl; each other invalid spec differs only in its message, which the unit test
    # test_reconcile_round.py::test_an_invalid_spec_stalls_before_anything_starts proves per case.
    "non-root-without-cache-kubeconfig": (
        {"shard": {"name": "beta", "root": False}},
        ["a non-root shard needs shard.cacheKubeconfigSecretRef (kcp --cache-kubeconfig)"],
    ),
}


@pytest.mark.parametrize("case", sorted(OPERATOR))
async def test_operator_stalls_an_invalid_spec_before_starting_anything(
    stack: Stack, tmp_path: Path, case: str
) -> None:
    spec, words = OPERATOR[case]
    code, output = _apply(stack, tmp_path, _manifest(stack, "bad", free_port(), **spec))
    assert code == 0, output
    assert "kcpshard.dev/bad created" in output, output
    shard = await scenario.wait_stalled(stack, "bad", timeout=60)
    stalled = scenario.condition(shard, "Stalled")
    print(case, stalled)
    assert stalled["reason"] == "InvalidSpec", stalled
    for word in words:
        assert word in stalled["message"], stalled["message"]
    assert scenario.condition(shard, "Ready")["status"] == "False"
    assert scenario.condition(shard, "Ready")["reason"] == "InvalidSpec"
    assert not (shard.get("status") or {}).get("activeSlot")
    assert _stalled_reason(stack, "bad") == "InvalidSpec"
    event = await scenario.wait_event(stack, "bad", "InvalidSpec")
    assert event["type"] == "Warning" and event["message"] == stalled["message"]
    # What a person types to wait for it and to see why.
    waited = stack.kubectl("wait", "kshard/bad", "--for=condition=Stalled", "--timeout=30s")
    assert "condition met" in waited.stdout, waited
    assert "InvalidSpec" in _described_events(stack, "bad")
    await _nothing_started(stack, "bad")


async def test_second_shard_on_a_taken_front_port_stalls_and_the_first_is_unaffected(
    stack: Stack, bin_dir: Path, tmp_path: Path
) -> None:
    kcp = {"version": "v0.32.1", "binary": make_kcp(bin_dir, "kcp-1", **FAST)}
    port = free_port()
    code, output = _apply(stack, tmp_path, _manifest(stack, "first", port, kcp=kcp))
    assert code == 0, output
    await scenario.wait_ready(stack, "first")
    # The second shard has its own store prefix: were it started, it would not share the first's data.
    second = _manifest(stack, "second", port, kcp=kcp)
    second["spec"]["store"]["etcd"]["prefix"] = "/second"
    code, output = _apply(stack, tmp_path, second)
    assert code == 0, output
    shard = await scenario.wait_stalled(stack, "second", timeout=60)
    stalled = scenario.condition(shard, "Stalled")
    assert stalled["reason"] == "InvalidSpec", stalled
    assert (
        f"front port {port} on node {stack.info.node} is already used by KcpShard {stack.namespace}/first: "
        "choose another spec.front.port"
    ) in stalled["message"]
    assert _stalled_reason(stack, "second") == "InvalidSpec"
    await scenario.wait_event(stack, "second", "InvalidSpec")
    assert await scenario.slot_names(stack, "second") == []
    assert await scenario.slot_jobs(stack, "second") == []
    # The first keeps serving through its front, untouched.
    first = await scenario.wait_ready(stack, "first")
    assert first["status"]["activeSlot"] == "a"
    assert scenario.condition(first, "Stalled")["status"] == "False"
    async with scenario.traffic(stack, port, name="first") as load:
        await scenario.more_requests(load)
    assert load.report.failed == 0, load.report.failures
    assert len(scenario.kcp_processes(stack)) == 1  # only the first's


async def test_a_copied_manifest_on_the_same_store_stalls_and_the_first_keeps_serving(
    stack: Stack, bin_dir: Path, tmp_path: Path
) -> None:
    """A user copies a shard's manifest and changes only its name: same etcd, same key prefix."""
    kcp = {"version": "v0.32.1", "binary": make_kcp(bin_dir, "kcp-1", **FAST)}
    port = free_port()
    first = _manifest(stack, "first", port, kcp=kcp)
    code, output = _apply(stack, tmp_path, first)
    assert code == 0, output
    await scenario.wait_ready(stack, "first")
    async with scenario.traffic(stack, port, name="first") as load:
        copy = {**first, "metadata": {**first["metadata"], "name": "copy"}}
        code, output = _apply(stack, tmp_path, copy)
        assert code == 0, output
        shard = await scenario.wait_stalled(stack, "copy", timeout=60)
        await scenario.more_requests(load)
    stalled = scenario.condition(shard, "Stalled")
    assert stalled["reason"] == "InvalidSpec", stalled
    prefix = first["spec"]["store"]["etcd"]["prefix"]
    assert (
        f"store: etcd {stack.info.etcd_endpoint} with key prefix {prefix} overlaps the store of "
        f"KcpShard {stack.namespace}/first (prefix {prefix})"
    ) in stalled["message"], stalled["message"]
    assert "set spec.store.etcd.prefix" in stalled["message"]
    await scenario.wait_event(stack, "copy", "InvalidSpec")
    assert await scenario.slot_names(stack, "copy") == []
    assert await scenario.slot_jobs(stack, "copy") == []
    assert load.report.failed == 0, load.report.failures
    assert (await scenario.wait_ready(stack, "first"))["status"]["activeSlot"] == "a"
    assert len(scenario.kcp_processes(stack)) == 1  # only the first's


async def test_moving_a_serving_shard_to_another_node_is_refused_and_it_keeps_serving(
    stack: Stack, bin_dir: Path, tmp_path: Path
) -> None:
    """spec.node is immutable (a CEL transition rule): a move would drop every client."""
    kcp = {"version": "v0.32.1", "binary": make_kcp(bin_dir, "kcp-1", **FAST)}
    port = free_port()
    manifest = _manifest(stack, "first", port, kcp=kcp)
    code, output = _apply(stack, tmp_path, manifest)
    assert code == 0, output
    await scenario.wait_ready(stack, "first")
    async with scenario.traffic(stack, port, name="first") as load:
        moved = {**manifest, "spec": {**manifest["spec"], "node": "other-node"}}
        code, output = _apply(stack, tmp_path, moved)
        await scenario.more_requests(load)
    assert code != 0, output
    assert "spec.node cannot change" in output and "delete this KcpShard" in output, output
    shard = await stack.shard("first")
    assert shard["spec"]["node"] == manifest["spec"]["node"]
    assert shard["metadata"]["generation"] == 1
    assert load.report.failed == 0, load.report.failures


# ----- judged on the node ------------------------------------------------------------------------


async def test_front_port_held_by_another_process_stalls_then_recovers_when_released(
    stack: Stack, bin_dir: Path, tmp_path: Path
) -> None:
    kcp = {"version": "v0.32.1", "binary": make_kcp(bin_dir, "kcp-1", **FAST)}
    holder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = int(holder.getsockname()[1])
        message = await _stalled_after_apply(
            stack, tmp_path, _manifest(stack, "root", port, kcp=kcp), "FrontFailed"
        )
        assert f"the front on node {stack.info.node} cannot serve" in message
        assert f"127.0.0.1:{port}" in message
        assert "already in use" in message
        assert _stalled_reason(stack, "root") == "FrontFailed"
        event = await scenario.wait_event(stack, "root", "FrontFailed")
        assert event["type"] == "Warning"
        await _nothing_started(stack, "root")

        holder.close()  # the port is free: the front agent's retry takes it, the shard starts
        shard = await scenario.wait_ready(stack, "root", timeout=90)
        assert shard["status"]["activeSlot"] == "a"
        assert scenario.condition(shard, "Stalled")["status"] == "False"
        assert not (shard["status"].get("front") or {}).get("error")
        async with scenario.traffic(stack, port) as load:
            await scenario.more_requests(load)
        assert load.report.failed == 0, load.report.failures
    finally:
        holder.close()


@pytest.mark.parametrize(
    "ready_timeout",
    [
        # Longer than the host agent's own store check (20 s): the check's verdict arrives in time.
        60,
        # A short ready timeout, as the other e2e tests use: the store check must still be what says why.
        6,
    ],
)
async def test_unreachable_store_stalls_before_kcp_ever_starts(
    stack: Stack, bin_dir: Path, tmp_path: Path, ready_timeout: int
) -> None:
    closed = free_port()  # nothing listens here
    endpoint = f"http://127.0.0.1:{closed}"
    kcp = {"version": "v0.32.1", "binary": make_kcp(bin_dir, "kcp-1", **FAST)}
    manifest = _manifest(
        stack,
        "root",
        free_port(),
        kcp=kcp,
        store={"etcd": {"endpoints": [endpoint]}},
        roll={"readyTimeoutSeconds": ready_timeout},
    )
    code, output = _apply(stack, tmp_path, manifest)
    assert code == 0, output
    kcp_seen: list[int] = []
    slot_seen: list[str] = []
    logs: list[str] = []

    async def stalled() -> dict[str, Any] | None:
        kcp_seen.extend(scenario.kcp_processes(stack))
        logs.append(stack.pod_logs("root-a-"))
        slot_seen.extend(await scenario.slot_names(stack, "root"))
        shard = await stack.shard("root")
        if scenario.condition(shard, "Stalled").get("status") == "True":
            return shard
        return None

    shard = await wait_for("shard root Stalled=True", stalled, timeout=90)
    assert slot_seen, "the host agent's slot was never created"
    assert kcp_seen == [], f"kcp ran although the store does not answer: pids {kcp_seen}"
    stalled_cond = scenario.condition(shard, "Stalled")
    print(stalled_cond)
    assert stalled_cond["reason"] == "StoreUnreachable", stalled_cond
    message = stalled_cond["message"]
    assert "none of the store endpoints answered" in message, message
    assert endpoint in message, message
    assert message.startswith("nothing serves yet;"), message
    assert shard["status"]["lastRoll"]["result"] == "Aborted"
    assert shard["status"]["lastRoll"]["reason"] == "StoreUnreachable"
    assert not shard["status"].get("activeSlot")
    assert _stalled_reason(stack, "root") == "StoreUnreachable"
    event = await scenario.wait_event(stack, "root", "StoreUnreachable")
    assert event["type"] == "Warning" and endpoint in event["message"]
    waited = stack.kubectl("wait", "kshard/root", "--for=condition=Stalled", "--timeout=30s")
    assert "condition met" in waited.stdout, waited
    assert "StoreUnreachable" in _described_events(stack, "root")

    async def cleaned() -> bool:
        return (
            await scenario.slot_names(stack, "root") == [] and await scenario.slot_jobs(stack, "root") == []
        )

    await wait_for("the failed slot and its Job to go", cleaned, timeout=30)
    assert scenario.kcp_processes(stack) == []
    # The host agent's log says why it never started kcp.
    assert any("none of the store endpoints answered" in seen for seen in logs)


# ----- refused by the API server at run time -----------------------------------------------------


def _operator_role(stack: Stack) -> dict[str, Any]:
    return json.loads(stack.kubectl("get", "clusterrole", "kcpshard-operator", "-o", "json").stdout)


def _replace_role(stack: Stack, tmp_path: Path, role: dict[str, Any]) -> None:
    role["metadata"] = {"name": role["metadata"]["name"]}  # no resourceVersion: replace what is there
    path = tmp_path / "role.json"
    path.write_text(json.dumps(role))
    stack.kubectl("replace", "-f", str(path))


async def test_a_request_rbac_forbids_stalls_with_the_servers_message_until_it_is_allowed(
    stack: Stack,
    bin_dir: Path,
    tmp_path: Path,
) -> None:
    role = _operator_role(stack)
    allowed = copy.deepcopy(role)
    for rule in role["rules"]:
        if rule.get("resources") == ["deployments"]:
            rule["verbs"] = [v for v in rule["verbs"] if v != "create"]
    _replace_role(stack, tmp_path, role)
    kcp = {"version": "v0.32.1", "binary": make_kcp(bin_dir, "kcp-1", **FAST)}
    manifest = _manifest(stack, "root", free_port(), kcp=kcp)
    message = await _stalled_after_apply(stack, tmp_path, manifest, "ApiRejected")
    assert "(403 Forbidden)" in message
    assert 'cannot create resource "deployments"' in message  # the API server's own words
    event = await scenario.wait_event(stack, "root", "ApiRejected")
    assert event["type"] == "Warning"
    # Allowed again: the operator asks again (a change of the shard wakes it at once) and goes on.
    _replace_role(stack, tmp_path, allowed)
    stack.kubectl("annotate", "kshard", "root", "example.com/touched=1")
    await scenario.wait_ready(stack, "root", timeout=120)
