"""The operator runs kopf without peering and under a name of its own, so it starts where the password
database has no entry for its uid (the product image runs as 65532)."""

from __future__ import annotations

import asyncio
import getpass
import pwd
import socket
from pathlib import Path
from typing import Any

import kopf
import pytest
import yaml
from kopf._core.engines import peering

from kcpshard.controller import main
from kcpshard.controller.settings import configure, own_identity

REPO = Path(__file__).resolve().parents[2]
USER_VARIABLES = ("LOGNAME", "USER", "LNAME", "USERNAME")  # what getpass.getuser() reads first


@pytest.fixture
def no_passwd_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    """As in the product image: no user name in the environment, no passwd entry for the uid."""
    for name in (*USER_VARIABLES, "POD_NAME", "POD_ID"):
        monkeypatch.delenv(name, raising=False)

    def getpwuid(uid: int) -> Any:
        raise KeyError(f"getpwuid(): uid not found: {uid}")

    monkeypatch.setattr(pwd, "getpwuid", getpwuid)
    with pytest.raises(KeyError):
        getpass.getuser()  # what kopf asks when nobody names the operator


def test_configure_turns_kopf_peering_off() -> None:
    settings = kopf.OperatorSettings()
    configure(settings)
    assert settings.peering.standalone
    assert not settings.peering.mandatory
    # Standalone, kopf watches no peering resource, cluster-wide or namespaced.
    assert list(peering.guess_selectors(settings=settings)) == []
    settings.peering.clusterwide = False
    assert list(peering.guess_selectors(settings=settings)) == []


def test_the_operator_needs_no_rbac_for_kopf_peerings() -> None:
    docs = list(yaml.safe_load_all((REPO / "deploy/base/rbac-operator.yaml").read_text()))
    role = next(d for d in docs if d and d["kind"] == "ClusterRole")
    for rule in role["rules"]:
        assert "kopf.dev" not in rule["apiGroups"], rule
        assert not {"kopfpeerings", "clusterkopfpeerings"} & set(rule["resources"]), rule


def test_the_command_line_has_no_peering_flag_and_still_takes_standalone() -> None:
    parser = main._parser()
    with pytest.raises(SystemExit):
        parser.parse_args(["--peering", "kcpshard"])
    args = parser.parse_args(["--standalone", "--all-namespaces"])
    assert main.operator_kwargs(args)["standalone"] is True
    assert main.operator_kwargs(parser.parse_args([]))["standalone"] is True


def test_the_identity_is_the_pod_name_else_the_host_and_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("POD_ID", raising=False)
    monkeypatch.setenv("POD_NAME", "kcpshard-operator-7d9f-abcde")
    assert own_identity() == "kcpshard-operator-7d9f-abcde"
    args = main._parser().parse_args(["--all-namespaces"])
    assert main.operator_kwargs(args)["identity"] == "kcpshard-operator-7d9f-abcde"
    monkeypatch.delenv("POD_NAME")
    assert own_identity().startswith(f"{socket.gethostname()}/")


@pytest.mark.usefixtures("no_passwd_entry")
def test_kopf_alone_would_fail_without_a_passwd_entry() -> None:
    """The failure the operator guards against: kopf names itself with getpass.getuser() at start."""

    async def start() -> None:
        await kopf.spawn_tasks(registry=kopf.OperatorRegistry(), standalone=True, clusterwide=True)

    with pytest.raises(KeyError, match="uid not found"):
        asyncio.run(start())


@pytest.mark.usefixtures("no_passwd_entry")
def test_the_operator_starts_without_a_passwd_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    """`kcpshard operator`'s own start-up: its settings, its arguments, and kopf's start with them."""
    settings = kopf.OperatorSettings()
    configure(settings)
    started: dict[str, Any] = {}

    async def operator(**kwargs: Any) -> None:
        # The real kopf start with the operator's arguments (kopf resolves its identity here), minus the
        # handlers, which would reach for an API server; then stop at once.
        tasks = await kopf.spawn_tasks(**{**kwargs, "registry": kopf.OperatorRegistry()})
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        started.update(kwargs)

    monkeypatch.setattr(kopf, "operator", operator)
    assert main.run(["--all-namespaces"]) == 0
    assert started["standalone"] is True
    assert started["identity"].startswith(f"{socket.gethostname()}/")


def shard_body(spec: dict[str, Any], **meta: Any) -> kopf.Body:
    raw = {"apiVersion": "kcpshard.dev/v1alpha1", "kind": "KcpShard", "metadata": {"name": "s", **meta}}
    return kopf.Body({**raw, "spec": spec})  # type: ignore[arg-type]


def test_kopf_writes_no_diff_base_onto_a_changed_shard() -> None:
    """A spec change must not make kopf patch the shard: that write raced the roll's first status write."""
    settings = kopf.OperatorSettings()
    configure(settings)
    storage = settings.persistence.diffbase_storage
    before, after = shard_body({"node": "a"}), shard_body({"node": "b"})
    # What kopf compares: the stored essence and the new one. The same, so no change to handle or store.
    assert storage.fetch(body=after) == storage.build(body=after) == storage.build(body=before)
    patch = kopf.Patch()
    storage.store(body=after, patch=patch, essence=storage.build(body=after))
    assert not patch


def test_a_deleted_shard_still_reaches_the_delete_handler() -> None:
    from kopf._core.intents import causes

    settings = kopf.OperatorSettings()
    configure(settings)
    storage = settings.persistence.diffbase_storage
    body = shard_body(
        {"node": "a"}, deletionTimestamp="2026-12-07T00:00:00Z", finalizers=[settings.persistence.finalizer]
    )
    essence = storage.build(body=body)
    cause = causes.detect_changing_cause(
        finalizer=settings.persistence.finalizer,
        raw_event={"type": "MODIFIED", "object": dict(body)},  # type: ignore[typeddict-item]
        body=body,
        old=storage.fetch(body=body),
        new=essence,
        diff=(),
        resource=None,
        indices=None,
        logger=None,
        patch=kopf.Patch(),
        memo=None,
    )
    assert cause.reason == causes.Reason.DELETE
