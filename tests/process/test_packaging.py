"""The product's wheel holds the product only: the operator, the agents and the plugin, no file of the test
kit (`testkit/`), which is a package of its own."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_product_wheel_holds_no_test_kit(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), "."],
        cwd=REPO,
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("kcpshard-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    packages = {name.split("/")[1] for name in names if name.startswith("kcpshard/") and name.count("/") > 1}
    assert {"agent", "controller", "plugin", "roll"} <= packages
    assert [n for n in names if "testkit" in n or "testing" in n or "fakekcp" in n] == []
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    scripts = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert "kcpshard = kcpshard.cli:main" in scripts
    assert "fake" not in scripts and "dev" not in scripts
