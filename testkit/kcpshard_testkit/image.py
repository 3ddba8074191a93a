"""The product image or the test image, built (or found in the cache) by hack/image.sh with no image registry.

The result names the docker-archive tar that a cluster set-up imports into a node's containerd
(`ctr -n k8s.io images import <tar>`), the image's name in it, and buildah's storage, where the image can be
run without a cluster (`buildah --root <root> --runroot <runroot> --storage-driver vfs from <local_name>`).
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

REPO = Path(__file__).resolve().parents[2]


class ImageBuildError(RuntimeError):
    """hack/image.sh failed; the message ends with its line naming the failed step and its log."""


@dataclass(frozen=True)
class ImageRef:
    name: str  # kcpshard:<key> or kcpshard-test:<key>, as a pod names it and as the tar holds it
    tar: Path
    root: Path  # buildah's storage that holds the image
    runroot: Path

    @property
    def local_name(self) -> str:
        """The name in buildah's storage."""
        return f"localhost/{self.name}"

    def buildah(self, *args: str) -> list[str]:
        """A buildah command line on the storage that holds this image."""
        storage = ["--root", str(self.root), "--runroot", str(self.runroot), "--storage-driver", "vfs"]
        return ["buildah", *storage, *args]


def build_image(
    kind: Literal["product", "test"] = "product", *, repo: Path = REPO, timeout: float = 1800
) -> ImageRef:
    """Builds the image (minutes the first time; well under a second once its tar is cached)."""
    script = repo / "hack" / "image.sh"
    if not script.exists():
        raise ImageBuildError(f"{script} not found: pass repo= the project's checkout")
    # a session of its own: on a timeout (ours or the caller's) buildah and its children go too
    proc = subprocess.Popen(
        ["bash", str(script), kind],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except BaseException:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.communicate()
        raise
    if proc.returncode != 0:
        raise ImageBuildError(f"hack/image.sh {kind} exited {proc.returncode}:\n{err[-3000:]}")
    fields = dict(word.split("=", 1) for word in shlex.split(out.splitlines()[-1]))
    return ImageRef(fields["image"], Path(fields["tar"]), Path(fields["root"]), Path(fields["runroot"]))
