"""The front's haproxy.cfg is a pure function of the bind address, port and socket path."""

from pathlib import Path

import pytest

from kcpshard.agent.haproxy_config import HAProxyError, bind_failure, describe_returncode, render_config

SOCK = Path("/run/kcpshard/front/haproxy.sock")


def _lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines()]


def test_config_has_tcp_front_private_admin_socket_and_two_disabled_servers() -> None:
    lines = _lines(render_config(bind_address="127.0.0.1", bind_port=6443, socket_path=SOCK))
    assert f"stats socket {SOCK} mode 600 level admin" in lines
    assert "mode tcp" in lines
    assert "bind 127.0.0.1:6443" in lines
    assert "default_backend slots" in lines
    assert "server a 127.0.0.1:1 disabled" in lines
    assert "server b 127.0.0.1:1 disabled" in lines
    assert "noreuseport" not in lines  # the pair shares the port
    assert "daemon" not in lines


def test_a_starting_backend_serves_from_the_first_connection() -> None:
    config = render_config(bind_address="127.0.0.1", bind_port=6443, socket_path=SOCK, backend=("b", 4321))
    lines = _lines(config)
    assert "server b 127.0.0.1:4321" in lines
    assert "server a 127.0.0.1:1 disabled" in lines
    with pytest.raises(HAProxyError):
        render_config(bind_address="127.0.0.1", bind_port=6443, socket_path=SOCK, backend=("c", 4321))


def test_config_has_no_health_checks_and_no_http() -> None:
    text = render_config(bind_address="127.0.0.1", bind_port=6443, socket_path=SOCK)
    servers = [line for line in _lines(text) if line.startswith("server ")]
    assert servers and all(" check" not in line for line in servers)
    assert "mode http" not in text


def test_ipv6_bind_is_explicit() -> None:
    lines = _lines(render_config(bind_address="::1", bind_port=6443, socket_path=SOCK))
    assert "bind ipv6@::1:6443" in lines


@pytest.mark.parametrize(
    ("address", "port"),
    [("localhost", 6443), ("127.0.0.1\n  bind 0.0.0.0", 6443), ("127.0.0.1", 0), ("127.0.0.1", 70000)],
)
def test_bad_bind_is_refused(address: str, port: int) -> None:
    with pytest.raises(HAProxyError):
        render_config(bind_address=address, bind_port=port, socket_path=SOCK)


def test_socket_path_too_long_for_a_unix_socket_is_refused() -> None:
    with pytest.raises(HAProxyError, match="longer than"):
        render_config(bind_address="127.0.0.1", bind_port=6443, socket_path=Path("/" + "x" * 120))


def test_runtime_socket_moves_to_a_short_private_folder_when_the_state_dir_is_deep(tmp_path: Path) -> None:
    from kcpshard.agent.haproxy import runtime_socket_path
    from kcpshard.agent.haproxy_config import MAX_SOCKET_PATH

    shallow = runtime_socket_path(tmp_path)
    assert shallow == tmp_path / "haproxy.sock"
    deep = tmp_path / ("x" * 60) / ("y" * 60)
    path = runtime_socket_path(deep)
    assert len(str(path).encode()) <= MAX_SOCKET_PATH
    assert path.parent.stat().st_mode & 0o777 == 0o700
    assert runtime_socket_path(deep) == path  # stable: a restarted agent finds its socket


# What HAProxy 2.6.12 prints when its bind fails (captured from /usr/sbin/haproxy -db).
_IN_USE = [
    "[NOTICE]   (5751) : haproxy version is 2.6.12-1+deb12u4",
    "[ALERT]    (5751) : Binding [a.cfg:16] for frontend front: cannot bind socket (Address already in use)"
    " for [127.0.0.1:35255]",
    "[ALERT]    (5751) : [haproxy.main()] Some protocols failed to start their listeners! Exiting.",
]


def test_bind_failure_in_use_is_read_from_haproxy_output() -> None:
    found = bind_failure(_IN_USE, "127.0.0.1", 35255)
    assert found is not None
    assert found.message("n1") == (
        "cannot listen on 127.0.0.1:35255: the address is already in use on node n1 "
        "(another process holds the port)"
    )
    assert str(found) == (
        "cannot listen on 127.0.0.1:35255: the address is already in use (another process holds the port)"
    )


def test_bind_failure_address_not_on_host_and_unknown_reason() -> None:
    line = "[ALERT] (1) : Binding [x:16]: cannot bind socket (Cannot assign requested address) for [...]"
    found = bind_failure([line], "10.0.0.9", 6443)
    assert found is not None
    assert (
        found.message("n1")
        == "cannot listen on 10.0.0.9:6443: the address is not assigned to any interface on node n1"
    )
    odd = bind_failure(["[ALERT] (1) : cannot bind socket (Something new)"], "127.0.0.1", 6443)
    assert odd is not None and odd.message(None) == "cannot listen on 127.0.0.1:6443: something new"


def test_bind_failure_is_none_for_other_output() -> None:
    assert bind_failure(["[ALERT] (1) : parsing [x:3]: unknown keyword 'bogus'"], "127.0.0.1", 6443) is None


def test_describe_returncode() -> None:
    assert describe_returncode(1) == "exited with code 1"
    assert describe_returncode(-9) == "exited with signal SIGKILL"
    assert describe_returncode(-200) == "exited with signal 200"
