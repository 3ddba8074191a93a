"""kopf settings: this project's own persistence keys and finalizer, not kopf's defaults."""

from __future__ import annotations

import logging

import kopf

PREFIX = "kcpshard.dev"
FINALIZER = f"{PREFIX}/finalizer"


def configure(settings: kopf.OperatorSettings) -> None:
    settings.persistence.finalizer = FINALIZER
    # Progress and diff-base in our own annotations: status stays the user-facing API,
    # and a second kopf operator in the cluster never reads our bookkeeping as its own.
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=PREFIX)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=PREFIX, key="last-handled-configuration"
    )
    settings.posting.level = logging.INFO
    settings.peering.name = "kcpshard"
    settings.peering.mandatory = False
    settings.watching.server_timeout = 300
    settings.networking.request_timeout = 60
