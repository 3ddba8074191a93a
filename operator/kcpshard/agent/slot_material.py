"""What kcp needs before it starts, and what it leaves for the next slot: a store that answers (and its
TLS), the shard's root material from its Secret, a non-root shard's kubeconfigs, the root directory
seeded with them; once kcp runs, the material a first slot generated goes up into the Secret and the
kcp-admin kubeconfig is published.

Each step that cannot be done writes `Seeded=False` with the reason and says so in one line.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import Mapping
from typing import Any, Literal

from kcpshard import retry
from kcpshard.agent import seed
from kcpshard.agent.slot_options import Options
from kcpshard.agent.slot_status import API_ERRORS, POLL_FAST, POLL_SLOW, Cond, Fatal, SlotReport, fail
from kcpshard.agent.store_refs import StoreTLS, store_tls
from kcpshard.agent.storecheck import client_context, connect_problem
from kcpshard.k8s.api import SECRETS, ApiClient, Conflict, NotFound
from kcpshard.kcp.errors import KcpError
from kcpshard.kcp.kubeconfig import kcp_admin_kubeconfig
from kcpshard.timeouts import within

log = logging.getLogger("kcpshard.agent.slot")

POLL_STORE = 0.25  # between rounds of connection attempts to the store
STORE_CONNECT_TIMEOUT = 2.0
UPLOAD_ATTEMPTS = 5
PUBLISH_ATTEMPTS = 5


class _Again(Exception):
    """The Secret changed under the upload, and still wants this slot's material: upload again."""


class Material:
    def __init__(self, opts: Options, api: ApiClient, report: SlotReport, stop: asyncio.Event) -> None:
        self.opts = opts
        self.api = api
        self.report = report
        self.stop = stop

    # -- before kcp starts ---------------------------------------------------------------------------

    async def read_store_tls(self) -> StoreTLS | Literal[False] | None:
        """The store's TLS from --store-tls-secret (None when not given); False, with Seeded=False
        written, when the Secret is missing or holds no usable TLS: kcp would fail on its files."""
        name = self.opts.store_tls_secret
        if name is None:
            return None
        where = f"{self.opts.namespace}/{name}"
        try:
            secret = await self.api.get(SECRETS, self.opts.namespace, name)
            tls = store_tls(where, seed.decode_secret_data(secret.get("data")))
            # A CA that does not parse fails here, where the message can say which Secret holds it.
            client_context(tls)
            return tls
        except NotFound:
            reason, msg = "MissingSecret", f"Secret {where} (the store's TLS) not found"
        except (ValueError, seed.SeedError, ssl.SSLError) as exc:
            reason, msg = "InvalidMaterial", f"the store's TLS Secret {where}: {exc}"
        except API_ERRORS as exc:
            fail(f"cannot read Secret {where}: {exc}")
            return False
        await self.report.write(None, Cond("Seeded", "False", reason, msg))
        fail(msg)
        return False

    async def wait_for_store(self, tls: StoreTLS | None) -> bool:
        """True once one store endpoint accepts a connection (a verified TLS handshake for https), or none
        is given, or a stop came.

        False (Seeded=False StoreUnreachable written) when none did within --store-wait.
        """
        endpoints = self.opts.store_endpoints
        if not endpoints:
            return True
        context = client_context(tls) if any(e.tls for e in endpoints) else None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.opts.store_wait
        while True:
            timeout = min(STORE_CONNECT_TIMEOUT, max(POLL_STORE, deadline - loop.time()))
            problems = await asyncio.gather(*(connect_problem(e, timeout, tls, context) for e in endpoints))
            for endpoint, problem in zip(endpoints, problems, strict=True):
                if problem is None:
                    log.info("store endpoint %s answers", endpoint.url)
                    return True
            left = deadline - loop.time()
            if left <= 0:
                break
            with contextlib.suppress(TimeoutError):
                await within(self.stop.wait(), min(POLL_STORE, left))
                return True
        detail = "; ".join(f"{e.url}: {p}" for e, p in zip(endpoints, problems, strict=True))
        msg = f"none of the store endpoints answered within {self.opts.store_wait:g}s: {detail}"
        await self.report.write(None, Cond("Seeded", "False", "StoreUnreachable", msg))
        fail(msg)
        return False

    async def read_secret(self) -> tuple[seed.SeedPlan | None, dict[str, Any]]:
        name = self.opts.secret
        try:
            secret: dict[str, Any] | None = await self.api.get(SECRETS, self.opts.namespace, name)
        except NotFound:
            secret = None
        except API_ERRORS as exc:
            fail(f"cannot read Secret {self.opts.namespace}/{name}: {exc}")
            return None, {}
        try:
            plan = seed.plan_seed(secret)
        except seed.SeedError as exc:
            await self.report.write(None, Cond("Seeded", "False", "InvalidMaterial", str(exc)))
            fail(str(exc))
            return None, {}
        if plan.kind is seed.SeedKind.SECRET_NOT_FOUND:
            msg = f"Secret {self.opts.namespace}/{name} not found"
        elif plan.kind is seed.SeedKind.INCOMPLETE:
            msg = f"Secret {name} holds only part of the root material; missing: {', '.join(plan.missing)}"
        else:
            return plan, secret or {}
        await self.report.write(None, Cond("Seeded", "False", plan.kind.value, msg))
        fail(msg)
        return None, {}

    async def read_kubeconfigs(self) -> dict[str, bytes] | None:
        """A non-root shard's kubeconfigs from their Secrets (file name -> content).

        None, with Seeded=False written, when a Secret or its key is missing: kcp must not start without
        them (it would fail its flag validation, or run without the cache server).
        """
        wanted = (
            (seed.CACHE_KUBECONFIG, self.opts.cache_kubeconfig_secret),
            (seed.ROOT_SHARD_KUBECONFIG, self.opts.root_shard_kubeconfig_secret),
        )
        files: dict[str, bytes] = {}
        for filename, ref in wanted:
            if ref is None:
                continue
            where = f"Secret {self.opts.namespace}/{ref.name}"
            reason = "MissingSecret"
            try:
                value = seed.secret_value(await self.api.get(SECRETS, self.opts.namespace, ref.name), ref.key)
                msg = f"{where} has no key {ref.key}"
            except NotFound:
                value, msg = None, f"{where} not found"
            except seed.SeedError as exc:
                value, reason, msg = None, "InvalidMaterial", f"{where}: {exc}"
            except API_ERRORS as exc:
                fail(f"cannot read {where}: {exc}")
                return None
            if value is None:
                await self.report.write(None, Cond("Seeded", "False", reason, msg))
                fail(msg)
                return None
            files[filename] = value
        return files

    async def seed_root(self, plan: seed.SeedPlan, kubeconfigs: Mapping[str, bytes]) -> bool:
        try:
            seed.wipe_root(self.opts.root_dir)
            if plan.kind is seed.SeedKind.SEEDED:
                seed.write_material(self.opts.root_dir, plan.files)
            for name, content in kubeconfigs.items():
                seed.write_private_file(self.opts.root_dir, name, content)
        except (OSError, seed.SeedError) as exc:
            msg = f"cannot prepare {self.opts.root_dir}: {getattr(exc, 'strerror', None) or exc}"
            await self.report.write(None, Cond("Seeded", "False", "RootDirFailed", msg))
            fail(msg)
            return False
        if plan.kind is seed.SeedKind.SEEDED:
            msg = f"root material copied from Secret {self.opts.secret}"
        else:
            msg = "first slot of the shard: kcp generates the root material"
        if kubeconfigs:
            msg += f"; {' and '.join(kubeconfigs)} written from their Secrets"
        log.info("%s", msg)
        await self.report.write(None, Cond("Seeded", "True", plan.kind.value, msg))
        return True

    # -- once kcp runs -------------------------------------------------------------------------------

    async def upload_material(self, secret: dict[str, Any]) -> None:
        """Fresh start: once kcp has written the five files, put them into the shard's Secret.

        The PUT carries the resourceVersion read before seeding, so of two fresh slots only one wins; the
        loser re-reads and accepts the winner's material only when it is the same as its own.
        """
        files = await self.wait_for_material()
        name = self.opts.secret

        async def once() -> str:
            nonlocal secret
            try:
                await self.api.replace(
                    SECRETS, self.opts.namespace, name, seed.secret_with_material(secret, files)
                )
                return f"root material uploaded to Secret {name}"
            except Conflict:
                secret, plan = await self.current_secret()
            except NotFound:
                secret, plan = {}, seed.SeedPlan(seed.SeedKind.SECRET_NOT_FOUND)
            if plan.kind is seed.SeedKind.FRESH_START:
                raise _Again  # another field of the Secret changed: try again with the new resourceVersion
            if plan.kind is seed.SeedKind.SEEDED and plan.files == files:
                return f"root material is in Secret {name}"
            if plan.kind is seed.SeedKind.SEEDED:
                msg = f"Secret {name} got other root material while this slot started fresh; restart the slot"
            elif plan.kind is seed.SeedKind.SECRET_NOT_FOUND:
                msg = f"Secret {name} was deleted; cannot upload the root material"
            else:
                msg = f"Secret {name} now holds part of the root material; missing: {', '.join(plan.missing)}"
            await self.report.write(None, Cond("Seeded", "False", "MaterialConflict", msg))
            log.error("%s", msg)
            raise Fatal(msg)

        def retrying(exc: BaseException, _: float) -> None:
            if not isinstance(exc, _Again):
                log.warning("could not upload the root material to Secret %s, retrying: %s", name, exc)

        try:
            done = await retry.retrying(
                once,
                passing=retry.kinds(_Again, *API_ERRORS),
                backoff=retry.Backoff.every(POLL_SLOW),
                attempts=UPLOAD_ATTEMPTS,
                on_retry=retrying,
            )
        except (_Again, *API_ERRORS):
            msg = f"Secret {name} kept changing; gave up uploading the root material"
            await self.report.write(None, Cond("Seeded", "False", "MaterialConflict", msg))
            raise Fatal(msg) from None
        log.info("%s", done)
        await self.report.persist(None, Cond("Seeded", "True", "FreshStart", done))

    async def publish_admin(self, name: str, ready: asyncio.Event) -> None:
        """Once kcp is `ready`: its kcp-admin kubeconfig (a new token on every start) in Secret `name`.

        A few tries, then a logged error: kcp serves on whether or not the Secret could be written.
        """
        await ready.wait()

        async def once() -> None:
            text = (self.opts.root_dir / "admin.kubeconfig").read_bytes()
            kubeconfig = kcp_admin_kubeconfig(text, server=self.opts.front_url)
            await self.create_or_replace(
                seed.admin_secret(name, self.opts.namespace, kubeconfig, self.report.slot)
            )

        tries = 0

        def warn(exc: BaseException, _: float = 0.0) -> None:
            nonlocal tries
            tries += 1
            log.warning(
                "could not publish the kcp-admin kubeconfig in Secret %s (try %d): %s", name, tries, _why(exc)
            )

        try:
            await retry.retrying(
                once,
                passing=retry.kinds(OSError, KcpError, *API_ERRORS),
                backoff=retry.Backoff.every(POLL_SLOW),
                attempts=PUBLISH_ATTEMPTS,
                on_retry=warn,
            )
        except (OSError, KcpError, *API_ERRORS) as exc:
            warn(exc)
            log.error("gave up publishing the kcp-admin kubeconfig in Secret %s; kcp keeps running", name)
            return
        log.info("published kcp-admin kubeconfig in Secret %s", name)

    async def create_or_replace(self, body: dict[str, Any]) -> None:
        """Create the Secret; when it exists, replace it guarded by the resourceVersion just read."""
        name = body["metadata"]["name"]
        try:
            await self.api.create(SECRETS, self.opts.namespace, body)
        except Conflict:
            current = await self.api.get(SECRETS, self.opts.namespace, name)
            version = (current.get("metadata") or {}).get("resourceVersion")
            body = {**body, "metadata": {**body["metadata"], "resourceVersion": version}}
            await self.api.replace(SECRETS, self.opts.namespace, name, body)  # a 409 here: the next try

    async def current_secret(self) -> tuple[dict[str, Any], seed.SeedPlan]:
        """The Secret now and what it holds; retries while the API server is unreachable."""

        async def once() -> tuple[dict[str, Any], seed.SeedPlan]:
            try:
                secret = await self.api.get(SECRETS, self.opts.namespace, self.opts.secret)
                return secret, seed.plan_seed(secret)
            except NotFound:
                return {}, seed.SeedPlan(seed.SeedKind.SECRET_NOT_FOUND)
            except seed.SeedError:
                return {}, seed.SeedPlan(seed.SeedKind.INCOMPLETE)

        def warn(exc: BaseException, _: float) -> None:
            log.warning("could not read Secret %s, retrying: %s", self.opts.secret, exc)

        return await retry.retrying(
            once, passing=retry.kinds(*API_ERRORS), backoff=retry.Backoff.every(POLL_SLOW), on_retry=warn
        )

    async def wait_for_material(self) -> dict[str, bytes]:
        """The five files once complete, consistent and unchanged across two polls (kcp has finished them)."""
        previous: dict[str, bytes] | None = None
        while True:
            files = seed.read_material(self.opts.root_dir)
            if not seed.material_problems(files):
                if files == previous:
                    return files
                previous = files
            else:
                previous = None
            await asyncio.sleep(POLL_FAST)


def _why(exc: BaseException) -> str:
    if isinstance(exc, OSError):
        return f"cannot read admin.kubeconfig: {exc.strerror or type(exc).__name__}"
    return str(exc) or type(exc).__name__  # kcp.kubeconfig's messages never hold a token
