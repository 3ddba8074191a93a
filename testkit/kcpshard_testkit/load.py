"""A kube-style client that keeps sending requests through the front during a roll.

It behaves as client-go does where that matters for a roll, and no further:
- a 429 with `Retry-After` is retried after that many seconds (client-go's
  `checkWait`/`IsRetryableError`, up to 10 tries): kcp answers so while it shuts down;
- an idempotent request on a reused keep-alive connection that the server closed
  before any byte of the answer came back is retried once on a new connection
  (Go's `net/http.Transport` does the same: `shouldRetryRequest`).
Anything else counts as a failure: a refused connection, a 5xx, a timeout.
"""

from __future__ import annotations

import asyncio
import math
import ssl
import time
from dataclasses import dataclass, field

import httpx


def kube_client(base_url: str, token: str, ca_pem: bytes, timeout: float = 10.0) -> httpx.AsyncClient:
    """An HTTP client as kubectl's would be: the server checked against `ca_pem`, a bearer token, JSON."""
    return httpx.AsyncClient(
        base_url=base_url,
        verify=ssl.create_default_context(cadata=ca_pem.decode()),
        headers={"Authorization": f"Bearer {token}", "Accept": "application/json"},
        timeout=httpx.Timeout(timeout),
    )


@dataclass
class LoadReport:
    ok: int = 0
    failed: int = 0
    retried_429: int = 0
    retried_closed: int = 0
    failures: list[str] = field(default_factory=list)
    by_status: dict[int, int] = field(default_factory=dict)
    seconds: float = 0.0
    latencies: list[float] = field(default_factory=list)  # seconds per request, retries included
    # (time.time() when the request ended, succeeded) per request, failed ones included
    outcomes: list[tuple[float, bool]] = field(default_factory=list)

    def percentile(self, p: float) -> float:
        """The p-th percentile of the latencies (nearest rank), in seconds; nan with none."""
        if not self.latencies:
            return float("nan")
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, max(0, round(p / 100 * len(ordered)) - 1))]

    def per_second(self, start: float, end: float) -> list[tuple[float, int, int]]:
        """(second's start, succeeded, failed) for each whole second from `start` (wall clock) while
        before `end`, counting the requests that ended in it; requests outside [start, end) are left out."""
        if not end > start:
            return []
        seconds = math.ceil(end - start)
        ok = [0] * seconds
        failed = [0] * seconds
        for at, succeeded in self.outcomes:
            if start <= at < end:
                i = min(int(at - start), seconds - 1)
                if succeeded:
                    ok[i] += 1
                else:
                    failed[i] += 1
        return [(start + i, ok[i], failed[i]) for i in range(seconds)]

    def outage_seconds(self) -> float:
        """How long the client could get no answer: for each run of failed requests (ordered by when they
        ended), from the last success before it to the first success after it. A run still failing at
        the end counts to its last failure."""
        total, last_ok, first_fail, last_fail = 0.0, None, None, None
        for at, ok in sorted(self.outcomes):
            if not ok:
                first_fail = at if first_fail is None else first_fail
                last_fail = at
                continue
            if first_fail is not None:
                total += at - (last_ok if last_ok is not None else first_fail)
            last_ok, first_fail = at, None
        if first_fail is not None and last_fail is not None:
            total += last_fail - (last_ok if last_ok is not None else first_fail)
        return round(total, 3)

    def summary(self) -> str:
        return (
            f"{self.ok} requests succeeded, {self.failed} failed "
            f"({self.retried_429} retried after 429, {self.retried_closed} after a closed keep-alive) "
            f"in {self.seconds:.1f}s"
        )


class KubeStyleLoad:
    def __init__(
        self,
        base_url: str,
        token: str,
        ca_pem: bytes,
        path: str = "/clusters/root/api/v1/namespaces",
        *,
        concurrency: int = 2,
        max_retries: int = 10,
    ) -> None:
        self.base_url = base_url
        self.path = path
        self.concurrency = concurrency
        self.max_retries = max_retries
        self.report = LoadReport()
        self._client = kube_client(base_url, token, ca_pem)
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    async def _one(self) -> bool:
        """One request, with client-go's retries; True when it got a 200."""
        closed_retry_used = False
        for _ in range(self.max_retries):
            try:
                response = await self._client.get(self.path)
            except (httpx.RemoteProtocolError, httpx.ReadError) as exc:
                # The server closed a reused connection before answering: retry once, as Go does.
                if not closed_retry_used:
                    closed_retry_used = True
                    self.report.retried_closed += 1
                    continue
                self._fail(f"{type(exc).__name__}: {exc}")
                return False
            except httpx.HTTPError as exc:
                self._fail(f"{type(exc).__name__}: {exc}")
                return False
            self.report.by_status[response.status_code] = (
                self.report.by_status.get(response.status_code, 0) + 1
            )
            if response.status_code == 429 and "Retry-After" in response.headers:
                self.report.retried_429 += 1
                await asyncio.sleep(min(float(response.headers["Retry-After"]), 5.0))
                continue
            if response.status_code == 200:
                self.report.ok += 1
                return True
            self._fail(f"HTTP {response.status_code}: {response.text[:200]}")
            return False
        self._fail(f"gave up after {self.max_retries} tries")
        return False

    def _fail(self, what: str) -> None:
        self.report.failed += 1
        if len(self.report.failures) < 20:
            self.report.failures.append(what)

    async def _worker(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            ok = await self._one()
            self.report.latencies.append(time.monotonic() - started)
            self.report.outcomes.append((time.time(), ok))

    async def start(self) -> None:
        self._started = time.monotonic()
        self._tasks = [asyncio.create_task(self._worker()) for _ in range(self.concurrency)]

    async def stop(self) -> LoadReport:
        self._stop.set()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._client.aclose()
        self.report.seconds = time.monotonic() - self._started
        return self.report
