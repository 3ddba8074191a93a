"""What every agent command does first: logging, the quiet HTTP clients, and one-line failures."""

from __future__ import annotations

import logging
import sys


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
