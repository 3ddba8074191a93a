"""``$(VAR)`` expansion as the kubelet does it.

Port of ``kubernetes/third_party/forked/golang/expansion/expand.go``: ``$(NAME)`` is replaced when NAME is
defined and kept verbatim otherwise, ``$$`` escapes a ``$``, any other ``$`` is kept, and an unterminated
``$(`` is kept as text.
"""

from __future__ import annotations

from collections.abc import Mapping


def expand(text: str, *contexts: Mapping[str, str]) -> str:
    """Expand ``text``; the first context that defines a name wins."""
    out: list[str] = []
    checkpoint = 0
    cursor = 0
    while cursor < len(text):
        if text[cursor] == "$" and cursor + 1 < len(text):
            out.append(text[checkpoint:cursor])
            read, is_var, advance = _read_name(text[cursor + 1 :])
            if is_var:
                out.append(_lookup(read, contexts))
            else:
                out.append(read)
            cursor += advance
            checkpoint = cursor + 1
        cursor += 1
    out.append(text[checkpoint:])
    return "".join(out)


def _lookup(name: str, contexts: tuple[Mapping[str, str], ...]) -> str:
    for ctx in contexts:
        if name in ctx:
            return ctx[name]
    return f"$({name})"


def _read_name(rest: str) -> tuple[str, bool, int]:
    """(text, is a variable, characters consumed after the ``$``) like expand.go's tryReadVariableName."""
    first = rest[0]
    if first == "$":
        return "$", False, 1
    if first == "(":
        end = rest.find(")", 1)
        if end >= 0:
            return rest[1:end], True, end + 1
        return "$(", False, 1
    return "$" + first, False, 1
