"""The backup's files on the node: the snapshots in `--dir` (`<UTC timestamp>-<job>.db`, the newest
`--keep` kept), and the store's TLS decoded for etcdctl into private files."""

from __future__ import annotations

import contextlib
import os
import re
from datetime import UTC, datetime
from pathlib import Path

from kcpshard.agent.errors import Failure
from kcpshard.agent.seed import SeedError, decode_secret_data
from kcpshard.agent.store_refs import store_tls

TLS_KEYS = {"ca.crt": "--cacert", "tls.crt": "--cert", "tls.key": "--key"}
# Snapshot files: `<UTC timestamp>-<job>.db`; only these are ever pruned.
SNAPSHOT_NAME = re.compile(r"^(?P<stamp>\d{8}T\d{6}Z)-.+\.db(?P<part>\.part)?$")


class BackupFailed(Failure):
    """A failure with a one-line message a person can act on."""


def snapshot_path(directory: Path, job_name: str, when: datetime | None = None) -> Path:
    stamp = (when or datetime.now(UTC)).strftime("%Y%m%dT%H%M%SZ")
    return directory / f"{stamp}-{job_name}.db"


def prepare_dir(directory: Path) -> None:
    try:
        directory.mkdir(parents=True, exist_ok=True)
        directory.chmod(0o700)
    except OSError as exc:
        raise BackupFailed(f"cannot prepare backup dir {directory}: {exc.strerror or exc}") from None


def prune(directory: Path, keep: int, current: Path) -> list[Path]:
    """Delete all but the newest `keep` snapshots (`current` always stays) and leftover partial files."""
    snapshots: list[tuple[str, int, Path]] = []
    leftovers: list[Path] = []
    for entry in directory.iterdir():
        match = SNAPSHOT_NAME.match(entry.name)
        if match is None or entry == current or not entry.is_file():
            continue
        if match.group("part"):
            leftovers.append(entry)  # a save killed before it finished (one backup runs at a time)
        else:
            snapshots.append((match.group("stamp"), entry.stat().st_mtime_ns, entry))
    snapshots.sort(reverse=True)
    doomed = [entry for _, _, entry in snapshots[keep - 1 :]] + leftovers
    for entry in doomed:
        entry.unlink(missing_ok=True)
    return doomed


def remove_partial(path: Path) -> None:
    for leftover in (path, path.with_name(path.name + ".part")):
        with contextlib.suppress(OSError):
            leftover.unlink(missing_ok=True)


def write_tls_files(directory: Path, data: dict[str, str], secret: str) -> list[str]:
    """Decode the Secret's TLS keys into 0600 files; returns etcdctl's flags. Never echoes the contents."""
    try:
        decoded = decode_secret_data({k: v for k, v in data.items() if k in TLS_KEYS})
    except SeedError as exc:
        raise BackupFailed(f"TLS Secret {secret}: {exc}") from None
    try:
        # The same reading of the Secret as the slot agent's store check (ca.crt, tls.crt with tls.key).
        tls = store_tls(secret, decoded)
    except ValueError as exc:
        raise BackupFailed(f"TLS {exc}") from None
    contents = {"ca.crt": tls.ca, "tls.crt": tls.cert, "tls.key": tls.key}
    flags: list[str] = []
    for key, flag in TLS_KEYS.items():
        content = contents[key]
        if content is None:
            continue
        path = directory / key
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(content)
        except OSError as exc:
            raise BackupFailed(f"cannot write {key} of TLS Secret {secret}: {exc.strerror or exc}") from None
        flags.append(f"{flag}={path}")
    return flags
