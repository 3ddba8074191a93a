"""kcp flag parsing and validation of the stand-in."""

from __future__ import annotations

import pytest

from kcpshard_testkit.fakekcp import flags


def test_both_value_syntaxes_and_bools() -> None:
    o = flags.parse(
        [
            "--secure-port",
            "0",
            "--experimental-bind-free-port",
            "--bind-address=127.0.0.1",
            "--etcd-servers=http://a:1,http://b:2",
            "--shutdown-delay-duration",
            "1m30s",
            "-v=4",
            "--enable-leader-election=false",
            "--feature-gates=A=true,B=false",
        ]
    )
    assert o.secure_port == 0 and o.experimental_bind_free_port
    assert o.etcd_servers == ["http://a:1", "http://b:2"]
    assert o.shutdown_delay_duration == 90.0
    assert o.v == 4 and o.enable_leader_election is False
    assert o.feature_gates == {"A": True, "B": False}


def test_defaults_are_kcps() -> None:
    o = flags.parse([])
    assert (o.secure_port, o.shard_name, o.shutdown_delay_duration, o.root_directory) == (
        6443,
        "root",
        0.0,
        ".kcp",
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--x"], "unknown flag: --x"),
        (["-q"], "unknown shorthand flag: 'q' in -q"),
        (["--secure-port"], "flag needs an argument: --secure-port"),
        (
            ["--secure-port=abc"],
            'invalid argument "abc" for "--secure-port" flag: strconv.ParseInt: parsing "abc": '
            "invalid syntax",
        ),
        (["--shutdown-delay-duration=5"], 'time: missing unit in duration "5"'),
    ],
)
def test_parse_errors(argv: list[str], message: str) -> None:
    with pytest.raises(flags.FlagError) as e:
        flags.parse(argv)
    assert message in str(e.value)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("0", 0.0), ("5s", 5.0), ("1m30s", 90.0), ("250ms", 0.25), ("1h", 3600.0), ("1.5s", 1.5)],
)
def test_go_durations(text: str, seconds: float) -> None:
    assert flags.parse_duration(text) == pytest.approx(seconds)


def test_validation_wording() -> None:
    o = flags.parse(["--experimental-bind-free-port", "--etcd-servers=http://e:1"])
    assert flags.validate(o, "v0.32.1") == [
        "--secure-port=0 required if --experimental-bind-free-port is set"
    ]
    o = flags.parse(["--shard-name=s", "--etcd-servers=http://e:1"])
    errs = flags.validate(o, "v0.32.1")
    assert "--cache-kubeconfig is required for non-root shards" in errs
    assert "--root-shard-kubeconfig-file is required for non-root shards" in errs
    assert "--root-shard-kubeconfig-file is required for non-root shards" not in flags.validate(o, "v0.33.0")
    assert flags.aggregate(["a", "b"]) == "[a, b]" and flags.aggregate(["a"]) == "a"


def test_batteries() -> None:
    o = flags.parse(["--batteries-included=+user", "--etcd-servers=http://e:1"])
    assert flags.complete_batteries(o) == ["admin", "user", "workspace-types"]
    o = flags.parse(["--batteries-included=user", "--etcd-servers=http://e:1"])
    assert "battery user enabled which requires admin as well" in flags.validate(o, "v0.32.1")
