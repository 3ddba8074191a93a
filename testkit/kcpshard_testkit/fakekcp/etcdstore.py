"""Object storage in etcd through etcd's v3 JSON gRPC gateway (`/v3/kv/*`), the way kube stores objects.

Imitates `k8s.io/apiserver/pkg/storage/etcd3/store.go`: objects are JSON values under a `/registry`
prefix, `metadata.resourceVersion` is the etcd `mod_revision` (never stored in the value), creates are
transactions guarded by `create_revision == 0` and updates/deletes by `mod_revision == resourceVersion`,
so two processes on one etcd race exactly as two kube-apiservers do.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any

import httpx

Obj = dict[str, Any]


class StoreError(Exception):
    """etcd could not be reached or answered something unexpected."""


class NotFound(Exception):
    pass


class AlreadyExists(Exception):
    pass


class Conflict(Exception):
    pass


def _b64(s: str) -> str:
    return base64.b64encode(s.encode()).decode()


def _unb64(s: str) -> bytes:
    return base64.b64decode(s)


def _prefix_end(prefix: str) -> str:
    """etcd's range_end for "all keys with this prefix": the prefix with its last byte incremented."""
    raw = bytearray(prefix.encode())
    raw[-1] += 1
    return base64.b64encode(bytes(raw)).decode()


@dataclass
class Stored:
    obj: Obj
    revision: int  # etcd's mod_revision: the object's resourceVersion
    # etcd's create_revision when read from etcd; on a write's answer, the write's revision for a create
    # and 0 (not known) for an update.
    create_revision: int = 0


class EtcdStore:
    """A tiny async etcd v3 client speaking JSON over HTTP (httpx)."""

    def __init__(self, endpoints: list[str], prefix: str = "/registry", timeout: float = 5.0) -> None:
        if not endpoints:
            raise ValueError("no etcd endpoints")
        self.endpoints = [e.rstrip("/") for e in endpoints]
        self.prefix = prefix.rstrip("/")
        self._client = httpx.AsyncClient(timeout=timeout)
        self._current = 0

    async def close(self) -> None:
        await self._client.aclose()

    def key(self, path: str) -> str:
        return f"{self.prefix}/{path.lstrip('/')}"

    async def _post(self, api: str, body: Obj) -> Obj:
        last = ""
        # Try each endpoint once, starting from the last that answered (as etcd clients balance).
        for i in range(len(self.endpoints)):
            idx = (self._current + i) % len(self.endpoints)
            try:
                resp = await self._client.post(f"{self.endpoints[idx]}/v3/{api}", json=body)
            except httpx.HTTPError as e:
                last = f"{type(e).__name__} from {self.endpoints[idx]}"
                continue
            if resp.status_code != 200:
                raise StoreError(f"etcd {api}: HTTP {resp.status_code}: {resp.text[:200]}")
            self._current = idx
            result: Obj = resp.json()
            return result
        raise StoreError(f"etcd unreachable: {last}")

    @staticmethod
    def _decode(kv: Obj) -> Stored:
        obj = json.loads(_unb64(kv["value"]))
        rev = int(kv.get("mod_revision", 0))
        obj.setdefault("metadata", {})["resourceVersion"] = str(rev)
        return Stored(obj, rev, int(kv.get("create_revision", 0)))

    @staticmethod
    def _encode(obj: Obj) -> str:
        clean = json.loads(json.dumps(obj))
        clean.get("metadata", {}).pop("resourceVersion", None)
        return base64.b64encode(json.dumps(clean, separators=(",", ":")).encode()).decode()

    async def ping(self) -> None:
        await self._post("kv/range", {"key": _b64(self.key("health")), "count_only": True})

    async def get(self, path: str) -> Stored:
        res = await self._post("kv/range", {"key": _b64(self.key(path))})
        kvs = res.get("kvs") or []
        if not kvs:
            raise NotFound(path)
        return self._decode(kvs[0])

    async def list(self, path_prefix: str) -> tuple[list[Stored], int]:
        """All objects under a folder, and the store revision of the read (the list resourceVersion)."""
        prefix = self.key(path_prefix).rstrip("/") + "/"
        res = await self._post("kv/range", {"key": _b64(prefix), "range_end": _prefix_end(prefix)})
        items = [self._decode(kv) for kv in res.get("kvs") or []]
        return items, int(res.get("header", {}).get("revision", 0))

    async def create(self, path: str, obj: Obj) -> Stored:
        key = _b64(self.key(path))
        res = await self._post(
            "kv/txn",
            {
                "compare": [{"key": key, "result": "EQUAL", "target": "CREATE", "create_revision": "0"}],
                "success": [{"request_put": {"key": key, "value": self._encode(obj)}}],
            },
        )
        if not res.get("succeeded"):
            raise AlreadyExists(path)
        stored = self._stored(obj, res)
        stored.create_revision = stored.revision
        return stored

    async def update(self, path: str, obj: Obj, revision: int | None = None) -> Stored:
        """Compare-and-swap on mod_revision; `revision=None` means "the one currently stored" (must exist)."""
        if revision is None:
            revision = (await self.get(path)).revision
        key = _b64(self.key(path))
        res = await self._post(
            "kv/txn",
            {
                "compare": [{"key": key, "result": "EQUAL", "target": "MOD", "mod_revision": str(revision)}],
                "success": [{"request_put": {"key": key, "value": self._encode(obj)}}],
                "failure": [{"request_range": {"key": key}}],
            },
        )
        if not res.get("succeeded"):
            raise self._why_failed(path, res)
        return self._stored(obj, res)

    async def delete(self, path: str, revision: int | None = None) -> None:
        key = _b64(self.key(path))
        compare = (
            [{"key": key, "result": "EQUAL", "target": "MOD", "mod_revision": str(revision)}]
            if revision is not None
            else [{"key": key, "result": "GREATER", "target": "CREATE", "create_revision": "0"}]
        )
        res = await self._post(
            "kv/txn",
            {
                "compare": compare,
                "success": [{"request_delete_range": {"key": key}}],
                "failure": [{"request_range": {"key": key}}],
            },
        )
        if not res.get("succeeded"):
            raise self._why_failed(path, res)

    @staticmethod
    def _why_failed(path: str, res: Obj) -> Exception:
        responses = res.get("responses") or [{}]
        kvs = (responses[0].get("response_range") or {}).get("kvs") or []
        return Conflict(path) if kvs else NotFound(path)

    @staticmethod
    def _stored(obj: Obj, res: Obj) -> Stored:
        rev = int(res.get("header", {}).get("revision", 0))
        out = json.loads(json.dumps(obj))
        out.setdefault("metadata", {})["resourceVersion"] = str(rev)
        return Stored(out, rev)
