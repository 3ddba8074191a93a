"""The front's HAProxy containers: `kcpshard agent haproxy-member` runs one HAProxy of a front pod as its
container's own process, so the front agent's death (another container of the pod) stops no listener;
`kcpshard agent haproxy-member-stop` is that container's preStop hook.

The agent writes each member's haproxy.cfg into the pod's shared emptyDir and drives the member through
its runtime socket there (front_members.py). A member container waits for its config, records its pid
and execs HAProxy in its place (`-db`: one foreground process, the container's main one). The kubelet
starts a member that died again, and it reads the config the agent keeps current.

On the pod's deletion the agent holds the front until another pod of it serves (front_hold.py), then
writes `release`. The preStop hook waits for that (at most `--wait-seconds`: an agent that is dead
cannot write it), then asks HAProxy for its soft stop (SIGUSR1: stop listening, let open connections
finish) and waits for its exit, so the kubelet's SIGTERM (HAProxy's hard stop) finds nothing to cut.

Stdlib only: a container restart should cost HAProxy's start, not an import of the operator.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path

# Written by the front agent into the members' folder once the pod may stop serving.
RELEASE_FILE = "release"
POLL_SECONDS = 0.1


def member_dir(members_dir: Path, index: int) -> Path:
    """One member's folder: its haproxy.cfg, runtime socket and pid file."""
    return Path(members_dir) / f"haproxy-{index}"


def config_path(members_dir: Path, index: int) -> Path:
    return member_dir(members_dir, index) / "haproxy.cfg"


def pid_path(members_dir: Path, index: int) -> Path:
    return member_dir(members_dir, index) / "pid"


def release_path(members_dir: Path) -> Path:
    return Path(members_dir) / RELEASE_FILE


def _parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=f"kcpshard agent {prog}")
    parser.add_argument("--dir", type=Path, required=True, help="the members' folder shared with the agent")
    parser.add_argument("--member", type=int, required=True, choices=(0, 1), help="which HAProxy of the pod")
    return parser


def _say(prog: str, message: str) -> None:
    print(f"kcpshard agent {prog}: {message}", file=sys.stderr, flush=True)


def run_member(argv: Sequence[str]) -> int:
    """Entry of `kcpshard agent haproxy-member`: wait for the config, then become HAProxy."""
    parser = _parser("haproxy-member")
    parser.add_argument("--haproxy", default="haproxy", help="haproxy executable (default: on PATH)")
    args = parser.parse_args(list(argv))
    binary = shutil.which(args.haproxy) or shutil.which(args.haproxy, path="/usr/sbin:/usr/local/sbin")
    if binary is None:
        _say("haproxy-member", f"haproxy not found ({args.haproxy}): install the Debian package haproxy")
        return 1
    config = config_path(args.dir, args.member)
    # Stopped before the agent wrote anything (a pod deleted at once): nothing to serve, a clean exit.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    if not config.exists():
        _say("haproxy-member", f"waiting for the front agent to write {config}")
        while not config.exists():
            time.sleep(POLL_SECONDS)
    pid_path(args.dir, args.member).write_text(f"{os.getpid()}\n")
    os.execv(binary, [binary, "-db", "-f", str(config)])


def _is_haproxy(pid: int) -> bool:
    """A live HAProxy has this pid (not a zombie waiting for its parent, not another program)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    name, _, rest = stat.partition("(")[2].rpartition(")")
    return name == "haproxy" and rest.split()[0] != "Z"


def run_member_stop(argv: Sequence[str]) -> int:
    """Entry of `kcpshard agent haproxy-member-stop` (the member's preStop hook): always exits 0, what it
    could not do is said on stderr (the kubelet shows a failing hook only as an Event)."""
    parser = _parser("haproxy-member-stop")
    parser.add_argument("--wait-seconds", type=float, default=30.0, help="longest wait for the agent")
    parser.add_argument("--grace", type=float, default=7.0, help="longest wait for open connections")
    args = parser.parse_args(list(argv))
    release = release_path(args.dir)
    deadline = time.monotonic() + args.wait_seconds
    while not release.exists() and time.monotonic() < deadline:
        time.sleep(POLL_SECONDS)
    if not release.exists():
        _say("haproxy-member-stop", f"the front agent did not release the front in {args.wait_seconds:.0f}s")
    try:
        pid = int(pid_path(args.dir, args.member).read_text())
    except (OSError, ValueError):
        _say("haproxy-member-stop", "no pid of haproxy recorded: nothing to stop")
        return 0
    if not _is_haproxy(pid):
        return 0  # already gone (or the pid is another process's now)
    os.kill(pid, signal.SIGUSR1)
    deadline = time.monotonic() + args.grace
    while _is_haproxy(pid) and time.monotonic() < deadline:
        time.sleep(POLL_SECONDS)
    return 0
