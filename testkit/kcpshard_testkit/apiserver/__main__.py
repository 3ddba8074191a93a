"""Run the emulated API alone.

`python -m kcpshard_testkit.apiserver --dir DIR [--crds PATH ...] [--port N]`
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from pathlib import Path

from .server import CRDLoadError, EmulatedApiServer


async def _serve(args: argparse.Namespace) -> int:
    server = EmulatedApiServer(Path(args.dir), crd_paths=[Path(p) for p in args.crds], port=args.port)
    try:
        await server.start()
    except (CRDLoadError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(server.kubeconfig_path, flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await server.stop()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m kcpshard_testkit.apiserver",
        description="Run the emulated Kubernetes API server until SIGTERM/SIGINT.",
    )
    parser.add_argument("--dir", required=True, help="work directory: kubeconfig, ca.crt and keys go here")
    parser.add_argument("--crds", action="append", default=[], help="CRD file or folder (repeatable)")
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default: a free one)")
    parser.add_argument("--verbose", action="store_true", help="log every request error")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    return asyncio.run(_serve(args))


if __name__ == "__main__":
    sys.exit(main())
