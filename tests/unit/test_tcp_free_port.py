"""free_port hands out listening ports that no outgoing connection can have taken as its source port."""

from __future__ import annotations

import socket

from kcpshard_testkit import tcp


def test_ports_lie_below_the_ephemeral_range_are_bindable_and_never_repeat() -> None:
    low = tcp._ephemeral_low()
    ports = [tcp.free_port() for _ in range(50)]
    assert len(set(ports)) == len(ports)
    assert all(10000 <= p < low for p in ports), ports
    with socket.socket() as s:
        s.bind(("127.0.0.1", ports[-1]))  # still free: nothing holds it after the check
