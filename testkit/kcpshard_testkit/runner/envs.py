"""Container environment from a pod spec, as ``kubelet_pods.go`` ``makeEnvironmentVariables`` builds it.

``envFrom`` first (prefix, invalid keys skipped), then ``env`` in order: a literal ``value`` is
``$(VAR)`` expanded against the variables defined so far (and the runner's service env), ``valueFrom``
is resolved (``fieldRef``, ``secretKeyRef``, ``configMapKeyRef``) and not expanded. A missing
Secret/ConfigMap or key that is not ``optional`` is a ``ConfigError``: the kubelet reports it as
``CreateContainerConfigError`` and retries.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping
from typing import Any

from kcpshard_testkit.runner.expand import expand

POD_IP = "127.0.0.1"
_ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
_SUBSCRIPT = re.compile(r"^metadata\.(labels|annotations)\['([^']*)'\]$")

# name -> object (None when it does not exist)
Objects = Mapping[str, Mapping[str, Any] | None]


class ConfigError(Exception):
    """The container cannot be configured yet (kubelet: CreateContainerConfigError)."""


def secret_data(secret: Mapping[str, Any]) -> dict[str, bytes]:
    """Decoded ``data`` with ``stringData`` on top (the API server merges it on write; be lenient)."""
    out = {k: base64.b64decode(v or "") for k, v in (secret.get("data") or {}).items()}
    out.update({k: str(v).encode() for k, v in (secret.get("stringData") or {}).items()})
    return out


def configmap_data(cm: Mapping[str, Any]) -> dict[str, bytes]:
    out = {k: str(v).encode() for k, v in (cm.get("data") or {}).items()}
    out.update({k: base64.b64decode(v or "") for k, v in (cm.get("binaryData") or {}).items()})
    return out


def field_ref(pod: Mapping[str, Any], path: str) -> str:
    """The downward API value of ``path`` (``pkg/fieldpath/fieldpath.go`` ExtractFieldPathAsString)."""
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    simple = {
        "metadata.name": meta.get("name"),
        "metadata.namespace": meta.get("namespace"),
        "metadata.uid": meta.get("uid"),
        "spec.nodeName": spec.get("nodeName"),
        "spec.serviceAccountName": spec.get("serviceAccountName") or "default",
        "status.podIP": POD_IP,
        "status.hostIP": POD_IP,
        "status.podIPs": POD_IP,
        "status.hostIPs": POD_IP,
    }
    if path in simple:
        return str(simple[path] or "")
    match = _SUBSCRIPT.match(path)
    if match:
        return str((meta.get(match.group(1)) or {}).get(match.group(2), ""))
    if path in ("metadata.labels", "metadata.annotations"):
        items = meta.get(path.split(".")[1]) or {}
        return "\n".join(f'{k}="{v}"' for k, v in sorted(items.items()))
    raise ConfigError(f"unsupported fieldRef fieldPath {path!r}")


def _key_ref(kind: str, ref: Mapping[str, Any], objects: Objects) -> str | None:
    name, key, optional = str(ref.get("name") or ""), str(ref.get("key") or ""), bool(ref.get("optional"))
    obj = objects.get(name)
    if obj is None:
        if optional:
            return None
        raise ConfigError(f'{kind} "{name}" not found')
    data = secret_data(obj) if kind == "secret" else configmap_data(obj)
    if key not in data:
        if optional:
            return None
        raise ConfigError(f"couldn't find key {key} in {kind.capitalize()} {_ns(obj)}/{name}")
    return data[key].decode(errors="replace")


def _ns(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("namespace") or "")


def build_env(
    container: Mapping[str, Any],
    pod: Mapping[str, Any],
    secrets: Objects,
    configmaps: Objects,
    service_env: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The container's own variables (not the base env) in kubelet order."""
    service_env = service_env or {}
    env: dict[str, str] = {}
    for source in container.get("envFrom") or []:
        prefix = str(source.get("prefix") or "")
        if "secretRef" in source:
            kind, ref, objects = "secret", source["secretRef"], secrets
        elif "configMapRef" in source:
            kind, ref, objects = "configmap", source["configMapRef"], configmaps
        else:
            continue
        obj = objects.get(str(ref.get("name") or ""))
        if obj is None:
            if ref.get("optional"):
                continue
            raise ConfigError(f'{kind} "{ref.get("name")}" not found')
        data = secret_data(obj) if kind == "secret" else configmap_data(obj)
        for key, value in data.items():
            if _ENV_NAME.match(prefix + key):  # the kubelet skips invalid names (with an event)
                env[prefix + key] = value.decode(errors="replace")
    for var in container.get("env") or []:
        name = str(var.get("name"))
        value_from = var.get("valueFrom")
        if not value_from:
            env[name] = expand(str(var.get("value") or ""), env, service_env)
            continue
        if "fieldRef" in value_from:
            env[name] = field_ref(pod, str(value_from["fieldRef"].get("fieldPath")))
        elif "secretKeyRef" in value_from:
            resolved = _key_ref("secret", value_from["secretKeyRef"], secrets)
            if resolved is not None:
                env[name] = resolved
        elif "configMapKeyRef" in value_from:
            resolved = _key_ref("configmap", value_from["configMapKeyRef"], configmaps)
            if resolved is not None:
                env[name] = resolved
        else:
            raise ConfigError(f"unsupported valueFrom for env {name}: {sorted(value_from)}")
    return env


def referenced_names(pod: Mapping[str, Any]) -> tuple[set[str], set[str]]:
    """(secret names, configmap names) the pod's env and volumes refer to, so the runner can fetch them."""
    secrets: set[str] = set()
    configmaps: set[str] = set()
    spec = pod.get("spec") or {}
    for container in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        for source in container.get("envFrom") or []:
            if "secretRef" in source:
                secrets.add(str(source["secretRef"].get("name")))
            if "configMapRef" in source:
                configmaps.add(str(source["configMapRef"].get("name")))
        for var in container.get("env") or []:
            value_from = var.get("valueFrom") or {}
            if "secretKeyRef" in value_from:
                secrets.add(str(value_from["secretKeyRef"].get("name")))
            if "configMapKeyRef" in value_from:
                configmaps.add(str(value_from["configMapKeyRef"].get("name")))
    for volume in spec.get("volumes") or []:
        if "secret" in volume:
            secrets.add(str(volume["secret"].get("secretName")))
        if "configMap" in volume:
            configmaps.add(str(volume["configMap"].get("name")))
        for source in (volume.get("projected") or {}).get("sources") or []:
            if "secret" in source:
                secrets.add(str(source["secret"].get("name")))
            if "configMap" in source:
                configmaps.add(str(source["configMap"].get("name")))
    return secrets, configmaps
