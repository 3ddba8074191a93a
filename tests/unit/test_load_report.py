"""The load client: its latency percentiles (nearest rank) as the bench reports them, and its retries."""

from __future__ import annotations

import asyncio
import math
import socket
import ssl
import struct
import time
from pathlib import Path

import httpx

from kcpshard_testkit.load import KubeStyleLoad, LoadReport, reset_or_eof, retry_after
from kcpshard_testkit.pki import CertificateAuthority
from kcpshard_testkit.tcp import free_port
from kcpshard_testkit.waiting import wait_for


def test_percentiles_are_nearest_rank() -> None:
    report = LoadReport(latencies=[float(n) for n in range(100, 0, -1)])  # 1..100, unsorted
    assert report.percentile(50) == 50.0
    assert report.percentile(99) == 99.0
    assert report.percentile(100) == 100.0
    assert report.percentile(0) == 1.0


def test_no_latency_is_no_figure() -> None:
    assert math.isnan(LoadReport().percentile(99))


def test_per_second_counts_requests_by_the_second_they_ended_in() -> None:
    t0 = 1_800_000_000.0
    report = LoadReport(
        outcomes=[
            (t0 - 0.5, True),  # before the window: left out
            (t0, True),
            (t0 + 0.9, True),
            (t0 + 0.95, False),
            (t0 + 1.0, False),
            (t0 + 2.5, True),
            (t0 + 2.9, True),  # at the window's end: left out
        ]
    )
    assert report.per_second(t0, t0 + 2.9) == [(t0, 2, 1), (t0 + 1, 0, 1), (t0 + 2, 1, 0)]
    # A window that is not whole seconds ends with a partial second; an empty or reversed one has none.
    assert report.per_second(t0 + 2, t0 + 2.6) == [(t0 + 2, 1, 0)]
    assert report.per_second(t0, t0) == []
    assert report.per_second(t0 + 1, t0) == []
    assert LoadReport().per_second(t0, t0 + 2) == [(t0, 0, 0), (t0 + 1, 0, 0)]


async def test_every_request_has_an_outcome_failed_ones_too() -> None:
    # Nothing listens on the port: every request fails at once (connection refused).
    load = KubeStyleLoad(f"https://127.0.0.1:{free_port()}", "token", CertificateAuthority().cert_pem)
    before = time.time()
    await load.start()

    async def some() -> bool:
        return len(load.report.outcomes) >= 5

    await wait_for("five requests", some, timeout=10, interval=0.01)
    report = await load.stop()
    after = time.time()
    assert report.ok == 0
    assert len(report.outcomes) == len(report.latencies) == report.failed
    assert all(not ok and before <= at <= after for at, ok in report.outcomes)
    assert sum(failed for _, _, failed in report.per_second(before, after + 1)) == report.failed


def test_the_outage_runs_from_the_last_success_before_failures_to_the_first_after() -> None:
    report = LoadReport(
        outcomes=[(10.0, True), (10.5, False), (11.0, False), (12.5, True), (13.0, True), (20.0, False)]
    )
    # 10.0 -> 12.5 (two failures between), then a failure at the end: 13.0 -> 20.0.
    assert report.outage_seconds() == 2.5 + 7.0
    assert LoadReport(outcomes=[(1.0, True), (2.0, True)]).outage_seconds() == 0.0
    # Parallel requests end out of order: sorted by when they ended.
    assert LoadReport(outcomes=[(3.0, True), (2.0, False), (1.0, True)]).outage_seconds() == 2.0


def _wrapped(inner: BaseException) -> BaseException:
    """As httpx raises it: its ConnectError, from the transport's error, from the socket's."""
    try:
        try:
            raise inner
        except BaseException as exc:
            raise OSError("transport") from exc
    except OSError as exc:
        return exc


def test_a_reset_or_a_closed_connection_is_retried_as_client_go_does_a_refusal_is_not() -> None:
    assert reset_or_eof(_wrapped(ConnectionResetError(104, "Connection reset by peer")))
    assert reset_or_eof(_wrapped(ssl.SSLEOFError(8, "EOF occurred in violation of protocol")))
    assert reset_or_eof(RuntimeError("Server disconnected without sending a response."))
    assert not reset_or_eof(_wrapped(ConnectionRefusedError(111, "Connection refused")))
    assert not reset_or_eof(_wrapped(TimeoutError("timed out")))


async def test_a_get_reset_in_the_handshake_is_retried_and_then_answered(tmp_path: Path) -> None:
    """A server that resets the first connections (as a killed proxy's do) and then answers: no failure,
    the resets counted as retried."""
    ca = CertificateAuthority()
    resets = 2

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal resets
        if resets:
            resets -= 1
            sock = writer.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # RST on close
            writer.transport.abort()
            return
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}")
        await writer.drain()
        writer.close()

    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(*ca.serving("front").write(tmp_path / "tls.crt", tmp_path / "tls.key"))
    server = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=context)
    port = server.sockets[0].getsockname()[1]
    async with server:
        load = KubeStyleLoad(f"https://127.0.0.1:{port}", "token", ca.cert_pem, concurrency=1)
        await load.start()

        async def answered() -> bool:
            return load.report.ok >= 1

        await wait_for("an answer after the resets", answered, timeout=20, interval=0.05)
        report = await load.stop()
    assert report.failed == 0, report.failures
    # The first may pass as Go's one retry of a closed keep-alive; the second only as client-go's retry.
    assert report.retried_closed + report.retried_reset == 2 and report.retried_reset >= 1


def test_longest_no_answer_is_per_worker_within_the_window() -> None:
    # worker 1 answered at 1, 2, 8 (6 s without an answer); worker 2 kept answering meanwhile
    report = LoadReport(answers=[[0.0, 1.0, 2.0, 8.0], [0.0, 3.0, 4.0, 5.0, 6.0, 7.0]])
    assert report.longest_no_answer_seconds() == 6.0
    assert report.longest_no_answer_seconds(start=2.5, end=7.5) == 3.0  # only worker 2's 0 -> 3 ends in it
    assert report.longest_no_answer_seconds(start=9.0) == 0.0
    assert LoadReport().longest_no_answer_seconds() == 0.0


def test_a_429_or_any_5xx_with_retry_after_is_retried_as_client_go_does() -> None:
    def answer(code: int, **headers: str) -> httpx.Response:
        return httpx.Response(code, headers=headers)

    # kcp's answer after its shutdown delay: 503 "apiserver is shutting down", Retry-After: 1
    assert retry_after(answer(503, **{"Retry-After": "1"})) == 1.0
    assert retry_after(answer(429, **{"Retry-After": "30"})) == 5.0  # capped
    assert retry_after(answer(500, **{"Retry-After": "2"})) == 2.0
    assert retry_after(answer(503)) is None  # no Retry-After: a failure
    assert retry_after(answer(404, **{"Retry-After": "1"})) is None  # only 429 and 5xx
    assert retry_after(answer(503, **{"Retry-After": "Wed, 21 Oct 2026 07:28:00 GMT"})) is None
