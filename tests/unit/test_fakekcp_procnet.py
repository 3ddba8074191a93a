"""Listening-port discovery from /proc."""

from __future__ import annotations

import os
import socket

from kcpshard.agent.procnet import listening_ports, parse_listeners

TABLE = (  # /proc/net/tcp, trailing columns trimmed
    """  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 111 1
   1: 0100007F:1F91 0100007F:9C40 01 00000000:00000000 00:00000000 00000000     0        0 222 1
"""
)


def test_parse_keeps_only_listen_rows() -> None:
    assert parse_listeners(TABLE) == [(8080, 111)]


def test_own_listening_socket_is_found_and_others_are_not() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with socket.socket() as client:
            client.connect(("127.0.0.1", port))  # an established socket is not a listener
            assert port in listening_ports(os.getpid())
    assert port not in listening_ports(os.getpid())


def test_gone_process_has_no_ports() -> None:
    assert listening_ports(2**22 + 7) == []
