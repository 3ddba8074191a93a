"""Root material of a slot: the five files every slot of a shard shares, and the Secret that carries them.

kcp writes these into its root directory on a fresh start (`pkg/server/options`, `pkg/server/config.go`:
the self-signed serving cert and CA in `apiserver.crt`, `apiserver.key`, the service-account key `sa.key`,
and `pkg/server/options/adminauthentication.go`: `.admin-token-store` with the SHA-256 of the shard-admin
token and `admin.kubeconfig`). Every later slot must start from the same five files, or clients of the front
would see another CA and the shard-admin token would stop working.

A slot root also gets, before kcp starts, the kubeconfigs of a non-root shard (`--cache-kubeconfig`,
`--root-shard-kubeconfig-file`), copied from Secrets; and gives back, once kcp is ready, the kcp-admin
kubeconfig of this kcp process (`admin_secret`).

Pure file and dict work; the slot agent (`slot_material.py`) does the API calls. Never log file contents.
"""

from __future__ import annotations

import base64
import binascii
import enum
import hashlib
import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from kcpshard.k8s.owners import owner_reference

# Secret keys are the file names: `.admin-token-store` is a valid key (`[-._a-zA-Z0-9]+`).
ROOT_FILES = ("apiserver.crt", "apiserver.key", "sa.key", ".admin-token-store", "admin.kubeconfig")
SHARD_ADMIN_USER = "shard-admin"
# The file names the Job's kcp flags point at (k8s/builders.py, `slot_job`).
CACHE_KUBECONFIG = "cache.kubeconfig"
ROOT_SHARD_KUBECONFIG = "root-shard.kubeconfig"
ADMIN_SECRET_KEY = "kubeconfig"


class SeedError(Exception):
    """The root directory cannot be prepared (message names paths, never contents)."""


class SeedKind(enum.StrEnum):
    """What the Secret allows; the values are the `Seeded` condition reasons."""

    SEEDED = "Seeded"  # all five present: copy them before kcp starts
    FRESH_START = "FreshStart"  # none present: first slot of a new shard, kcp generates them
    INCOMPLETE = "IncompleteMaterial"  # some present: refuse; half-seeded kcp fails or diverges
    SECRET_NOT_FOUND = "SecretNotFound"


@dataclass(frozen=True)
class SeedPlan:
    kind: SeedKind
    files: dict[str, bytes] = field(default_factory=dict, repr=False)
    missing: tuple[str, ...] = ()


def decode_secret_data(data: Mapping[str, Any] | None) -> dict[str, bytes]:
    """The Secret's `data` (base64) as bytes; keys with an empty value count as absent."""
    result: dict[str, bytes] = {}
    for key, value in (data or {}).items():
        if not value:
            continue
        try:
            result[key] = base64.b64decode(str(value), validate=True)
        except (binascii.Error, ValueError):
            raise SeedError(f"Secret key {key} is not valid base64") from None
    return result


def plan_seed(secret: Mapping[str, Any] | None) -> SeedPlan:
    """Decide from the Secret object (None when it does not exist) how to seed the slot."""
    if secret is None:
        return SeedPlan(SeedKind.SECRET_NOT_FOUND, missing=ROOT_FILES)
    data = decode_secret_data(secret.get("data"))
    present = {name: data[name] for name in ROOT_FILES if data.get(name)}
    missing = tuple(name for name in ROOT_FILES if name not in present)
    if not present:
        return SeedPlan(SeedKind.FRESH_START, missing=missing)
    if missing:
        return SeedPlan(SeedKind.INCOMPLETE, missing=missing)
    return SeedPlan(SeedKind.SEEDED, files=present)


def _check_root(root: Path) -> Path:
    resolved = root.resolve()
    # The wipe is recursive: refuse paths where a typo in the Job would destroy a host.
    if resolved == Path(resolved.anchor) or resolved == Path.home().resolve() or len(resolved.parts) < 3:
        raise SeedError(f"refusing to use {resolved} as a slot root directory")
    return resolved


def wipe_root(root: Path) -> None:
    """Empty the slot root (keeping the directory itself), creating it with mode 0700.

    The root is a host path that outlives the Job: files left by an earlier run (another start of this
    slot, a fresh start that lost the upload race, an older revision) would make kcp reuse keys that differ
    from the shard's Secret, or trip kcp's refusal of `.admin-token-store` without `admin.kubeconfig`.
    Each start therefore begins from an empty directory plus exactly what the Secret holds.
    """
    root = _check_root(root)
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    for entry in root.iterdir():
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
    root.chmod(0o700)


def write_private_file(root: Path, name: str, content: bytes) -> None:
    """Write `root/name` mode 0600 from creation (no window where it is world-readable); a folder in
    `name` is made 0700."""
    path = _check_root(root) / name
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(content)
    os.chmod(path, 0o600)  # O_CREAT's mode is masked by umask; an existing file keeps its own


def write_material(root: Path, files: Mapping[str, bytes]) -> None:
    """Write the five files, each mode 0600."""
    for name in ROOT_FILES:
        write_private_file(root, name, files[name])


def secret_value(secret: Mapping[str, Any], key: str) -> bytes | None:
    """One key of a Secret's `data`, decoded; None when absent or empty. SeedError on bad base64."""
    value = (secret.get("data") or {}).get(key)
    return decode_secret_data({key: value}).get(key) if value else None


def shard_admin_token(kubeconfig: bytes) -> str | None:
    """The persistent shard-admin token from kcp's `admin.kubeconfig`, or None."""
    try:
        config = yaml.safe_load(kubeconfig)
    except yaml.YAMLError:
        return None
    if not isinstance(config, dict):
        return None
    for user in config.get("users") or []:
        if isinstance(user, dict) and user.get("name") == SHARD_ADMIN_USER:
            token = (user.get("user") or {}).get("token")
            return str(token) if token else None
    return None


def material_problems(files: Mapping[str, bytes]) -> list[str]:
    """Why these files are not (yet) a complete, consistent set; empty when they are.

    Used while kcp is still writing them on a fresh start: a half-written kubeconfig or certificate shows
    up here, and the token store must hash the kubeconfig's shard-admin token.
    """
    problems = [f"{name} missing or empty" for name in ROOT_FILES if not files.get(name)]
    if problems:
        return problems
    if b"-----END CERTIFICATE-----" not in files["apiserver.crt"]:
        problems.append("apiserver.crt has no complete certificate")
    for key in ("apiserver.key", "sa.key"):
        if b"-----END " not in files[key]:
            problems.append(f"{key} has no complete PEM block")
    token = shard_admin_token(files["admin.kubeconfig"])
    if token is None:
        problems.append("admin.kubeconfig has no shard-admin token")
    elif hashlib.sha256(token.encode()).digest() != files[".admin-token-store"]:
        problems.append(".admin-token-store does not match the shard-admin token")
    return problems


def read_material(root: Path) -> dict[str, bytes]:
    """The five files as far as they exist now (missing ones are left out)."""
    files: dict[str, bytes] = {}
    for name in ROOT_FILES:
        try:
            files[name] = (root / name).read_bytes()
        except FileNotFoundError:
            continue
    return files


def secret_with_material(secret: Mapping[str, Any], files: Mapping[str, bytes]) -> dict[str, Any]:
    """A copy of the Secret (resourceVersion kept, for the guarded PUT) with the five files added."""
    body = {key: value for key, value in secret.items() if key != "stringData"}
    data = dict(secret.get("data") or {})
    for name in ROOT_FILES:
        data[name] = base64.b64encode(files[name]).decode()
    body["data"] = data
    return body


def last_certificate(bundle: bytes) -> str:
    """The last PEM certificate of `apiserver.crt` (serving cert followed by its CA): the CA to trust."""
    end = "-----END CERTIFICATE-----"
    text = bundle.decode("ascii", errors="replace")
    stop = text.rfind(end)
    start = text.rfind("-----BEGIN CERTIFICATE-----", 0, stop if stop >= 0 else None)
    if stop < 0 or start < 0:
        raise SeedError("apiserver.crt holds no PEM certificate")
    return text[start : stop + len(end)] + "\n"


def admin_secret(name: str, namespace: str, kubeconfig: str, owner: dict[str, Any]) -> dict[str, Any]:
    """The Secret publishing a slot's kcp-admin kubeconfig, owned by the KcpSlot `owner`.

    The owner reference only ties the Secret's life to the slot (the garbage collector deletes it with the
    slot); it is not a controller reference, as no controller reconciles this Secret.
    """
    ref = owner_reference(owner, controller=False)
    # Setting blockOwnerDeletion needs `update` on kcpslots/finalizers (OwnerReferencesPermissionEnforcement
    # admission); the agent's role has no such right, and nothing waits on this Secret's deletion.
    del ref["blockOwnerDeletion"]
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {"name": name, "namespace": namespace, "ownerReferences": [ref]},
        "data": {ADMIN_SECRET_KEY: base64.b64encode(kubeconfig.encode()).decode()},
    }
