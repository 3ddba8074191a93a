"""A kube-style client that keeps sending requests through the front during a roll.

It behaves as client-go does where that matters for a roll, and no further:
- a 429 or any 5xx with `Retry-After` is retried after that many seconds (client-go's
  `rest/with_retry.go`, `checkWait`, up to 10 tries): kcp answers 503 "apiserver is shutting down" with
  `Retry-After: 1` to a request that reaches it after its shutdown delay;
- an idempotent request on a reused keep-alive connection that the server closed
  before any byte of the answer came back is retried once on a new connection
  (Go's `net/http.Transport` does the same: `shouldRetryRequest`);
- a GET whose connection was reset or closed (an EOF, also during the TLS handshake) is
  retried after 1 s, within the same 10 tries (client-go's `rest.Request.request`:
  `IsConnectionReset`/`IsProbableEOF` on a GET, answered as a `Retry-After: 1`).
Anything else counts as a failure: a refused connection, a 5xx without `Retry-After`, a timeout.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import ssl
import time
from collections.abc import Iterator
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
    retried_after: int = 0  # 429 or 5xx with Retry-After
    retried_closed: int = 0
    retried_reset: int = 0
    failures: list[str] = field(default_factory=list)
    by_status: dict[int, int] = field(default_factory=dict)
    seconds: float = 0.0
    latencies: list[float] = field(default_factory=list)  # seconds per request, retries included
    # (time.time() when the request ended, succeeded) per request, failed ones included
    outcomes: list[tuple[float, bool]] = field(default_factory=list)
    # per worker: time.time() of its start, then of each answer it got (its last, 429s waited out)
    answers: list[list[float]] = field(default_factory=list)

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

    def longest_no_answer_seconds(self, start: float = 0.0, end: float = math.inf) -> float:
        """The longest a worker went without an answer (a success or a failure) that ended in
        [start, end): a worker sends its next request at once, so this is how long a client's caller
        waited, retries and Retry-After waits included."""
        longest = 0.0
        for times in self.answers:
            for before, after in itertools.pairwise(times):
                if start <= after < end:
                    longest = max(longest, after - before)
        return round(longest, 3)

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
            f"({self.retried_after} retried after Retry-After, "
            f"{self.retried_closed} after a closed keep-alive, "
            f"{self.retried_reset} after a reset) "
            f"in {self.seconds:.1f}s"
        )


def retry_after(response: httpx.Response) -> float | None:
    """Seconds to wait before the same request again, as client-go's `checkWait`: a 429 or any 5xx with
    a `Retry-After` of whole seconds (capped at 5 here, so a roll's test does not idle); else None."""
    if response.status_code != 429 and response.status_code < 500:
        return None
    value = response.headers.get("Retry-After", "")
    return min(float(value), 5.0) if value.isdigit() else None


RESETS = (ConnectionResetError, BrokenPipeError, EOFError, ssl.SSLEOFError, ssl.SSLZeroReturnError)


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def reset_or_eof(exc: BaseException) -> bool:
    """What client-go's `IsConnectionReset`/`IsProbableEOF` take for a transient error: the connection
    reset by the peer or closed under the request (also in the TLS handshake). A refused connection is
    neither: nothing listens."""
    chain = list(_chain(exc))
    if any(isinstance(e, ConnectionRefusedError) for e in chain):
        return False
    return any(
        isinstance(e, RESETS)
        or "connection reset by peer" in str(e).lower()
        or "server disconnected" in str(e).lower()
        for e in chain
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
        fresh_connections: bool = False,
    ) -> None:
        """`fresh_connections`: each request on a connection of its own (`Connection: close`), as a new
        kubectl per request does: it sees a port nothing listens on, which kept-alive connections hide."""
        self.base_url = base_url
        self.path = path
        self.concurrency = concurrency
        self.max_retries = max_retries
        self.report = LoadReport()
        self._client = kube_client(base_url, token, ca_pem)
        if fresh_connections:
            self._client.headers["Connection"] = "close"
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    async def _one(self) -> bool:
        """One request, with client-go's retries; True when it got a 200."""
        closed_retry_used = False
        for _ in range(self.max_retries):
            try:
                response = await self._client.get(self.path)
            except (httpx.RemoteProtocolError, httpx.ReadError, httpx.ConnectError) as exc:
                # The server closed a reused connection before answering: retry once, as Go does.
                if not closed_retry_used and not isinstance(exc, httpx.ConnectError):
                    closed_retry_used = True
                    self.report.retried_closed += 1
                    continue
                if reset_or_eof(exc):  # client-go retries a GET after 1 s
                    self.report.retried_reset += 1
                    await asyncio.sleep(1.0)
                    continue
                self._fail(f"{type(exc).__name__}: {exc}")
                return False
            except httpx.HTTPError as exc:
                self._fail(f"{type(exc).__name__}: {exc}")
                return False
            self.report.by_status[response.status_code] = (
                self.report.by_status.get(response.status_code, 0) + 1
            )
            wait = retry_after(response)
            if wait is not None:
                self.report.retried_after += 1
                await asyncio.sleep(wait)
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
        answers = [time.time()]
        self.report.answers.append(answers)
        while not self._stop.is_set():
            started = time.monotonic()
            ok = await self._one()
            self.report.latencies.append(time.monotonic() - started)
            self.report.outcomes.append((time.time(), ok))
            answers.append(time.time())

    async def start(self) -> None:
        self._started = time.monotonic()
        self._tasks = [asyncio.create_task(self._worker()) for _ in range(self.concurrency)]

    async def stop(self) -> LoadReport:
        self._stop.set()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._client.aclose()
        self.report.seconds = time.monotonic() - self._started
        return self.report
