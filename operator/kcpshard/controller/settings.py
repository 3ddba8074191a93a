"""kopf settings: this project's own persistence keys and finalizer, no peering, and a name of its own."""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Iterable
from typing import Any

import kopf

PREFIX = "kcpshard.dev"
FINALIZER = f"{PREFIX}/finalizer"


class NoDiffBase(kopf.DiffBaseStorage):
    """No diff-base at all. kopf keeps one to tell creations and updates apart for on.create/on.update/
    on.resume handlers, and this operator has none (its loop compares generations itself). Kept in an
    annotation, kopf would patch every KcpShard right after each spec change, and that write raced the
    roll's first status write (a 409 and a second try in every roll). An empty essence, always the same:
    every event is a no-op to kopf's change detection; deletions are still told by the finalizer."""

    def build(self, *, body: kopf.Body, extra_fields: Iterable[Any] | None = None) -> kopf.BodyEssence:
        return kopf.BodyEssence()

    def fetch(self, *, body: kopf.Body) -> kopf.BodyEssence | None:
        return kopf.BodyEssence()

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: kopf.BodyEssence) -> None:
        return None


def configure(settings: kopf.OperatorSettings) -> None:
    settings.persistence.finalizer = FINALIZER
    # Progress in our own annotations: status stays the user-facing API, and a second kopf operator in
    # the cluster never reads our bookkeeping as its own.
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=PREFIX)
    settings.persistence.diffbase_storage = NoDiffBase()
    settings.posting.level = logging.INFO
    # No kopf peering: with equal priorities it pauses every replica. One replica acts per shard through
    # the shard's own Lease (shardlock.py). Standalone, kopf watches no peering object and needs no RBAC
    # for one (docs/design.md#kopf).
    settings.peering.standalone = True
    settings.watching.server_timeout = 300
    settings.networking.request_timeout = 60


def own_identity() -> str:
    """The name this operator process gives kopf: the pod's (POD_NAME, set by the Deployment; or kopf's own
    POD_ID), else `<hostname>/<pid>`.

    kopf names itself at start whether it peers or not, and without a name given it asks
    `getpass.getuser()`, which raises KeyError for a uid with no passwd entry (the product image runs as
    65532): so the operator always gives one (docs/design.md#kopf).
    """
    pod = os.environ.get("POD_NAME") or os.environ.get("POD_ID")
    return pod or f"{socket.gethostname()}/{os.getpid()}"
