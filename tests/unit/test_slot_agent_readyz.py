"""What the host agent makes of a slot's `/readyz` answers (kcpshard.kcp.readyz), with a mocked transport."""

from __future__ import annotations

import httpx
import pytest

from kcpshard.kcp import readyz

NOT_READY = "[+]ping ok\n[-]poststarthook/bootstrap-system-crds failed: reason withheld\n[+]etcd ok\n"


def client(handler: httpx.MockTransport) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=handler)


async def test_ok() -> None:
    seen: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(str(request.url))
        return httpx.Response(200, text="ok")

    async with client(httpx.MockTransport(answer)) as c:
        assert await readyz.probe(c, 6443) == readyz.Readyz(True, "ok")
        await readyz.probe(c, 6443, host="::1")
    assert seen == ["https://127.0.0.1:6443/readyz", "https://[::1]:6443/readyz"]


async def test_not_ready_names_the_first_failed_check() -> None:
    transport = httpx.MockTransport(lambda _: httpx.Response(500, text=NOT_READY))
    async with client(transport) as c:
        result = await readyz.probe(c, 6443)
    assert result == readyz.Readyz(False, "[-]poststarthook/bootstrap-system-crds failed: reason withheld")


async def test_other_status_without_checks() -> None:
    transport = httpx.MockTransport(lambda _: httpx.Response(503, text="busy"))
    async with client(transport) as c:
        result = await readyz.probe(c, 6443)
    assert result == readyz.Readyz(False, "readyz on 127.0.0.1:6443 answered HTTP 503")


async def test_no_answer_says_why() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("[Errno 111] Connection refused", request=request)

    async with client(httpx.MockTransport(refuse)) as c:
        result = await readyz.probe(c, 6443)
    assert not result.ok
    assert result.detail == "readyz on 127.0.0.1:6443 did not answer: [Errno 111] Connection refused"


def test_client_for_refuses_a_ca_that_is_not_pem() -> None:
    with pytest.raises(ValueError, match="not valid PEM"):
        readyz.client_for(b"-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n")
