"""``accel-autoscaler``: one command line over the subcommands in
``autoscaler/commands/``.

Each subcommand module holds its flags (``add_arguments``) and its wiring
(``main``); this module only builds the parser from them and dispatches, so
``--help`` is the one map of what the tool does. Library modules never import
a command.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

# name -> one line for --help, in the order --help lists them. Each is the module
# autoscaler.commands.NAME, imported only when that command runs (or when the
# whole parser is built, for the docs), so that `run` starts without loading the
# simulator and `--help` loads nothing.
COMMANDS: dict[str, str] = {
    "check": "validate rule files; exit 1 listing every problem",
    "test": "run rule unit tests (promtool test rules style)",
    "query": "evaluate one expression with the built-in evaluator",
    "run": "run the controller (evaluation loop and API)",
    "extender": "serve kube-scheduler's extender protocol (placement)",
    "place": "rank the nodes and devices for a pod, with every term",
    "simulate": "run a fleet scenario with and without the rules; summary and plots",
}


def command(name: str) -> Any:
    """The module of one subcommand (``add_arguments`` and ``main``)."""
    return importlib.import_module(f"autoscaler.commands.{name}")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole parser, or with ``only`` the flags of that one command (the
    others are listed, not loaded); ``only=\"\"`` loads none."""
    p = _Parser(
        prog="accel-autoscaler",
        description=(
            "Evaluates YAML remediation rules (PromQL) against accelerator metrics and "
            "decides what to do on a Kubernetes cluster."
        ),
        epilog=(
            "examples:\n"
            "  accel-autoscaler check rules/                    # every problem, file:line:col\n"
            "  accel-autoscaler test rules/tests/               # rule unit tests\n"
            "  accel-autoscaler query 'rate(x[5m])' --series s.om --time 600\n"
            "  accel-autoscaler run --rules rules/ --source prometheus "
            "--prometheus.url http://prometheus:9090 --api.token-file token --dry-run\n"
            "  accel-autoscaler place pod.yaml --source prometheus --prometheus.url URL\n"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser)
    for name, help_text in COMMANDS.items():
        parser = sub.add_parser(name, help=help_text)
        if only is None or only == name:
            command(name).add_arguments(parser)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    chosen = next((a for a in argv if not a.startswith("-")), "")
    args = build_parser(only=chosen if chosen in COMMANDS else "").parse_args(argv)
    status: int = command(args.command).main(args)
    return status


if __name__ == "__main__":
    sys.exit(main())
