"""The processes of a stack namespace's pods on the real node, as containerd knows them: the task of each
running container (its PID 1, from `ctr tasks ls` on the node's containerd) and every process below it.
The pods' containers come from their status (`containerID`), so another test's pods never count."""

from __future__ import annotations

import json
import os
import subprocess
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kcpshard_testkit.stack import Stack


def containerd_socket(stack: Stack) -> Path:
    return stack.directory / "env" / "node" / "containerd" / "containerd.sock"


def _container_ids(stack: Stack) -> set[str]:
    pods = json.loads(stack.kubectl("get", "pods", "-o", "json").stdout)["items"]
    return {
        status["containerID"].removeprefix("containerd://")
        for pod in pods
        for status in (pod.get("status") or {}).get("containerStatuses") or ()
        if status.get("containerID")
    }


def _task_pids(stack: Stack, ids: set[str]) -> set[int]:
    listed = subprocess.run(
        ["ctr", "--address", str(containerd_socket(stack)), "-n", "k8s.io", "tasks", "ls"],
        capture_output=True, text=True, check=True, timeout=30,
    )  # fmt: skip
    pids = set()
    for line in listed.stdout.splitlines()[1:]:  # TASK PID STATUS
        task, pid, status = line.split()[:3]
        if task in ids and status == "RUNNING":
            pids.add(int(pid))
    return pids


def _children() -> dict[int, list[int]]:
    below: dict[int, list[int]] = defaultdict(list)
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        below[int(stat.rsplit(")", 1)[1].split()[1])].append(int(entry))
    return below


def pod_processes(stack: Stack) -> list[int]:
    roots = _task_pids(stack, _container_ids(stack))
    below = _children()
    found, todo = [], list(roots)
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(below.get(pid, ()))
    return sorted(found)
