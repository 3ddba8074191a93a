"""How an agent says it cannot go on: in one line a person can act on, and exit code 1 (cli.main)."""

from __future__ import annotations


class UsageError(Exception):
    """Options that do not fit together."""


class Failure(Exception):
    """The agent cannot go on; the message says why."""
