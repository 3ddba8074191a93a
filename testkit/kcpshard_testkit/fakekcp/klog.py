"""klog-style log lines on stderr (`I0102 15:04:05.000000   12345 file.go:123] message`), as kcp prints.

Imitates `k8s.io/klog/v2` text output; the file:line part names the Go source the message comes from in kcp,
so log-reading code (the host agent) sees the same shape as with a real kcp.
"""

from __future__ import annotations

import datetime as dt
import os
import sys

_verbosity = 2


def set_verbosity(v: int) -> None:
    global _verbosity
    _verbosity = v


def _line(severity: str, source: str, msg: str) -> str:
    now = dt.datetime.now()
    return f"{severity}{now:%m%d %H:%M:%S.%f} {os.getpid():>7} {source}] {msg}\n"


def _write(text: str) -> None:
    try:
        sys.stderr.write(text)
        sys.stderr.flush()
    except (OSError, ValueError):
        pass  # stderr closed: logging must never take the server down


def info(msg: str, source: str = "server.go:1", v: int = 0) -> None:
    if v <= _verbosity:
        _write(_line("I", source, msg))


def warning(msg: str, source: str = "server.go:1") -> None:
    _write(_line("W", source, msg))


def error(msg: str, source: str = "server.go:1") -> None:
    _write(_line("E", source, msg))


def quote(s: str) -> str:
    """Go's %q for the plain strings we log."""
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'
