"""What kcp writes into its store at start-up, before it reports ready.

Imitates:
- `pkg/server/server.go` / `pkg/reconciler/core/shard` bootstrap: the `core.kcp.io/v1alpha1` Shard object
  `<shard-name>` in `root` is created or rewritten from `--shard-base-url`, `--shard-external-url`
  (default: base URL) and `--shard-virtual-workspace-url` (default: base URL) — so a slot started with
  other URLs repoints the shard,
- `config/system-crds` bootstrap (`pkg/server/server.go`, `systemcrds.Bootstrap`): the binary's system CRDs
  are (re)applied; the stand-in records the bootstrapping version in ConfigMap `system-crds` of namespace
  `default` in logical cluster `system:system-crds`,
- `config/root` and `config/shard`: namespaces `default`, `kube-system`, `kube-public`,
- up to v0.32.x a non-root shard fed from the root (`--root-shard-kubeconfig-file`) keeps the ConfigMap
  `identitycache` in `default` of `system:shard`; newer versions read identities from the cache server and
  leave an existing one behind (stale).
"""

from __future__ import annotations

import contextlib
import uuid

from kcpshard.api.conditions import now
from kcpshard_testkit.fakekcp import flags
from kcpshard_testkit.fakekcp.etcdstore import AlreadyExists, Conflict, EtcdStore, NotFound, Obj
from kcpshard_testkit.fakekcp.resources import Resource

SHARDS = Resource("core.kcp.io", "v1alpha1", "shards", "Shard", namespaced=False)
NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
CONFIGMAPS = Resource("", "v1", "configmaps", "ConfigMap", namespaced=True)
SYSTEM_CRDS_CLUSTER = "system:system-crds"
SHARD_CLUSTER = "system:shard"


def _meta(name: str, namespace: str = "") -> Obj:
    meta: Obj = {"name": name, "uid": str(uuid.uuid4()), "creationTimestamp": now()}
    if namespace:
        meta["namespace"] = namespace
    return meta


async def apply(store: EtcdStore, key: str, obj: Obj, fields: tuple[str, ...]) -> None:
    """Create, or rewrite `fields` of the stored object (retrying on conflicts), keeping its identity."""
    for _ in range(20):
        try:
            current = await store.get(key)
        except NotFound:
            try:
                await store.create(key, obj)
                return
            except AlreadyExists:
                continue
        new = dict(current.obj)
        for f in fields:
            new[f] = obj[f]
        if new == current.obj:
            return
        try:
            await store.update(key, new, current.revision)
            return
        except (Conflict, NotFound):
            continue
    raise RuntimeError(f"bootstrap: could not apply {key}: too many conflicts")


async def ensure(store: EtcdStore, key: str, obj: Obj) -> None:
    with contextlib.suppress(AlreadyExists):
        await store.create(key, obj)


def shard_spec(opts: flags.Options, default_base: str) -> Obj:
    base = opts.shard_base_url or default_base
    return {
        "baseURL": base,
        "externalURL": opts.shard_external_url or base,
        "virtualWorkspaceURL": opts.shard_virtual_workspace_url or base,
    }


async def run(store: EtcdStore, opts: flags.Options, default_base: str, version: str) -> None:
    shard = {
        "apiVersion": SHARDS.api_version,
        "kind": SHARDS.kind,
        "metadata": _meta(opts.shard_name),
        "spec": shard_spec(opts, default_base),
    }
    # A non-root shard registers itself in the root shard's store; with one shared etcd that is this store.
    await apply(store, SHARDS.key("root", "", opts.shard_name), shard, ("spec",))
    marker = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _meta("system-crds", "default"),
        "data": {"version": version, "shard": opts.shard_name, "bootstrappedAt": now()},
    }
    await apply(store, CONFIGMAPS.key(SYSTEM_CRDS_CLUSTER, "default", "system-crds"), marker, ("data",))
    namespaces = [("system:admin", "default"), ("system:admin", "kube-system")]
    if opts.shard_name == flags.ROOT_SHARD:
        namespaces += [("root", "default"), ("root", "kube-system"), ("root", "kube-public")]
    for cluster, ns in namespaces:
        await ensure(
            store,
            NAMESPACES.key(cluster, "", ns),
            {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": _meta(ns),
                "spec": {"finalizers": ["kubernetes"]},
                "status": {"phase": "Active"},
            },
        )
    if (
        opts.shard_name != flags.ROOT_SHARD
        and opts.root_shard_kubeconfig_file
        and flags.parse_version(version) < (0, 33, 0)
    ):
        cache = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": _meta("identitycache", "default"),
            "data": {"shard": opts.shard_name, "writtenBy": version},
        }
        await apply(store, CONFIGMAPS.key(SHARD_CLUSTER, "default", "identitycache"), cache, ("data",))
