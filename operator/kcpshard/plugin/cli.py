"""`kubectl-kcpshard`: the command line of the plugin. kubectl runs it as `kubectl kcpshard ...` when the
executable is on PATH (with krew or without)."""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
from collections.abc import Sequence
from typing import TextIO

import httpx

from kcpshard.k8s.api import ApiClient, ApiError
from kcpshard.k8s.credentials import Credentials, KubeconfigError, load_credentials
from kcpshard.plugin import commands
from kcpshard.plugin.commands import Refused, Terminal
from kcpshard.plugin.live import is_terminal
from kcpshard.plugin.objects import Unreadable

EXIT_CODES = """\
exit codes:
  0    done; with --wait: the roll ended Succeeded (or the shard is healthy with no roll)
  1    an error: the shard is not found, the API server cannot be reached, or the command
       was refused (e.g. abort after the flip)
  2    the command line is wrong
  3    with --wait: the roll stalled (Stalled=True); the message says why
  4    with --wait: the --timeout passed first
  130  interrupted (Ctrl-C)
"""

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def duration(text: str) -> float:
    """Seconds of a kubectl-style duration: 90, 90s, 5m, 1h30m, 2m30s, 0 (none)."""
    if re.fullmatch(r"\d+(\.\d+)?", text):
        return float(text)
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise argparse.ArgumentTypeError(f"invalid duration {text!r} (e.g. 90s, 5m, 1h30m)")
    return sum(float(n) * _UNIT[u] for n, u in parts)


def _connection_flags(parser: argparse.ArgumentParser) -> None:
    # SUPPRESS: given before or after the sub-command, neither copy overwrites the other
    group = parser.add_argument_group("connection")
    group.add_argument(
        "--kubeconfig",
        default=argparse.SUPPRESS,
        help="path of the kubeconfig file (default: $KUBECONFIG, its files merged, else ~/.kube/config)",
    )
    group.add_argument("--context", default=argparse.SUPPRESS, help="kubeconfig context to use")
    group.add_argument(
        "-n",
        "--namespace",
        default=argparse.SUPPRESS,
        help="namespace (default: the context's, else default)",
    )


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="kubectl kcpshard",
        description="Watch and steer the blue/green rolls of kcp shards (KcpShard, kcpshard.dev).",
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _connection_flags(top)
    sub = top.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, help_: str, description: str | None = None) -> argparse.ArgumentParser:
        cmd = sub.add_parser(
            name,
            help=help_,
            description=description or help_,
            epilog=EXIT_CODES,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        _connection_flags(cmd)
        return cmd

    status = command(
        "status",
        "the current roll as a checklist",
        "Show the shard's roll as a checklist: its steps and the new slot's conditions, each with its "
        "time and duration; what serves now; and the last roll's report.",
    )
    status.add_argument("name", metavar="NAME")
    status.add_argument("-w", "--watch", action="store_true", help="redraw as the roll goes on")
    status.add_argument(
        "--wait", action="store_true", help="exit when the roll ends: 0 Succeeded, 3 stalled, 4 timed out"
    )
    status.add_argument("--timeout", type=duration, default=0.0, help="give up waiting after this (e.g. 5m)")

    for verb, what in (
        ("promote", "let a roll that waits for promotion go on (sets kcpshard.dev/promote)"),
        ("abort", "stop a roll before its flip; the old slot keeps serving (sets kcpshard.dev/abort)"),
        ("retry", "roll a stalled spec once more (sets kcpshard.dev/retry)"),
        (
            "reassert",
            "roll the serving revision once more, so its kcp re-asserts its bootstrap after an aborted "
            "upgrade (sets kcpshard.dev/reassert)",
        ),
    ):
        command(verb, what).add_argument("name", metavar="NAME")

    command("history", "the last rolls: result, revisions, durations").add_argument("name", metavar="NAME")
    listing = command("list", "the shards, as kubectl get lists them")
    listing.add_argument("-A", "--all-namespaces", action="store_true", help="shards of every namespace")
    listing.add_argument("-w", "--watch", action="store_true", help="then a row per change")
    command("version", "the plugin's version")
    return top


def _credentials(args: argparse.Namespace) -> Credentials:
    # kubectl's order: --kubeconfig, else $KUBECONFIG merged, else ~/.kube/config, else in-cluster. Loaded
    # before the event loop starts: an exec plugin may run (and ask on the terminal).
    return load_credentials(
        getattr(args, "kubeconfig", None), getattr(args, "context", None), in_cluster_first=False
    )


async def _run(args: argparse.Namespace, term: Terminal, credentials: Credentials) -> int:
    async with ApiClient(credentials) as api:
        namespace: str = getattr(args, "namespace", None) or api.default_namespace
        if args.command == "status":
            return await commands.status(
                api, term, namespace, args.name, watch=args.watch, wait=args.wait, timeout=args.timeout
            )
        if args.command in commands.STEERING:
            return await commands.steer(api, term, namespace, args.name, args.command)
        if args.command == "history":
            return await commands.history(api, term, namespace, args.name)
        if args.command == "list":
            return await commands.list_shards(
                api, term, None if args.all_namespaces else namespace, watch=args.watch
            )
    raise AssertionError(f"unknown command {args.command}")


def main(argv: Sequence[str] | None = None, out: TextIO | None = None, err: TextIO | None = None) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    args = parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    term = Terminal(out, err, live=is_terminal(out))
    if args.command == "version":
        return commands.version(term)
    server = "the API server"
    try:
        credentials = _credentials(args)
        server = credentials.server
        return asyncio.run(_run(args, term, credentials))
    except KeyboardInterrupt:
        return commands.INTERRUPTED
    except (Refused, Unreadable) as exc:
        err.write(f"error: {exc}\n")
    except ApiError as exc:
        # as kubectl says it
        err.write(f"Error from server ({exc.reason}): {exc.message}\n")
    except KubeconfigError as exc:
        err.write(f"error: {exc}\n")
    except httpx.TransportError as exc:
        err.write(f"error: cannot reach {server}: {_why(exc)}\n")
    return commands.FAILED


def _why(exc: BaseException) -> str:
    # httpx wraps the OS error; its own text is often empty
    cause = exc.__cause__ or exc.__context__
    return str(exc) or (str(cause) if cause else type(exc).__name__)


if __name__ == "__main__":
    sys.exit(main())
