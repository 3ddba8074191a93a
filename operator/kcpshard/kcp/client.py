"""An async client for the few kcp calls the roll makes: readiness, the controller lease, probe workspaces.

Paths as kcp serves them (docs/design.md#the-controller-lease, docs/design.md#the-probe-workspace): the
lease `kube-system/kcp-controllers` in logical cluster `system:admin` (`pkg/server/options/controllers.go`),
workspaces `tenancy.kcp.io/v1alpha1` in `root` (phases Scheduling -> Initializing -> Ready,
`pkg/reconciler/tenancy/workspace`). Requests carry the shard-admin token; TLS is verified against the CA
bundle of `apiserver.crt` (from admin.kubeconfig).

Certificate names: kcp generates its self-signed serving cert (k8s.io/apiserver
`SecureServingOptions.MaybeDefaultWithSelfSignedCerts`, called from kcp's `Options.Complete`) for the
advertise address (with a loopback bind address: the node's default interface IP), the bind address and
the bound listener IP. With `--bind-address=127.0.0.1` that is 127.0.0.1 plus the node IP, not a
hostname: a front reached by another name needs `tls_server_name` (a name in the cert) or a cert of its own.
"""

from __future__ import annotations

import contextlib
import functools
import json
import secrets
import ssl
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar
from urllib.parse import quote

import httpx

from kcpshard import retry
from kcpshard.kcp.errors import KcpError, KcpTimeout

LEASE_PATH = (
    "/clusters/system:admin/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/kcp-controllers"
)
WORKSPACES_PATH = "/clusters/root/apis/tenancy.kcp.io/v1alpha1/workspaces"
READY_PHASE = "Ready"
_MAX_MESSAGE = 300

T = TypeVar("T")


# kcp records a workspace's owner from the request's user, except for system:masters (the shard-admin
# is one: pkg/admission/workspace), and its APIBinding initializer impersonates that owner; with no
# owner a workspace never leaves Initializing ("had no user recorded"). So the probe names one: the
# shard-admin identity that creates it. The annotation is reserved to system:masters, as we are.
OWNER_ANNOTATION = "experimental.tenancy.kcp.io/owner"
PROBE_OWNER = json.dumps({"username": "shard-admin", "groups": ["system:masters"]}, separators=(",", ":"))


@functools.lru_cache(maxsize=16)
def _ssl_context(ca_pem: bytes) -> ssl.SSLContext:
    try:
        return ssl.create_default_context(cadata=ca_pem.decode("ascii"))
    except (ssl.SSLError, UnicodeDecodeError, ValueError):
        raise KcpError("the kcp CA bundle is not valid PEM") from None


def _seg(value: str) -> str:
    """A path segment; ':' stays (logical cluster names like system:admin)."""
    return quote(value, safe=":")


@dataclass(frozen=True)
class ProbeResult:
    """One probe workspace's life: created, Ready, deleted. Seconds are monotonic durations."""

    name: str
    phases: tuple[str, ...]
    started_at: datetime
    created_at: datetime
    ready_at: datetime
    deleted_at: datetime
    create_seconds: float
    ready_seconds: float
    delete_seconds: float
    total_seconds: float
    deleted: bool  # kcp accepted the delete; False leaves the workspace to the next probe's clean-up


class KcpClient:
    """Talks to one kcp shard (normally through the front) as shard-admin."""

    def __init__(
        self,
        base_url: str,
        ca_pem: bytes,
        token: str,
        timeout: float = 5.0,
        tls_server_name: str | None = None,
        transport: httpx.AsyncBaseTransport | None = None,  # tests only
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._token = token
        self._extensions = {"sni_hostname": tls_server_name} if tls_server_name else {}
        self._http = httpx.AsyncClient(
            base_url=self.base_url, verify=_ssl_context(ca_pem), timeout=timeout, transport=transport
        )

    def __repr__(self) -> str:
        return f"KcpClient(base_url={self.base_url!r}, token=<hidden>)"

    async def __aenter__(self) -> KcpClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    def _clean(self, text: str) -> str:
        # Belt and braces: nothing kcp or httpx says should hold the token, but never let it through.
        return text.replace(self._token, "<redacted>") if self._token else text

    async def _request(
        self, method: str, path: str, *, body: dict[str, Any] | None = None, auth: bool = True
    ) -> httpx.Response:
        headers = {"Accept": "application/json"}
        if auth:
            headers["Authorization"] = f"Bearer {self._token}"
        try:
            return await self._http.request(
                method, path, json=body, headers=headers, extensions=self._extensions
            )
        except httpx.HTTPError as exc:
            detail = self._clean(str(exc)) or type(exc).__name__
            raise KcpError(f"{method} {self.base_url}{path}: {detail}") from None

    def _error(self, method: str, path: str, resp: httpx.Response) -> KcpError:
        reason, message = None, resp.reason_phrase
        try:
            status = resp.json()
            if isinstance(status, dict):
                reason = status.get("reason") or None
                message = str(status.get("message") or message)
        except (json.JSONDecodeError, UnicodeDecodeError):
            message = resp.text.strip() or message
        message = self._clean(message)[:_MAX_MESSAGE]
        return KcpError(
            f"{method} {self.base_url}{path}: HTTP {resp.status_code}: {message}", resp.status_code, reason
        )

    async def _json(
        self, method: str, path: str, body: dict[str, Any] | None = None
    ) -> dict[str, Any] | None:
        """The JSON answer, or None on 404. Other non-2xx statuses raise KcpError."""
        resp = await self._request(method, path, body=body)
        if resp.status_code == 404:
            return None
        if not resp.is_success:
            raise self._error(method, path, resp)
        try:
            data = resp.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise KcpError(f"{method} {self.base_url}{path}: answer is not JSON", resp.status_code) from None
        return data if isinstance(data, dict) else {}

    # the controller lease

    async def get_lease(self) -> dict[str, Any] | None:
        return await self._json("GET", LEASE_PATH)

    async def delete_lease(self) -> bool:
        """Delete the controller lease so a waiting slot takes over at once. False when it was absent."""
        return await self._json("DELETE", LEASE_PATH) is not None

    # A plain `timeout` (not asyncio.timeout) so that KcpTimeout can say what was seen last.
    async def wait_for_holder(self, not_holder: str | None, timeout: float, poll: float = 0.2) -> str:
        """Wait until the lease names a holder other than `not_holder`; returns that holderIdentity."""
        last = "no lease"

        async def check() -> str | None:
            nonlocal last
            lease = await self.get_lease()
            holder = ((lease or {}).get("spec") or {}).get("holderIdentity") if lease else None
            last = f"holder {holder}" if holder else ("no holder" if lease else "no lease")
            return holder if holder and holder != not_holder else None

        what = "a new controller leader" + (f" (not {not_holder})" if not_holder else "")
        return await self._poll(check, what, timeout, poll, lambda: last)

    # workspaces

    async def create_workspace(self, name: str, location: str | None = None) -> dict[str, Any]:
        """Create a workspace in root; an existing one of that name is returned as is (idempotent).

        `location`: the kcp shard to place it on, by the `name` label kcp gives each Shard object.
        """
        spec: dict[str, Any] = {}
        if location is not None:
            spec["location"] = {"selector": {"matchLabels": {"name": location}}}
        body = {
            "apiVersion": "tenancy.kcp.io/v1alpha1",
            "kind": "Workspace",
            "metadata": {"name": name, "annotations": {OWNER_ANNOTATION: PROBE_OWNER}},
            "spec": spec,
        }
        resp = await self._request("POST", WORKSPACES_PATH, body=body)
        if resp.status_code == 409:
            existing = await self.get_workspace(name)
            if existing is not None:
                return existing
        if not resp.is_success:
            raise self._error("POST", WORKSPACES_PATH, resp)
        data = resp.json()
        return data if isinstance(data, dict) else {}

    async def get_workspace(self, name: str) -> dict[str, Any] | None:
        return await self._json("GET", f"{WORKSPACES_PATH}/{_seg(name)}")

    async def delete_workspace(self, name: str) -> None:
        """Delete a workspace; absent is fine."""
        await self._json("DELETE", f"{WORKSPACES_PATH}/{_seg(name)}")

    async def list_workspaces(self) -> list[str]:
        """Names of the workspaces in root."""
        data = await self._json("GET", WORKSPACES_PATH) or {}
        return [str(item["metadata"]["name"]) for item in data.get("items") or []]

    async def delete_workspaces(self, prefix: str) -> list[str]:
        """Delete every workspace in root whose name starts with `prefix` (leftovers of a cut-short probe)."""
        names = [name for name in await self.list_workspaces() if name.startswith(prefix)]
        for name in names:
            await self.delete_workspace(name)
        return names

    async def _wait_ready(self, name: str, seconds: float, poll: float) -> tuple[dict[str, Any], list[str]]:
        last = "not created"
        phases: list[str] = []

        async def check() -> dict[str, Any] | None:
            nonlocal last
            ws = await self.get_workspace(name)
            if ws is None:
                last = "absent"
                return None
            phase = str((ws.get("status") or {}).get("phase") or "no phase")
            if not phases or phases[-1] != phase:
                phases.append(phase)
            last = f"phase {phase}"
            return ws if phase == READY_PHASE else None

        ws = await self._poll(check, f"workspace {name} to be Ready", seconds, poll, lambda: last)
        return ws, phases

    async def probe(
        self, name_prefix: str, timeout: float, poll: float = 0.2, location: str | None = None
    ) -> ProbeResult:
        """Create a workspace, wait until Ready (within `timeout`), then delete it.

        Proves the controllers run (only the leader moves a workspace to Ready). The workspace is deleted
        on failure too. Once it is Ready the proof is made: the probe does not wait for kcp's finalizers
        (seconds on real kcp), and a failed delete only leaves it to the next probe's clean-up
        (`deleted` False). `location` places it on that kcp shard, whose controllers then initialize it.
        """
        name = f"{name_prefix}-{secrets.token_hex(3)}"
        if len(name) > 63:
            raise ValueError(f"probe name prefix {name_prefix!r} is too long (max 56 characters)")
        start, started_at = time.monotonic(), datetime.now(UTC)
        try:
            await self.create_workspace(name, location)
            created, created_at = time.monotonic(), datetime.now(UTC)
            _, phases = await self._wait_ready(name, max(0.0, timeout - (created - start)), poll)
            ready, ready_at = time.monotonic(), datetime.now(UTC)
        except Exception:
            with contextlib.suppress(KcpError):  # the original failure is the one to report
                await self.delete_workspace(name)
            raise
        deleted_ok = True
        try:
            await self.delete_workspace(name)
        except KcpError:
            deleted_ok = False
        deleted, deleted_at = time.monotonic(), datetime.now(UTC)
        return ProbeResult(
            name=name,
            phases=tuple(phases),
            started_at=started_at,
            created_at=created_at,
            ready_at=ready_at,
            deleted_at=deleted_at,
            create_seconds=created - start,
            ready_seconds=ready - created,
            delete_seconds=deleted - ready,
            total_seconds=time.monotonic() - start,
            deleted=deleted_ok,
        )

    # other objects

    async def delete_configmap(self, cluster: str, namespace: str, name: str) -> bool:
        """Delete a ConfigMap (e.g. the stale `identitycache` in system:shard). False when absent."""
        path = f"/clusters/{_seg(cluster)}/api/v1/namespaces/{_seg(namespace)}/configmaps/{_seg(name)}"
        return await self._json("DELETE", path) is not None

    # polling

    async def _poll(
        self,
        check: Callable[[], Awaitable[T | None]],
        what: str,
        seconds: float,
        poll: float,
        last_state: Callable[[], str],
    ) -> T:
        """Call `check` until it returns a value or the deadline passes. Transient errors are retried."""
        note = ""

        async def once() -> T:
            nonlocal note
            try:
                result = await check()
            except KcpError as exc:
                if exc.status in (401, 403):
                    raise  # credentials will not fix themselves
                note, result = f" (last error: {exc})", None
            else:
                note = ""
            if result is None:
                raise _NotYet
            return result

        try:
            return await retry.retrying(
                once, passing=retry.kinds(_NotYet), backoff=retry.Backoff.every(poll), budget=seconds
            )
        except _NotYet:
            raise KcpTimeout(what, seconds, self._clean(last_state() + note)) from None


class _NotYet(Exception):
    """A poll's check found nothing yet (or a transient error): look again."""
