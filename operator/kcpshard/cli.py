"""The `kcpshard` command: one program for the operator and the agents."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from pathlib import Path

# Sub-commands resolve lazily so `kcpshard crds` does not import kopf, and an agent
# does not import the operator.
_COMMANDS = {
    ("operator",): "kcpshard.controller.main:run",
    ("agent", "slot"): "kcpshard.agent.slot:run",
    ("agent", "front"): "kcpshard.agent.front:run",
    ("agent", "backup"): "kcpshard.agent.backup:run",
    ("agent", "haproxy-member"): "kcpshard.agent.haproxy_member:run_member",
    ("agent", "haproxy-member-stop"): "kcpshard.agent.haproxy_member:run_member_stop",
}


def _crds(args: argparse.Namespace) -> int:
    from kcpshard.api import crds

    for path in crds.write(Path(args.output)):
        print(f"wrote {path}")
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kcpshard", description="Blue/green rolls of kcp shards.")
    sub = parser.add_subparsers(dest="command", required=True)

    crds = sub.add_parser("crds", help="write the CRDs generated from the models")
    crds.add_argument("--output", "-o", default="crds", help="folder to write into (default: crds)")
    crds.set_defaults(func=_crds)

    groups: dict[str, argparse._SubParsersAction[argparse.ArgumentParser]] = {}
    for words, target in _COMMANDS.items():
        if len(words) == 1:
            cmd = sub.add_parser(words[0], help=f"run the {words[0]}", add_help=False)
        else:
            if words[0] not in groups:
                group = sub.add_parser(words[0], help=f"{words[0]} commands")
                groups[words[0]] = group.add_subparsers(dest="subcommand", required=True)
            cmd = groups[words[0]].add_parser(words[1], help=f"{words[0]} {words[1]}", add_help=False)
        cmd.set_defaults(target=target)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = _parser()
    # Hand the rest of the line to the sub-command's own parser.
    args, rest = parser.parse_known_args(argv)
    if hasattr(args, "func"):
        if rest:
            parser.error(f"unrecognized arguments: {' '.join(rest)}")
        return int(args.func(args))
    module_name, func_name = args.target.split(":")
    func = getattr(importlib.import_module(module_name), func_name)
    return int(func(rest) or 0)


if __name__ == "__main__":
    sys.exit(main())
