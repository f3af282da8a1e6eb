"""``accel-autoscaler``: check, test, query and run.

Each subcommand lives with the code it exercises; this module only parses the
command line and dispatches, so ``--help`` is the one map of what the tool does.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import NoReturn


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def build_parser() -> argparse.ArgumentParser:
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
            "--prometheus.url http://prometheus:9090 --dry-run\n"
            "  accel-autoscaler place pod.yaml --source prometheus --prometheus.url URL\n"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser)

    c = sub.add_parser("check", help="validate rule files; exit 1 listing every problem")
    c.add_argument("paths", nargs="+", metavar="PATH", help="rule files or directories")
    c.add_argument(
        "--source",
        choices=("prometheus", "scrape"),
        default="prometheus",
        help="also refuse PromQL the built-in evaluator cannot run (scrape) (default %(default)s)",
    )

    t = sub.add_parser("test", help="run rule unit tests (promtool test rules style)")
    t.add_argument("paths", nargs="+", metavar="FILE", help="test files or directories")

    q = sub.add_parser("query", help="evaluate one expression with the built-in evaluator")
    q.add_argument("expr", metavar="EXPR")
    q.add_argument(
        "--series",
        required=True,
        metavar="FILE",
        help="OpenMetrics samples with timestamps (what promtool tsdb create-blocks-from "
        "openmetrics reads)",
    )
    q.add_argument("--time", required=True, metavar="T", help="evaluation time: unix seconds")

    from autoscaler.controller import add_run_arguments

    r = sub.add_parser("run", help="run the controller (evaluation loop and API)")
    add_run_arguments(r)

    from autoscaler.placement.extender import add_extender_arguments
    from autoscaler.placement.place import add_place_arguments

    e = sub.add_parser("extender", help="serve kube-scheduler's extender protocol (placement)")
    add_extender_arguments(e)
    pl = sub.add_parser("place", help="rank the nodes and devices for a pod, with every term")
    add_place_arguments(pl)

    from autoscaler.simulate import add_arguments as add_simulate_arguments

    sim = sub.add_parser(
        "simulate",
        help="run a fleet scenario with the rules and without; summary.json and plots",
    )
    add_simulate_arguments(sim)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "check":
        from autoscaler.ruleset.loader import check_main

        return check_main(args.paths, source=args.source)
    if args.command == "test":
        from autoscaler.ruletest import main as test_main

        return test_main(args.paths)
    if args.command == "query":
        from autoscaler.promql.query import main as query_main

        return query_main(args.expr, args.series, args.time)
    if args.command == "extender":
        from autoscaler.placement.extender import extender_main

        return extender_main(args)
    if args.command == "place":
        from autoscaler.placement.place import place_main

        return place_main(args)
    if args.command == "simulate":
        from autoscaler.simulate.run import main as simulate_main

        return simulate_main(args)
    from autoscaler.controller import run_main

    return run_main(args)


if __name__ == "__main__":
    sys.exit(main())
