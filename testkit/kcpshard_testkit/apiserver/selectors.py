"""Label and field selectors, parsed from query strings.

Label grammar imitates k8s.io/apimachinery/pkg/labels/selector.go (Parse): `k=v`, `k==v`, `k!=v`,
`k in (a,b)`, `k notin (a,b)`, `k`, `!k`, `k>1`, `k<1`, comma-separated, all must match.
Fields imitate k8s.io/apimachinery/pkg/fields/selector.go: `f=v`, `f==v`, `f!=v` only.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .errors import ApiError, bad_request

_KEY = r"[A-Za-z0-9./_-]+"
_VALUE = r"[A-Za-z0-9._-]*"
_SET_RE = re.compile(rf"^\s*({_KEY})\s+(in|notin)\s+\(([^)]*)\)\s*$")
_CMP_RE = re.compile(rf"^\s*({_KEY})\s*(==|=|!=|>|<)\s*({_VALUE})\s*$")
_EXISTS_RE = re.compile(rf"^\s*(!?)\s*({_KEY})\s*$")


@dataclass(frozen=True)
class Requirement:
    key: str
    op: str  # =, !=, in, notin, exists, !, gt, lt
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key)
        match self.op:
            case "=" | "in":
                return present and value in self.values
            case "!=" | "notin":
                return not present or value not in self.values
            case "exists":
                return present
            case "!":
                return not present
            case "gt" | "lt":
                try:
                    have, want = int(str(value)), int(self.values[0])
                except ValueError:
                    return False
                return present and (have > want if self.op == "gt" else have < want)
        return False  # pragma: no cover


def _split_top(text: str) -> list[str]:
    """Split on commas that are not inside parentheses."""
    parts, depth, current = [], 0, ""
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += ch
    parts.append(current)
    return [p for p in parts if p.strip()]


@dataclass(frozen=True)
class LabelSelector:
    requirements: tuple[Requirement, ...] = ()

    @classmethod
    def parse(cls, text: str | None) -> LabelSelector:
        if not text:
            return cls()
        reqs = []
        for part in _split_top(text):
            if m := _SET_RE.match(part):
                values = tuple(v.strip() for v in m.group(3).split(",") if v.strip())
                reqs.append(Requirement(m.group(1), "in" if m.group(2) == "in" else "notin", values))
            elif m := _CMP_RE.match(part):
                op = {"==": "=", "=": "=", "!=": "!=", ">": "gt", "<": "lt"}[m.group(2)]
                if op in ("gt", "lt") and not m.group(3).lstrip("-").isdigit():
                    raise bad_request(
                        f"unable to parse requirement: for 'Gt', 'Lt' operators, "
                        f"the value must be an integer: {part.strip()}"
                    )
                reqs.append(Requirement(m.group(1), op, (m.group(3),)))
            elif m := _EXISTS_RE.match(part):
                reqs.append(Requirement(m.group(2), "!" if m.group(1) else "exists"))
            else:
                raise bad_request(
                    f"unable to parse requirement: found '{part.strip()}', expected: "
                    f"'=', '!=', '==', 'in', notin'"
                )
        return cls(tuple(reqs))

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        return all(r.matches(labels or {}) for r in self.requirements)

    @classmethod
    def from_match(cls, selector: Mapping[str, Any] | None) -> LabelSelector:
        """A metav1.LabelSelector (matchLabels / matchExpressions) as a LabelSelector."""
        reqs = [Requirement(k, "=", (str(v),)) for k, v in (selector or {}).get("matchLabels", {}).items()]
        ops = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!"}
        for expr in (selector or {}).get("matchExpressions", []) or []:
            reqs.append(Requirement(expr["key"], ops[expr["operator"]], tuple(expr.get("values") or ())))
        return cls(tuple(reqs))


def field_value(obj: Mapping[str, Any], path: str) -> str:
    """The string form of a dotted field path, as fields.Set holds it ('' when absent)."""
    cur: Any = obj
    for part in path.split("."):
        if not isinstance(cur, Mapping) or part not in cur:
            return ""
        cur = cur[part]
    if isinstance(cur, bool):
        return "true" if cur else "false"
    return "" if cur is None else str(cur)


@dataclass(frozen=True)
class FieldSelector:
    terms: tuple[tuple[str, bool, str], ...] = ()  # (field, equal?, value)

    @classmethod
    def parse(
        cls,
        text: str | None,
        allowed: tuple[str, ...],
        aliases: Mapping[str, str] | None = None,
        unknown: Callable[[str], ApiError] | None = None,
    ) -> FieldSelector:
        if not text:
            return cls()
        terms = []
        for part in text.split(","):
            if not part.strip():
                continue
            if "!=" in part:
                key, value = part.split("!=", 1)
                equal = False
            elif "==" in part:
                key, value = part.split("==", 1)
                equal = True
            elif "=" in part:
                key, value = part.split("=", 1)
                equal = True
            else:
                raise bad_request(f"invalid selector: '{text}'; can't understand '{part}'")
            key = key.strip()
            key = (aliases or {}).get(key, key)
            if key not in allowed:
                raise (unknown(key) if unknown else bad_request(f"field label not supported: {key}"))
            terms.append((key, equal, value.strip()))
        return cls(tuple(terms))

    def matches(self, obj: Mapping[str, Any]) -> bool:
        return all((field_value(obj, key) == value) == equal for key, equal, value in self.terms)
