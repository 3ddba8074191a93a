"""The one entry of the agents (kcpshard.agent.cli.main): a usage error, a kubeconfig that cannot be read
and a failure the agent names all end with one line and exit code 1, for every agent alike."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from kcpshard.agent import backup, cli, front, slot
from kcpshard.agent.errors import Failure, UsageError

SLOT = ["--namespace", "n", "--slot", "s", "--secret", "x", "--root-dir", "/r"]  # and no `-- kcp ...`
BACKUP = ["--namespace", "n", "--job-name", "j", "--endpoint", "e", "--dir", "/d", "--keep", "0"]


@pytest.mark.parametrize(
    ("run", "argv", "line"),
    [
        (front.run, ["--shard", "s", "--report-interval", "0"], "kcpshard agent front: --report-interval"),
        (slot.run, SLOT, "kcpshard agent slot: the kcp command line must follow `--`"),
        (backup.run, BACKUP, "kcpshard agent backup: --keep"),
    ],
    ids=["front", "slot", "backup"],
)
def test_a_usage_error_is_one_line_and_exit_code_1(
    run: object, argv: list[str], line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert callable(run)
    assert run(argv) == 1
    assert capsys.readouterr().err.startswith(line)


def test_a_kubeconfig_that_cannot_be_read_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nope"
    assert front.run(["--shard", "s", "--kubeconfig", str(missing)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("kcpshard agent front: ") and str(missing) in err and "Traceback" not in err


@dataclass(frozen=True)
class Opts:
    kubeconfig: str | None = None


class FakeApi:
    closed = False

    async def aclose(self) -> None:
        FakeApi.closed = True


def test_a_failure_the_agent_names_is_one_line_and_the_client_is_closed(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(cli.ApiClient, "from_kubeconfig", classmethod(lambda cls, path: FakeApi()))

    def parse(argv: Sequence[str]) -> Opts:
        if argv:
            raise UsageError("no arguments, please")
        return Opts()

    async def work(opts: Opts, api: object) -> int:
        raise Failure("KcpShard default/root has an invalid spec.front: port: too big")

    assert cli.main("front", [], parse, work) == 1
    assert capsys.readouterr().err == (
        "kcpshard agent front: KcpShard default/root has an invalid spec.front: port: too big\n"
    )
    assert FakeApi.closed
