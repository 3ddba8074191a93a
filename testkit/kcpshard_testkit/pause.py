"""Container images without a registry: the sandbox (pause) image made here, and docker-archive tars.

No image registry is reachable from the project's machines, so the node's containerd gets every image by
`ctr images import`. The sandbox image every pod needs (`registry.k8s.io/pause`) is a static C program
that waits for signals and reaps its children, as Kubernetes' own `build/pause/linux/pause.c` does,
compiled here once (Debian's gcc with glibc's static libc) and packed as a one-layer docker-archive.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import tarfile
from pathlib import Path

PAUSE_IMAGE = "registry.k8s.io/pause:3.10"

PAUSE_C = r"""
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
/* PID 1 of a pod's sandbox: reap orphans, exit on SIGINT/SIGTERM. */
static void reap(int sig) { (void)sig; while (waitpid(-1, 0, WNOHANG) > 0) {} }
static void leave(int sig) { (void)sig; _exit(0); }
int main(void) {
  signal(SIGCHLD, reap);
  signal(SIGINT, leave);
  signal(SIGTERM, leave);
  for (;;) pause();
}
"""


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(os.environ.get("KCPSHARD_NODE_CACHE") or Path(base) / "kcpshard" / "node")


def _tar_bytes(members: dict[str, tuple[bytes, int]]) -> bytes:
    """An uncompressed tar of `{name: (content, mode)}`, owned by root, dated 0 (the same bytes each time)."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name, (content, mode) in members.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(content), mode, 0
            tar.addfile(info, io.BytesIO(content))
    return out.getvalue()


def docker_archive(tag: str, files: dict[str, tuple[bytes, int]], entrypoint: list[str]) -> bytes:
    """A docker-archive (`docker save` layout: manifest.json, a config, one layer) of `files`."""
    layer = _tar_bytes(files)
    diff_id = "sha256:" + hashlib.sha256(layer).hexdigest()
    config = json.dumps(
        {
            "architecture": "amd64",
            "os": "linux",
            "config": {"Entrypoint": entrypoint, "User": "65535:65535"},
            "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        },
        sort_keys=True,
    ).encode()
    config_name = hashlib.sha256(config).hexdigest() + ".json"
    manifest = json.dumps([{"Config": config_name, "RepoTags": [tag], "Layers": ["layer.tar"]}]).encode()
    return _tar_bytes(
        {"manifest.json": (manifest, 0o644), config_name: (config, 0o644), "layer.tar": (layer, 0o644)}
    )


def pause_image() -> Path:
    """The sandbox image's tar, built once per source (cached)."""
    key = hashlib.sha256(PAUSE_C.encode() + PAUSE_IMAGE.encode()).hexdigest()[:16]
    target = cache_dir() / f"pause-{key}.tar"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    source, binary = target.with_suffix(".c"), target.with_suffix(".bin")
    source.write_text(PAUSE_C)
    result = subprocess.run(
        ["gcc", "-static", "-Os", "-s", "-o", str(binary), str(source)], capture_output=True, text=True
    )
    if result.returncode != 0:
        raise RuntimeError(f"the pause image: gcc -static failed (Debian: gcc, libc6-dev): {result.stderr}")
    tar = docker_archive(PAUSE_IMAGE, {"pause": (binary.read_bytes(), 0o755)}, ["/pause"])
    partial = target.with_suffix(".partial")
    partial.write_bytes(tar)
    partial.rename(target)
    return target
