"""The one entry of every agent: parse its options, set up logging, run it with an API client, and end a
failure with one clear line and exit code 1 (no traceback: a person reads it in `kubectl logs`)."""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol, TypeVar

from kcpshard.agent.errors import Failure, UsageError
from kcpshard.k8s.api import ApiClient
from kcpshard.k8s.credentials import KubeconfigError


class Options(Protocol):
    @property
    def kubeconfig(self) -> str | None: ...


Opts = TypeVar("Opts", bound=Options)


def main(
    name: str,
    argv: Sequence[str],
    parse: Callable[[Sequence[str]], Opts],
    work: Callable[[Opts, ApiClient], Awaitable[int]],
) -> int:
    """`kcpshard agent <name>`: its exit code."""
    prog = f"kcpshard agent {name}"
    setup_logging(f"{name}-agent")
    try:
        opts = parse(argv)
    except UsageError as exc:
        return fail(prog, str(exc))
    return asyncio.run(_run(prog, opts, work))


async def _run(prog: str, opts: Opts, work: Callable[[Opts, ApiClient], Awaitable[int]]) -> int:
    try:
        api = ApiClient.from_kubeconfig(opts.kubeconfig)
    except KubeconfigError as exc:
        return fail(prog, str(exc))
    try:
        return await work(opts, api)
    except Failure as exc:
        return fail(prog, str(exc))
    finally:
        await api.aclose()


def setup_logging(name: str) -> None:
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format=f"%(asctime)s {name} %(levelname)s %(message)s"
    )
    # One line per request (a readyz poll every second) would bury what matters.
    for noisy in ("httpx", "httpcore"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def fail(prog: str, message: str) -> int:
    """One clear line for a person, no traceback."""
    print(f"{prog}: {message}", file=sys.stderr, flush=True)
    return 1
