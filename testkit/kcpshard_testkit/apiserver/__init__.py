"""An emulated Kubernetes API server for tests and `make demo`: in memory, over HTTPS, with a bearer token.

The real kopf operator, the real `kubectl` and the `kubernetes` Python client run against it::

    srv = EmulatedApiServer(workdir, crd_paths=[Path("crds")])
    await srv.start()   # writes workdir/kubeconfig (0600, context `kcpshard-dev`) and workdir/ca.crt
    ...                 # srv.url, srv.token, srv.kubeconfig_path, srv.ca_path
    await srv.stop()

What comes from KMock (kmock 0.8, the kopf author's mock server) and what is replaced, and why:

- Kept: KMock's resource model. Every served type is keyed by a `kmock.resource` (group, version, plural)
  and describes itself for discovery as a `kmock.ResourceInfo` (kind, singular, verbs, short names,
  categories, subresources) (`registry.py`); the legacy discovery layout (`/api`, `/apis`, `/apis/<g>`,
  `/apis/<g>/<v>`) follows `kmock.KubernetesScaffold`, and errors keep its `Status` body shape
  (`errors.py`).
- Replaced: KMock's `KubernetesEmulator` store. It only merges JSON dicts: no resourceVersion, uid,
  generation, 409 conflicts, status subresource, selectors, watch resume/410, finalizer rules or
  garbage collection, and its errors carry Python tracebacks. `store.py` is our own store.
- Replaced: KMock's request parsing, DSL dispatch and rendering (`RawHandler`). It recognizes watches
  only as `?watch=true` (not `/watch/` paths), and its streaming batches items through its own bus;
  `app.py` is a plain aiohttp application with Kubernetes content negotiation (Table,
  PartialObjectMetadata, aggregated discovery), and `watch.py` streams events itself.
- Replaced: KMock's `Server`. It listens on plain HTTP only and installs a process-wide aiohttp DNS
  interceptor and client session; `server.py` serves HTTPS with a self-signed CA (`tls.py`).

Known differences from a real API server (also in the lead's report):

- Strategic merge patch for built-in kinds merges the usual keyed lists (containers by name, ...)
  and drops `$setElementOrder`/`$retainKeys` directives; custom resources refuse it with 415, as kube does.
- Server-side apply is simplified: create, or a strategic-merge of the applied fields; no managedFields,
  no field ownership or conflicts.
- `Foreground` propagation behaves as `Background`; GC is synchronous. batch/v1 Jobs orphan their Pods
  unless the DELETE asks for `propagationPolicy: Background` (as the real server does).
- CEL (`x-kubernetes-validations`, so `spec.node`'s immutability), conversion webhooks, admission
  webhooks, RBAC: not implemented.
- `pods/log` is not served: `kubectl logs` works on the real control plane, which asks the runner's
  kubelet endpoint (testing/runner/logserver.py).
- `limit`/`continue` are ignored (lists return everything, no continue token).
"""

from .server import CRDLoadError, EmulatedApiServer

__all__ = ["CRDLoadError", "EmulatedApiServer"]
