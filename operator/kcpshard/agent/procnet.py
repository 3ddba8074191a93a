"""Which TCP ports a process listens on, from /proc (Linux only, no root needed for own-user processes).

Reads `/proc/<pid>/net/tcp` and `/proc/<pid>/net/tcp6` (the socket table of the process's network
namespace) and keeps the LISTEN sockets (state 0A) whose inode is one of the process's open file
descriptors (`/proc/<pid>/fd/* -> socket:[inode]`), the way `ss -ltnp` matches them.
"""

from __future__ import annotations

import os
from pathlib import Path

TCP_LISTEN = "0A"


def socket_inodes(pid: int) -> set[int]:
    """Inodes of the sockets the process has open; empty when the process is gone."""
    inodes: set[int] = set()
    fd_dir = Path(f"/proc/{pid}/fd")
    try:
        entries = os.listdir(fd_dir)
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return inodes
    for fd in entries:
        try:
            target = os.readlink(fd_dir / fd)
        except OSError:
            continue  # closed meanwhile
        if target.startswith("socket:[") and target.endswith("]"):
            inodes.add(int(target[8:-1]))
    return inodes


def parse_listeners(table: str) -> list[tuple[int, int]]:
    """(port, inode) of LISTEN rows of a /proc/net/tcp{,6} table."""
    rows: list[tuple[int, int]] = []
    for line in table.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 10 or fields[3] != TCP_LISTEN:
            continue
        _, _, port_hex = fields[1].rpartition(":")
        rows.append((int(port_hex, 16), int(fields[9])))
    return rows


def listening_ports(pid: int) -> list[int]:
    """Sorted TCP ports on which `pid` itself has a listening socket (IPv4 and IPv6)."""
    inodes = socket_inodes(pid)
    if not inodes:
        return []
    ports: set[int] = set()
    for name in ("tcp", "tcp6"):
        try:
            table = Path(f"/proc/{pid}/net/{name}").read_text()
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        ports.update(port for port, inode in parse_listeners(table) if inode in inodes)
    return sorted(ports)
