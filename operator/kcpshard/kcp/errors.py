"""Errors of the kcp client and the flag table. Messages name what failed, never a token."""

from __future__ import annotations


class KcpError(Exception):
    """A request to kcp failed. `status` is the HTTP status when kcp answered, else None."""

    def __init__(self, message: str, status: int | None = None, reason: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason


class KcpTimeout(KcpError):
    """A wait on kcp ran out of time. `waited_for` says what for, `last_state` what was seen last."""

    def __init__(self, waited_for: str, timeout: float, last_state: str) -> None:
        super().__init__(f"timed out after {timeout:g}s waiting for {waited_for}; last seen: {last_state}")
        self.waited_for = waited_for
        self.timeout = timeout
        self.last_state = last_state


class VersionError(ValueError):
    """A version or a version range does not parse."""
