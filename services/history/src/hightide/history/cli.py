"""`hightide history ...`: the history service's commands, plugged into the `hightide` command.

Room: services/history. The client's `hightide` command never imports this service (import-linter forbids services
importing each other): it finds `add_commands` through the `hightide.commands` entry point group
(services/history/pyproject.toml) and calls it with its subparsers and its common options. Each subcommand is a
module of this package with `add_parser(subparsers)` that sets `run` (args -> exit code) as a default; adding one
is a line in `SUBCOMMANDS`. `python -m hightide.history` runs the same commands alone (`main`).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import Any, Final

SUBCOMMANDS: Final = ("hightide.history.audit_cli", "hightide.history.rebuild_cli", "hightide.history.report_cli")


class _WithCommonOptions:
    """Subparsers whose every parser also takes the options every `hightide` subcommand accepts (CONTRACT.md)."""

    def __init__(self, subparsers: Any, common: Sequence[argparse.ArgumentParser]) -> None:
        self._subparsers = subparsers
        self._common = list(common)

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser:
        kwargs["parents"] = [*kwargs.get("parents", []), *self._common]
        parser: argparse.ArgumentParser = self._subparsers.add_parser(name, **kwargs)
        return parser


def add_commands(subparsers: Any, common: argparse.ArgumentParser | None = None) -> None:
    """Add `history` and its subcommands to a `hightide` parser's subparsers (the entry point)."""
    history = subparsers.add_parser("history", help="audit, rebuild and report the history in the lake (Spark)")
    add_subcommands(history, [common] if common is not None else [])


def add_subcommands(parser: argparse.ArgumentParser, common: Sequence[argparse.ArgumentParser]) -> None:
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    for module in SUBCOMMANDS:
        importlib.import_module(module).add_parser(_WithCommonOptions(actions, common))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="hightide history", description="The history in the lake, on Spark.")
    add_subcommands(parser, [])
    args = parser.parse_args(argv)
    try:
        result: int = args.run(args)
    except KeyboardInterrupt:
        return 1
    return result


if __name__ == "__main__":
    sys.exit(main())
