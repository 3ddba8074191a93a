"""A kopf operator written for the dev-environment test: it sees KcpShards come, change and go.

It writes only fields the KcpShard status schema has (the CRD prunes the rest).
"""

from typing import Any

import kopf


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="probe.kcpshard.dev")
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix="probe.kcpshard.dev")
    settings.persistence.finalizer = "probe.kcpshard.dev/finalizer"


@kopf.on.create("kcpshard.dev", "v1alpha1", "kcpshards")
@kopf.on.update("kcpshard.dev", "v1alpha1", "kcpshards")
def seen(*, meta: kopf.Meta, spec: kopf.Spec, patch: kopf.Patch, reason: str, **_: Any) -> None:
    patch.status["observedGeneration"] = meta["generation"]
    patch.status["activeRevision"] = f"{reason}:{spec['kcp']['version']}"


@kopf.on.delete("kcpshard.dev", "v1alpha1", "kcpshards")
def gone(*, name: str, logger: kopf.Logger, **_: Any) -> None:
    logger.info(f"probe: deleted {name}")
