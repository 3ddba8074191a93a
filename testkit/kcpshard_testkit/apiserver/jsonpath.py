"""The JSONPath subset printer columns use: `.a.b`, `['a.b']`, `[0]`, `[*]`, `[?(@.type=="Ready")]`.

Imitates k8s.io/client-go/util/jsonpath (FindResults) for the simple paths CRDs may declare in
`additionalPrinterColumns`; recursive descent (`..`) and ranges are not supported.
"""

from __future__ import annotations

import json
import re
from typing import Any

_TOKEN = re.compile(
    r"""\.(?P<field>[A-Za-z0-9_$-]+)"""
    r"""|\[\s*'(?P<quoted>[^']*)'\s*\]"""
    r"""|\[\s*(?P<index>-?\d+)\s*\]"""
    r"""|\[\s*(?P<star>\*)\s*\]"""
    r"""|\[\s*\?\(\s*@(?P<fpath>(?:\.[A-Za-z0-9_-]+)+)\s*(?P<op>==|!=)\s*(?P<fval>"[^"]*"|'[^']*'|[^)\s]+)\s*\)\s*\]"""
    r"""|\.\*(?P<dotstar>)"""
)


class JSONPathError(ValueError):
    pass


def _parse(expr: str) -> list[tuple[str, Any]]:
    expr = expr.strip()
    if expr.startswith("{") and expr.endswith("}"):
        expr = expr[1:-1].strip()
    if expr.startswith("$"):
        expr = expr[1:]
    steps: list[tuple[str, Any]] = []
    pos = 0
    while pos < len(expr):
        m = _TOKEN.match(expr, pos)
        if not m:
            raise JSONPathError(f"unrecognized JSONPath at {expr[pos:]!r}")
        if m.group("field") is not None:
            steps.append(("field", m.group("field")))
        elif m.group("quoted") is not None:
            steps.append(("field", m.group("quoted")))
        elif m.group("index") is not None:
            steps.append(("index", int(m.group("index"))))
        elif m.group("star") is not None or m.group("dotstar") is not None:
            steps.append(("star", None))
        else:
            raw = m.group("fval")
            value: Any = raw[1:-1] if raw[0] in "\"'" else json.loads(raw)
            steps.append(("filter", (m.group("fpath")[1:].split("."), m.group("op"), value)))
        pos = m.end()
    return steps


def _get_path(obj: Any, parts: list[str]) -> tuple[bool, Any]:
    for part in parts:
        if not isinstance(obj, dict) or part not in obj:
            return False, None
        obj = obj[part]
    return True, obj


def find(obj: Any, expr: str) -> list[Any]:
    """All values `expr` selects in `obj` (an empty list when nothing matches)."""
    current = [obj]
    for kind, arg in _parse(expr):
        nxt: list[Any] = []
        for value in current:
            is_field = kind == "field" and isinstance(value, dict) and arg in value
            is_index = kind == "index" and isinstance(value, list) and -len(value) <= arg < len(value)
            if is_field or is_index:
                nxt.append(value[arg])
            elif kind == "star":
                nxt.extend(
                    value.values() if isinstance(value, dict) else value if isinstance(value, list) else []
                )
            elif kind == "filter" and isinstance(value, list):
                parts, op, want = arg
                for item in value:
                    found, have = _get_path(item, parts)
                    if found and ((have == want) if op == "==" else (have != want)):
                        nxt.append(item)
        current = nxt
    return current


def to_text(value: Any) -> str:
    """How jsonpath PrintResults renders one value."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return json.dumps(value, separators=(",", ":"))
