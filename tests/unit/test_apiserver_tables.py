"""JSONPath evaluation and Table rendering of the emulated API server."""

import datetime

import pytest

from kcpshard_testkit.apiserver import jsonpath, tables
from kcpshard_testkit.apiserver.registry import builtin_types, types_from_crd

OBJ = {
    "metadata": {"name": "demo", "creationTimestamp": "2020-01-01T00:00:00Z"},
    "spec": {"size": 3, "items": [{"n": "a"}, {"n": "b"}], "dotted.key": "v"},
    "status": {
        "conditions": [
            {"type": "Progressing", "status": "False"},
            {"type": "Ready", "status": "True", "message": "all good"},
        ]
    },
}


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        (".spec.size", [3]),
        ("{.spec.size}", [3]),
        (".spec.items[1].n", ["b"]),
        (".spec.items[-1].n", ["b"]),
        (".spec.items[*].n", ["a", "b"]),
        (".spec['dotted.key']", ["v"]),
        ('.status.conditions[?(@.type=="Ready")].status', ["True"]),
        (".status.conditions[?(@.type=='Ready')].message", ["all good"]),
        ('.status.conditions[?(@.type!="Ready")].type', ["Progressing"]),
        ('.status.conditions[?(@.type=="Missing")].status', []),
        (".spec.nothere", []),
    ],
)
def test_jsonpath(expr: str, expected: list[object]) -> None:
    assert jsonpath.find(OBJ, expr) == expected


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (-5, "<invalid>"),
        (-1, "0s"),
        (59, "59s"),
        (119, "119s"),
        (120, "2m"),
        (150, "2m30s"),
        (600, "10m"),
        (3 * 3600, "3h"),
        (3 * 3600 + 600, "3h10m"),
        (47 * 3600, "47h"),
        (3 * 86400 + 3600, "3d1h"),
        (30 * 86400, "30d"),
        (3 * 365 * 86400 + 86400, "3y1d"),
        (9 * 365 * 86400, "9y"),
    ],
)
def test_human_duration(seconds: int, text: str) -> None:
    assert tables.human_duration(seconds) == text


CRD = {
    "spec": {
        "group": "test.kcpshard.dev",
        "scope": "Namespaced",
        "names": {"plural": "widgets", "kind": "Widget"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "additionalPrinterColumns": [
                    {
                        "name": "Ready",
                        "type": "string",
                        "jsonPath": '.status.conditions[?(@.type=="Ready")].status',
                    },
                    {"name": "Size", "type": "integer", "jsonPath": ".spec.size"},
                    {"name": "Missing", "type": "string", "jsonPath": ".spec.nothere", "priority": 1},
                    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
                ],
            }
        ],
    }
}


def test_custom_resource_table() -> None:
    rt = types_from_crd(CRD)[0]
    table = tables.table(rt, [OBJ], "42")
    assert table["kind"] == "Table" and table["apiVersion"] == "meta.k8s.io/v1"
    assert [c["name"] for c in table["columnDefinitions"]] == ["Name", "Ready", "Size", "Missing", "Age"]
    assert table["columnDefinitions"][3]["priority"] == 1
    cells = table["rows"][0]["cells"]
    assert cells[:4] == ["demo", "True", 3, None]
    assert cells[4].endswith("y") or cells[4].endswith("d")  # humanized age of a 2020 timestamp
    assert table["rows"][0]["object"]["kind"] == "PartialObjectMetadata"
    assert table["metadata"]["resourceVersion"] == "42"


def test_custom_resource_without_columns_gets_age() -> None:
    crd = {"spec": {**CRD["spec"], "versions": [{"name": "v1", "served": True, "storage": True}]}}
    table = tables.table(types_from_crd(crd)[0], [OBJ], "1", include="None")
    assert [c["name"] for c in table["columnDefinitions"]] == ["Name", "Age"]
    assert "object" not in table["rows"][0]


def test_pod_table() -> None:
    pods = next(t for t in builtin_types() if t.plural == "pods")
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    pod = {
        "metadata": {"name": "p", "creationTimestamp": now},
        "spec": {"containers": [{"name": "a"}, {"name": "b"}], "nodeName": "n1"},
        "status": {
            "phase": "Running",
            "containerStatuses": [{"ready": True, "restartCount": 2}, {"ready": False, "restartCount": 1}],
        },
    }
    table = tables.table(pods, [pod], "1")
    names = [c["name"] for c in table["columnDefinitions"]]
    assert names[:5] == ["Name", "Ready", "Status", "Restarts", "Age"]
    assert table["rows"][0]["cells"][:4] == ["p", "1/2", "Running", "3"]
    assert table["rows"][0]["cells"][6] == "n1"
