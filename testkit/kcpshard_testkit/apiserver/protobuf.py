"""Decoding of the few protobuf request bodies kubectl's typed clients send for simple kinds.

kubectl v1.3x writes built-in kinds through client-go typed clients, which encode requests as
`application/vnd.kubernetes.protobuf` (`kubectl create namespace|secret|configmap|serviceaccount`).
The envelope is k8s.io/apimachinery/pkg/runtime/serializer/protobuf (magic `k8s\\0` + runtime.Unknown);
field numbers come from k8s.io/api/core/v1/generated.proto and
k8s.io/apimachinery/pkg/apis/meta/v1/generated.proto. Other kinds are refused with 415.
"""

from __future__ import annotations

import base64
import datetime
from collections.abc import Callable, Iterator
from typing import Any

from .errors import ApiError

MAGIC = b"k8s\x00"
PROTOBUF = "application/vnd.kubernetes.protobuf"


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def _fields(buf: bytes) -> Iterator[tuple[int, int | bytes]]:
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(buf, pos)
            yield number, value
        elif wire == 2:
            length, pos = _varint(buf, pos)
            yield number, buf[pos : pos + length]
            pos += length
        elif wire == 1:
            yield number, buf[pos : pos + 8]
            pos += 8
        elif wire == 5:
            yield number, buf[pos : pos + 4]
            pos += 4
        else:
            raise ValueError(f"unsupported wire type {wire}")


def _text(value: int | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _entry(value: int | bytes) -> tuple[str, bytes]:
    fields = dict(_fields(value if isinstance(value, bytes) else b""))
    key, val = fields.get(1, b""), fields.get(2, b"")
    return _text(key), val if isinstance(val, bytes) else b""


def _time(value: int | bytes) -> str:
    fields = dict(_fields(value if isinstance(value, bytes) else b""))
    seconds = fields.get(1, 0)
    moment = datetime.datetime.fromtimestamp(seconds if isinstance(seconds, int) else 0, datetime.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _owner_ref(buf: bytes) -> dict[str, Any]:
    names = {1: "kind", 3: "name", 4: "uid", 5: "apiVersion"}
    ref: dict[str, Any] = {}
    for number, value in _fields(buf):
        if number in names:
            ref[names[number]] = _text(value)
        elif number == 6:
            ref["controller"] = bool(value)
        elif number == 7:
            ref["blockOwnerDeletion"] = bool(value)
    return ref


def _object_meta(buf: bytes) -> dict[str, Any]:
    strings = {1: "name", 2: "generateName", 3: "namespace", 5: "uid", 6: "resourceVersion"}
    meta: dict[str, Any] = {}
    for number, value in _fields(buf):
        if number in strings:
            meta[strings[number]] = _text(value)
        elif number in (11, 12):
            key, val = _entry(value)
            meta.setdefault("labels" if number == 11 else "annotations", {})[key] = val.decode()
        elif number == 13 and isinstance(value, bytes):
            meta.setdefault("ownerReferences", []).append(_owner_ref(value))
        elif number == 14:
            meta.setdefault("finalizers", []).append(_text(value))
        elif number == 8:
            meta["creationTimestamp"] = _time(value)
    return meta


def _secret(buf: bytes) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    for number, value in _fields(buf):
        if number == 2:
            key, val = _entry(value)
            obj.setdefault("data", {})[key] = base64.b64encode(val).decode()
        elif number == 3:
            obj["type"] = _text(value)
        elif number == 4:
            key, val = _entry(value)
            obj.setdefault("stringData", {})[key] = val.decode()
        elif number == 5:
            obj["immutable"] = bool(value)
    return obj


def _configmap(buf: bytes) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    for number, value in _fields(buf):
        if number in (2, 3):
            key, val = _entry(value)
            if number == 2:
                obj.setdefault("data", {})[key] = val.decode()
            else:
                obj.setdefault("binaryData", {})[key] = base64.b64encode(val).decode()
        elif number == 4:
            obj["immutable"] = bool(value)
    return obj


def _service_account(buf: bytes) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    for number, value in _fields(buf):
        if number == 4:
            obj["automountServiceAccountToken"] = bool(value)
    return obj


def _namespace(buf: bytes) -> dict[str, Any]:
    return {}


_DECODERS: dict[str, Callable[[bytes], dict[str, Any]]] = {
    "Secret": _secret,
    "ConfigMap": _configmap,
    "Namespace": _namespace,
    "ServiceAccount": _service_account,
}


def decode(raw: bytes) -> dict[str, Any]:
    """A JSON-like object from a protobuf body; 415 for kinds this emulator cannot read."""
    refused = ApiError(
        415,
        "UnsupportedMediaType",
        f"the body of the request was in an unknown format - accepted "
        f"media types include: application/json, application/yaml (protobuf only for "
        f"{', '.join(sorted(_DECODERS))} in this emulator)",
    )
    if not raw.startswith(MAGIC):
        raise refused
    api_version = kind = ""
    payload = b""
    for number, value in _fields(raw[len(MAGIC) :]):
        if number == 1 and isinstance(value, bytes):
            type_meta = dict(_fields(value))
            api_version, kind = _text(type_meta.get(1, b"")), _text(type_meta.get(2, b""))
        elif number == 2 and isinstance(value, bytes):
            payload = value
    decoder = _DECODERS.get(kind)
    if decoder is None or api_version != "v1":
        raise refused
    obj: dict[str, Any] = {"apiVersion": api_version, "kind": kind, "metadata": {}}
    for number, value in _fields(payload):
        if number == 1 and isinstance(value, bytes):
            obj["metadata"] = _object_meta(value)
    obj.update(decoder(payload))
    return obj
