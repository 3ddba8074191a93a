"""The configuration of one HAProxy of a shard's front, and how to read what it says: pure, so it is
unit-tested without HAProxy (haproxy.py runs and drives the process).

The front of a shard: clients connect to ``bind_address:bind_port`` and HAProxy forwards each new TCP
connection to the one ready server of backend ``slots`` (server ``a`` or ``b``, one per kcp slot).
"""

from __future__ import annotations

import contextlib
import errno
import ipaddress
import os
import re
import signal
from collections.abc import Iterable
from pathlib import Path

BACKEND = "slots"
SLOTS = ("a", "b")
# Longest runtime socket path HAProxy 2.6 accepts: Linux's 107 bytes less the ".<pid>.tmp"
# suffix HAProxy binds first and renames (its own error says "max 97").
MAX_SOCKET_PATH = 97


class HAProxyError(RuntimeError):
    """HAProxy could not be found, started or driven; the message is meant for a person."""


# Why a listener cannot bind, by errno; "{on}" is filled with " on node <name>" when the caller knows it.
_BIND_REASONS = {
    errno.EADDRINUSE: "the address is already in use{on} (another process holds the port)",
    errno.EADDRNOTAVAIL: "the address is not assigned to any interface{on}",
    errno.EACCES: "permission denied{on}: ports below 1024 need root or CAP_NET_BIND_SERVICE",
}


# HAProxy 2.6 src/sock_inet.c, sock_inet_bind_receiver(): "cannot bind socket (<strerror>)".
_BIND_ALERT = re.compile(r"cannot bind socket \((?P<reason>[^)]*)\)")


class HAProxyBindError(HAProxyError):
    """The front address cannot be listened on; ``message(node)`` says why, naming the node."""

    def __init__(self, address: str, port: int, code: int | None, detail: str = "") -> None:
        self.address, self.port, self.code, self.detail = address, port, code, detail
        super().__init__(self.message(None))

    def message(self, node: str | None) -> str:
        on = f" on node {node}" if node else ""
        template = _BIND_REASONS.get(self.code or 0)
        reason = template.format(on=on) if template else f"{self.detail or 'bind failed'}{on}"
        return f"cannot listen on {self.address}:{self.port}: {reason}"


def bind_failure(lines: Iterable[str], address: str, port: int) -> HAProxyBindError | None:
    """The bind failure HAProxy reported in its output, if any (the last one wins)."""
    found: HAProxyBindError | None = None
    by_text = {os.strerror(code): code for code in _BIND_REASONS}
    for line in lines:
        match = _BIND_ALERT.search(line)
        if match:
            reason = match.group("reason")
            found = HAProxyBindError(address, port, by_text.get(reason), reason.lower())
    return found


def describe_returncode(code: int) -> str:
    """``exited with code 1`` or ``exited with signal SIGKILL`` (asyncio gives -N for signal N)."""
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"exited with signal {signal.Signals(-code).name}"
        return f"exited with signal {-code}"
    return f"exited with code {code}"


def check_slot(slot: str) -> str:
    if slot not in SLOTS:
        raise HAProxyError(f"unknown slot {slot!r}: the front has servers {', '.join(SLOTS)}")
    return slot


def check_port(port: int, what: str) -> int:
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise HAProxyError(f"{what} must be a port number 1-65535, not {port!r}")
    return port


def check_ip(address: str, what: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    # Only literal IPs: no name resolution in HAProxy, and nothing can be injected into the config.
    try:
        return ipaddress.ip_address(address)
    except ValueError:
        raise HAProxyError(f"{what} must be an IP address, not {address!r}") from None


def _hostport(address: str, port: int) -> str:
    ip = check_ip(address, "address")
    return f"ipv6@{ip}:{port}" if ip.version == 6 else f"{ip}:{port}"


def render_config(
    *,
    bind_address: str,
    bind_port: int,
    socket_path: Path,
    maxconn: int = 4096,
    backend: tuple[str, int] | None = None,
) -> str:
    """The haproxy.cfg of a front: pure, so it can be unit-tested.

    `backend` (slot, port): the server that takes connections from the first one accepted. A process
    started beside a serving one shares its port at once, so it must never listen with no server.
    """
    check_port(bind_port, "the front port")
    if backend is not None:
        check_slot(backend[0])
        check_port(backend[1], "the backend port")
    bind = _hostport(bind_address, bind_port)
    sock = str(socket_path)
    if any(c.isspace() for c in sock) or len(sock.encode()) > MAX_SOCKET_PATH:
        raise HAProxyError(
            f"runtime socket path {sock!r} has blanks or is longer than {MAX_SOCKET_PATH} bytes"
        )
    return "\n".join(
        [
            "# Written by kcpshard agent front; rewritten on every start.",
            "global",
            # Runtime API: the front agent is its only user; mode 600 keeps other local users out.
            f"    stats socket {sock} mode 600 level admin",
            "    stats timeout 30s",
            f"    maxconn {maxconn}",
            # No "noreuseport": the front runs two HAProxy processes on one port (SO_REUSEPORT, HAProxy's
            # default), so one dying loses no new connection. A foreign listener is refused before the
            # first of them starts (check_bindable binds without SO_REUSEPORT).
            # No "log": with -db HAProxy already prints its alerts and server state changes on stderr,
            # which the agent relays; a log line per connection would be noise.
            "",
            "defaults",
            "    mode tcp",
            "    option dontlognull",
            "    timeout connect 2s",
            # kcp clients hold long watches: an idle hour is normal, not a dead peer.
            "    timeout client 1h",
            "    timeout server 1h",
            "",
            "frontend front",
            f"    bind {bind}",
            f"    default_backend {BACKEND}",
            "",
            f"backend {BACKEND}",
            # No health checks and no L7: the operator decides readiness from each slot's own /readyz
            # (reported on its KcpSlot) and flips explicitly; HAProxy checks would race that decision,
            # and TLS passes through untouched so clients keep talking to kcp's own certificate.
            *(
                f"    server {slot} 127.0.0.1:{backend[1]}"
                if backend is not None and slot == backend[0]
                else f"    server {slot} 127.0.0.1:1 disabled"
                for slot in SLOTS
            ),
            "",
        ]
    )


def parse_table(text: str, sep: str | None) -> list[dict[str, str]]:
    """Rows of a runtime API dump with a ``#`` header line (``show stat``, ``show servers state``)."""
    header: list[str] | None = None
    rows: list[dict[str, str]] = []
    for line in text.splitlines():
        if line.startswith("#"):
            header = line.lstrip("#").strip().split(sep)
            header = [h.strip() for h in header]
            continue
        if header is None or not line.strip():
            continue
        rows.append(dict(zip(header, line.split(sep), strict=False)))
    return rows
