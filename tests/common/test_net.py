"""diag.common.net.free_port: a port below the ephemeral range, free now."""

from __future__ import annotations

import socket

from diag.common import net


def test_free_ports_lie_below_the_ephemeral_range_and_bind():
    top = net._ephemeral_low() - 2
    for _ in range(20):
        port = net.free_port()
        assert net._LOWEST <= port <= top
        with socket.socket() as s:     # the server that asked for it can bind it
            s.bind(("127.0.0.1", port))


def test_a_port_already_bound_is_not_handed_out(monkeypatch):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        busy = taken.getsockname()[1]
        taken.listen()
        draws = iter([busy, 20123])
        monkeypatch.setattr(net.random, "randint", lambda lo, hi: next(draws))
        assert net.free_port() == 20123
