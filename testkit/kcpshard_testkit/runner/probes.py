"""Readiness probes (``pkg/probe/{exec,http,tcp}`` of the kubelet).

``exec`` runs the command with the container's env and path mapping (success: exit 0 within
``timeoutSeconds``); ``httpGet`` succeeds on 200..399 (HTTPS without certificate verification, as the kubelet
does); ``tcpSocket`` succeeds when a connection opens. Named ports resolve through the container's ``ports``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx

from kcpshard_testkit.runner.envs import POD_IP


def _port(value: Any, container: Mapping[str, Any]) -> int:
    if isinstance(value, int) or str(value).isdigit():
        return int(value)
    for port in container.get("ports") or []:
        if port.get("name") == value:
            return int(port["containerPort"])
    raise ValueError(f"named port {value!r} not found in the container")


async def run_probe(
    probe: Mapping[str, Any],
    container: Mapping[str, Any],
    argv_mapper: Any,
    env: Mapping[str, str],
    cwd: Path,
) -> bool:
    """One probe attempt. ``argv_mapper`` maps an exec command as the container's own command is mapped."""
    timeout = float(probe.get("timeoutSeconds") or 1)
    try:
        if "exec" in probe:
            return await _exec(argv_mapper(probe["exec"].get("command") or []), env, cwd, timeout)
        if "httpGet" in probe:
            return await _http(probe["httpGet"], container, timeout)
        if "tcpSocket" in probe:
            spec = probe["tcpSocket"]
            return await _tcp(str(spec.get("host") or POD_IP), _port(spec.get("port"), container), timeout)
    except (OSError, ValueError, httpx.HTTPError, TimeoutError):
        return False
    return False


async def _exec(argv: Sequence[str], env: Mapping[str, str], cwd: Path, limit: float) -> bool:
    if not argv:
        return False
    proc = await asyncio.create_subprocess_exec(
        *argv,
        env=dict(env),
        cwd=str(cwd),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        return await asyncio.wait_for(proc.wait(), limit) == 0
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()
        return False


async def _http(spec: Mapping[str, Any], container: Mapping[str, Any], limit: float) -> bool:
    scheme = str(spec.get("scheme") or "HTTP").lower()
    host = str(spec.get("host") or POD_IP)
    path = str(spec.get("path") or "/")
    path = path if path.startswith("/") else "/" + path
    url = f"{scheme}://{host}:{_port(spec.get('port'), container)}{path}"
    headers = {str(h.get("name")): str(h.get("value")) for h in spec.get("httpHeaders") or []}
    async with httpx.AsyncClient(verify=False, timeout=limit) as client:
        resp = await client.get(url, headers=headers)
    return 200 <= resp.status_code < 400


async def _tcp(host: str, port: int, limit: float) -> bool:
    _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), limit)
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return True
