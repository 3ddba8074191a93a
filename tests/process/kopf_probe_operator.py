"""A tiny kopf operator for the emulated API server test.

It writes status on create/update, posts an Event, and logs deletes.
"""

import logging
from typing import Any

import kopf


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    settings.posting.level = logging.INFO
    settings.posting.loggers = True  # handler log lines become k8s Events too (off by default in kopf 1.45)
    settings.watching.server_timeout = 30


@kopf.on.create("test.kcpshard.dev", "v1", "widgets")
def created(*, body: kopf.Body, spec: kopf.Spec, patch: kopf.Patch, logger: kopf.Logger, **_: Any) -> None:
    patch.status["phase"] = f"created-{spec['size']}"
    kopf.info(body, reason="ProbeCreated", message="the probe saw the creation")
    logger.info("probe: created")


@kopf.on.update("test.kcpshard.dev", "v1", "widgets")
def updated(*, spec: kopf.Spec, patch: kopf.Patch, logger: kopf.Logger, **_: Any) -> None:
    patch.status["phase"] = f"updated-{spec['size']}"
    logger.info("probe: updated")


@kopf.on.delete("test.kcpshard.dev", "v1", "widgets")
def deleted(*, name: str, logger: kopf.Logger, **_: Any) -> None:
    logger.info("probe: deleted %s", name)
