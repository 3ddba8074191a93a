"""Pod volumes as local folders, and the path-mapping rule that replaces bind mounts.

Imitates ``pkg/volume/{hostpath,emptydir,secret,configmap,projected,downwardapi}`` of the kubelet:
``hostPath`` -> ``sandbox/nodes/<node>/<path>``, ``emptyDir`` -> ``<pod dir>/volumes/<name>``, ``secret``,
``configMap``, ``downwardAPI`` and ``projected`` -> files of their keys (``items``, ``defaultMode`` 0644,
``optional``). Files are written once when the pod starts (no live updates).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kcpshard_testkit.runner.envs import ConfigError, Objects, configmap_data, field_ref, secret_data
from kcpshard_testkit.runner.expand import expand

DEFAULT_MODE = 0o644


@dataclass(frozen=True)
class Mount:
    """A container path (``mountPath``) and the local path it stands for."""

    mount_path: str
    local: Path


def pod_dir_name(pod: Mapping[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace')}_{meta.get('name')}_{str(meta.get('uid') or '')[:8]}"


def host_path(sandbox: Path, node: str, path: str) -> Path:
    return sandbox / "nodes" / node / path.lstrip("/")


def _write_file(base: Path, rel: str, data: bytes, mode: int) -> None:
    target = (base / rel).resolve()
    if not target.is_relative_to(base.resolve()):
        raise ConfigError(f"volume item path {rel!r} escapes the volume")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)
    os.chmod(target, mode)


def _key_files(
    data: Mapping[str, bytes] | None,
    what: str,
    spec: Mapping[str, Any],
    default_mode: int,
) -> dict[str, tuple[bytes, int]]:
    """{relative path: (content, mode)} of a secret/configMap source; {} when optional and missing."""
    optional = bool(spec.get("optional"))
    if data is None:
        if optional:
            return {}
        raise ConfigError(f"{what} not found")
    items = spec.get("items")
    if not items:
        return {key: (value, default_mode) for key, value in data.items()}
    out: dict[str, tuple[bytes, int]] = {}
    for item in items:
        key = str(item.get("key"))
        if key not in data:
            if optional:
                continue
            raise ConfigError(f"couldn't find key {key} in {what}")
        out[str(item.get("path") or key)] = (data[key], int(item.get("mode") or default_mode))
    return out


def _downward_files(
    pod: Mapping[str, Any], spec: Mapping[str, Any], default_mode: int
) -> dict[str, tuple[bytes, int]]:
    out: dict[str, tuple[bytes, int]] = {}
    for item in spec.get("items") or []:
        if "fieldRef" not in item:
            raise ConfigError(f"unsupported downwardAPI item {item.get('path')!r} (only fieldRef)")
        value = field_ref(pod, str(item["fieldRef"].get("fieldPath")))
        out[str(item.get("path"))] = (value.encode(), int(item.get("mode") or default_mode))
    return out


def _source_files(
    pod: Mapping[str, Any],
    source: Mapping[str, Any],
    secrets: Objects,
    configmaps: Objects,
    default_mode: int,
) -> dict[str, tuple[bytes, int]]:
    ns = (pod.get("metadata") or {}).get("namespace")
    if "secret" in source:
        spec = source["secret"]
        name = str(spec.get("secretName") or spec.get("name"))
        obj = secrets.get(name)
        data = secret_data(obj) if obj is not None else None
        return _key_files(data, f"Secret {ns}/{name}", spec, default_mode)
    if "configMap" in source:
        spec = source["configMap"]
        name = str(spec.get("name"))
        obj = configmaps.get(name)
        data = configmap_data(obj) if obj is not None else None
        return _key_files(data, f"ConfigMap {ns}/{name}", spec, default_mode)
    if "downwardAPI" in source:
        return _downward_files(pod, source["downwardAPI"], default_mode)
    raise ConfigError(f"unsupported volume source {sorted(source)}")


def prepare_volumes(
    sandbox: Path, node: str, pod: Mapping[str, Any], pod_dir: Path, secrets: Objects, configmaps: Objects
) -> dict[str, Path]:
    """Create every volume of the pod locally; returns {volume name: local path}."""
    out: dict[str, Path] = {}
    for volume in (pod.get("spec") or {}).get("volumes") or []:
        name = str(volume.get("name"))
        if "hostPath" in volume:
            out[name] = _host_path_volume(sandbox, node, volume["hostPath"])
            continue
        local = pod_dir / "volumes" / name
        local.mkdir(parents=True, exist_ok=True)
        out[name] = local
        if "emptyDir" in volume:
            continue
        if "projected" in volume:
            spec = volume["projected"]
            mode = int(spec.get("defaultMode") or DEFAULT_MODE)
            files: dict[str, tuple[bytes, int]] = {}
            for source in spec.get("sources") or []:
                if "serviceAccountToken" in source:
                    continue  # not projected: the pod's identity comes as KUBECONFIG (kubelet.py)
                files.update(_source_files(pod, source, secrets, configmaps, mode))
        elif any(k in volume for k in ("secret", "configMap", "downwardAPI")):
            spec = next(volume[k] for k in ("secret", "configMap", "downwardAPI") if k in volume)
            files = _source_files(
                pod, volume, secrets, configmaps, int(spec.get("defaultMode") or DEFAULT_MODE)
            )
        else:
            raise ConfigError(f"volume {name!r}: unsupported type {sorted(k for k in volume if k != 'name')}")
        for rel, (data, file_mode) in files.items():
            _write_file(local, rel, data, file_mode)
    return out


def _host_path_volume(sandbox: Path, node: str, spec: Mapping[str, Any]) -> Path:
    local = host_path(sandbox, node, str(spec.get("path") or "/"))
    kind = str(spec.get("type") or "")
    if kind == "DirectoryOrCreate" or (kind == "" and not local.exists()):
        # Type "" does no checks on a kubelet; the container runtime then creates a missing folder.
        local.mkdir(parents=True, exist_ok=True)
    elif kind == "FileOrCreate":
        local.parent.mkdir(parents=True, exist_ok=True)
        local.touch(exist_ok=True)
    elif kind == "Directory" and not local.is_dir():
        raise ConfigError(f"hostPath type check failed: {spec.get('path')} is not a directory")
    elif kind == "File" and not local.is_file():
        raise ConfigError(f"hostPath type check failed: {spec.get('path')} is not a file")
    return local


def container_mounts(
    container: Mapping[str, Any], volumes: Mapping[str, Path], env: Mapping[str, str]
) -> list[Mount]:
    """The container's mounts, longest ``mountPath`` first (so the most specific mount wins)."""
    mounts: list[Mount] = []
    for vm in container.get("volumeMounts") or []:
        name = str(vm.get("name"))
        if name not in volumes:
            raise ConfigError(f"volumeMount {name!r} refers to no volume of the pod")
        local = volumes[name]
        sub = str(vm.get("subPath") or "") or expand(str(vm.get("subPathExpr") or ""), env)
        if sub:
            local = local / sub
            if not local.exists():
                local.mkdir(parents=True, exist_ok=True)
        mount_path = str(vm.get("mountPath") or "").rstrip("/")
        if mount_path:  # a mount on "/" would rewrite every absolute path: ignore it
            mounts.append(Mount(mount_path, local))
    return sorted(mounts, key=lambda m: len(m.mount_path), reverse=True)


def map_path(value: str, mounts: Sequence[Mount]) -> str:
    """Rewrite ``value`` when it is a mountPath or starts with ``mountPath/``."""
    for mount in mounts:
        if value == mount.mount_path:
            return str(mount.local)
        if value.startswith(mount.mount_path + "/"):
            return str(mount.local) + value[len(mount.mount_path) :]
    return value


def map_arg(arg: str, mounts: Sequence[Mount]) -> str:
    """``map_path`` of an argument, or of the value part of a ``-flag=value`` argument."""
    mapped = map_path(arg, mounts)
    if mapped != arg or not arg.startswith("-") or "=" not in arg:
        return mapped
    flag, value = arg.split("=", 1)
    return f"{flag}={map_path(value, mounts)}"
