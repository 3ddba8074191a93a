"""Recording objects from real rolls, for fixtures that must be real (the GitOps health checks' testdata).

`record(name, obj)` writes nothing unless `$KCPSHARD_RECORD_DIR` is set; the e2e tests call it at the
moments worth keeping (a roll under way, a stalled roll, a ready shard), and a person copies the
files into `deploy/argocd/.../testdata/` once, saying where they came from.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import yaml

from kcpshard.k8s.api import KCPSHARDS, KCPSLOTS, ApiClient

ENV = "KCPSHARD_RECORD_DIR"


def record(name: str, obj: dict[str, Any]) -> Path | None:
    directory = os.environ.get(ENV)
    if not directory:
        return None
    path = Path(directory) / f"{name}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    kept = {**obj, "metadata": {k: v for k, v in (obj.get("metadata") or {}).items() if k != "managedFields"}}
    path.write_text(yaml.safe_dump(kept, sort_keys=False, width=100))
    return path


@contextlib.asynccontextmanager
async def changes(api: ApiClient, name: str, prefix: str, namespace: str = "default") -> AsyncIterator[None]:
    """While the block runs, record every new version of the shard and its slots (when recording at all).

    Polls: a watch would do too, but this must never change what the test sees or waits for.
    """
    if not os.environ.get(ENV):
        yield
        return
    seen: set[str] = set()
    count = 0

    async def poll() -> None:
        nonlocal count
        while True:
            with contextlib.suppress(Exception):
                shard = await api.get(KCPSHARDS, namespace, name)
                slots = await api.list(KCPSLOTS, namespace, label_selector=f"kcpshard.dev/shard={name}")
                for obj in [shard, *slots.get("items", [])]:
                    meta = obj["metadata"]
                    key = f"{obj['kind']}/{meta['name']}@{meta['resourceVersion']}"
                    if key not in seen:
                        seen.add(key)
                        count += 1
                        step = ((obj.get("status") or {}).get("rollout") or {}).get("step") or "idle"
                        what = step if obj["kind"] == "KcpShard" else meta["name"]
                        record(f"{prefix}-{count:03d}-{obj['kind'].lower()}-{what}", obj)
            await asyncio.sleep(0.05)

    task = asyncio.create_task(poll())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
