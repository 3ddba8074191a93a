"""Log lines that say a thing once: an API server away for minutes, or a retry every second, gives one
line (and one when it is over), not a line per try."""

from __future__ import annotations

import logging
import sys

import httpx


class Notes:
    def __init__(self, log: logging.Logger) -> None:
        self.log = log
        self._last_problem = ""
        self._warned: set[str] = set()

    def problem(self, message: str) -> None:
        """A warning, unless it is the problem said last."""
        if message != self._last_problem:
            self.log.warning("%s", message)
            self._last_problem = message

    def recovered(self) -> None:
        if self._last_problem:
            self.log.info("recovered after: %s", self._last_problem)
            self._last_problem = ""

    def warn_once(self, message: str) -> None:
        """A warning said once in the agent's life."""
        if message not in self._warned:
            self._warned.add(message)
            self.log.warning("%s", message)


def short(exc: BaseException) -> str:
    """One line, for logs: no traceback, no request bodies (ApiError's str carries none)."""
    # pydantic only if loaded already: the agents that never use it do not pay its import
    pydantic = sys.modules.get("pydantic")
    if pydantic is not None and isinstance(exc, pydantic.ValidationError):
        return "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text}" if isinstance(exc, httpx.HTTPError | OSError) else text
