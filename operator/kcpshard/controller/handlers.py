"""kopf handlers: thin. Each KcpShard gets a daemon running its reconcile loop; watch
events of KcpShards, KcpSlots and slot Jobs wake that loop up.

The wake-up handlers are async: kopf runs a sync handler in a thread of its executor, and an
asyncio.Event set from another thread is not thread-safe and may wake the loop late."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Mapping
from typing import Any

import kopf

from kcpshard.api.models import GROUP, VERSION
from kcpshard.controller.config import OperatorConfig
from kcpshard.controller.login import operator_api
from kcpshard.controller.own_image import own_image
from kcpshard.controller.reconciler import ShardReconciler
from kcpshard.controller.settings import configure
from kcpshard.controller.shard_index import IndexKey, ShardIndex, index_entries
from kcpshard.controller.teardown import tear_down
from kcpshard.controller.wakeups import Wakeups
from kcpshard.k8s import names
from kcpshard.roll.observed import Neighbour

Logger = logging.Logger | logging.LoggerAdapter[Any]
WAKEUPS = Wakeups()


@kopf.on.startup()
async def startup(settings: kopf.OperatorSettings, memo: kopf.Memo, logger: Logger, **_: Any) -> None:
    configure(settings)
    memo.api = await operator_api(memo)  # the credentials kopf logs in with (controller/login.py)
    config: OperatorConfig = getattr(memo, "config", None) or OperatorConfig()
    if config.image_from_pod:
        image = await own_image(memo.api)
        if image is not None:
            config = dataclasses.replace(config, image=image)
        known = "" if image else " (the operator's own image is unknown)"
        logger.info(f"the agents run image {config.image}{known}")
    memo.config = config


@kopf.on.cleanup()
async def cleanup(memo: kopf.Memo, **_: Any) -> None:
    api = getattr(memo, "api", None)
    if api is not None:
        await api.aclose()


@kopf.index(GROUP, VERSION, "kcpshards")
def kcpshard_fronts(body: kopf.Body, **_: Any) -> dict[IndexKey, Neighbour]:
    """Every shard by the front it takes: a round finds its contenders here instead of listing all shards."""
    return index_entries(body)


@kopf.daemon(GROUP, VERSION, "kcpshards", cancellation_timeout=5.0)
async def reconcile_shard(
    name: str,
    namespace: str | None,
    memo: kopf.Memo,
    stopped: kopf.DaemonStopped,
    logger: Logger,
    **kwargs: Any,
) -> None:
    """The shard's reconcile loop, for as long as the shard exists."""
    assert namespace is not None  # KcpShard is namespaced
    index = ShardIndex(kwargs["kcpshard_fronts"])  # kopf passes each index by its function's name
    reconciler = ShardReconciler(memo.api, namespace, name, WAKEUPS, memo.config, logger, index=index)
    stop = asyncio.Event()
    relay = asyncio.create_task(_relay(stopped, stop))
    try:
        await reconciler.run(stop)
    finally:
        relay.cancel()
        WAKEUPS.forget(namespace, name)


async def _relay(stopped: kopf.DaemonStopped, stop: asyncio.Event) -> None:
    """kopf's stop flag as an asyncio.Event, so the loop's sleep ends the moment kopf stops it."""
    await stopped.wait()
    stop.set()


@kopf.on.delete(GROUP, VERSION, "kcpshards")
async def delete_shard(
    name: str, namespace: str | None, spec: kopf.Spec, memo: kopf.Memo, logger: Logger, **_: Any
) -> None:
    """The finalizer's handler: the shard goes only once its slots and front have stopped."""
    assert namespace is not None
    done = await tear_down(memo.api, namespace, name, dict(spec), logger)
    logger.info(done)


def _slot_or_backup(value: str | None, **_: Any) -> bool:
    """Jobs of slots and of backups: a finished backup moves the roll on at once."""
    return value in ("slot", "backup")


@kopf.on.event(GROUP, VERSION, "kcpshards")
async def shard_changed(name: str, namespace: str | None, meta: kopf.Meta, **_: Any) -> None:
    WAKEUPS.wake(namespace, name, meta.get("resourceVersion"))


@kopf.on.event(GROUP, VERSION, "kcpslots")
async def slot_changed(labels: Mapping[str, str], namespace: str | None, meta: kopf.Meta, **_: Any) -> None:
    WAKEUPS.wake(namespace, labels.get(names.LABEL_SHARD), meta.get("resourceVersion"))


@kopf.on.event("batch", "v1", "jobs", labels={names.LABEL_COMPONENT: _slot_or_backup})
@kopf.on.event("", "v1", "pods", labels={names.LABEL_COMPONENT: "slot"})
# the front's availability: a new shard's first roll, a front replacement and NodeNotReady wait on it
@kopf.on.event("apps", "v1", "deployments", labels={names.LABEL_COMPONENT: "front"})
async def workload_changed(labels: Mapping[str, str], namespace: str | None, **_: Any) -> None:
    WAKEUPS.wake(namespace, labels.get(names.LABEL_SHARD))
