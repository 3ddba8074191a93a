"""Annotations on a KcpShard that a person (or `kubectl kcpshard`) sets to steer a roll.

Pure names, shared by the plugin and the operator. Each value is a fresh timestamp, so setting it
again is a new request: the operator compares the value with the one it last acted on.
"""

from __future__ import annotations

PREFIX = "kcpshard.dev/"

# Roll the failed spec once more (`kubectl kcpshard retry`); the operator records the value it ran
# with in the report (`retryToken`), so the same value never retries twice.
RETRY = f"{PREFIX}retry"
# Let a roll that waits for promotion go on (`kubectl kcpshard promote`).
PROMOTE = f"{PREFIX}promote"
# Stop a roll before its flip: the new slot is stopped, the old one keeps serving (`kubectl kcpshard abort`).
ABORT = f"{PREFIX}abort"

# Roll the serving revision once more, so its kcp re-asserts its bootstrap objects after an aborted
# upgrade (`kubectl kcpshard reassert`); the operator records the value in the report (`reassertToken`).
REASSERT = f"{PREFIX}reassert"

ALL = (RETRY, PROMOTE, ABORT, REASSERT)
