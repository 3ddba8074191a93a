"""Flux's view of a KcpShard, computed by kstatus itself (sigs.k8s.io/cli-utils pkg/kstatus/status, the
library behind Flux's healthChecks and `wait`), over the objects recorded from real rolls that the
Argo CD health check is tested on.

`hack/tools/kstatus` is a tiny Go program around `status.Compute`; `make tools` builds it into
hack/tools/bin (git-ignored) with the other real parts.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SOURCE = REPO / "hack" / "tools" / "kstatus"
BIN_DIR = REPO / "hack" / "tools" / "bin"
BINARY = BIN_DIR / "kstatus"
TESTDATA = REPO / "deploy" / "argocd" / "resource_customizations" / "kcpshard.dev" / "KcpShard" / "testdata"


@pytest.fixture(scope="module")
def kstatus() -> Path:
    if not BINARY.exists():
        pytest.fail(f"{BINARY} is missing: run `make tools` (hack/tools/build.sh builds it with Go)")
    return BINARY


def _computed(kstatus: Path) -> dict[str, dict[str, str]]:
    files = sorted(TESTDATA.glob("*.yaml"))
    done = subprocess.run([str(kstatus), *map(str, files)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    results = [json.loads(line) for line in done.stdout.splitlines()]
    return {Path(r["file"]).stem: r for r in results}


def test_kstatus_reads_the_recorded_shards_as_flux_should(kstatus: Path) -> None:
    got = {name: r["status"] for name, r in _computed(kstatus).items()}
    assert got == {
        "progressing_rolling": "InProgress",  # Reconciling=True, and observedGeneration lags during a roll
        "healthy_ready": "Current",
        "degraded_readyTimeout": "Failed",  # Stalled=True
        "degraded_slotExited": "Failed",
        "progressing_staleGeneration": "InProgress",  # observedGeneration != generation
        "progressing_stalledOlderGeneration": "InProgress",  # a Stalled of an older spec is no verdict
        "progressing_firstSight": "InProgress",  # Ready=Unknown
        "suspended_waitingForPromotion": "InProgress",  # kstatus has no Suspended: Flux keeps waiting
        # kstatus' own rule: no observedGeneration and no conditions is Current. A KcpShard the operator
        # has not seen yet (or with no operator running) passes a Flux health check. Said in the README.
        "progressing_noStatus": "Current",
    }


def test_kstatus_messages_name_the_cause(kstatus: Path) -> None:
    results = _computed(kstatus)
    assert "was not ready within 6s" in results["degraded_readyTimeout"]["message"]
    assert results["progressing_staleGeneration"]["message"] == (
        "KcpShard generation is 2, but latest observed generation is 1"
    )


def test_kstatus_refuses_what_it_cannot_read(kstatus: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: [unclosed\n")
    done = subprocess.run([str(kstatus), str(bad)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and str(bad) in done.stderr
    assert subprocess.run([str(kstatus)], capture_output=True, timeout=60).returncode == 2
