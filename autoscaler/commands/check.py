"""``accel-autoscaler check``: validate rule files; every problem as
``file:line:col: message`` on stderr and exit 1, or a one-line summary and 0.

With ``--source scrape`` it also refuses the PromQL that the built-in evaluator
cannot run, so that a rule set meant for the scrape source fails here and not in
a running controller."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from autoscaler.ruleset.loader import RuleSetError, load_ruleset


def add_arguments(c: argparse.ArgumentParser) -> None:
    c.add_argument("paths", nargs="+", metavar="PATH", help="rule files or directories")
    c.add_argument(
        "--source",
        choices=("prometheus", "scrape"),
        default="prometheus",
        help="also refuse PromQL the built-in evaluator cannot run (scrape) (default %(default)s)",
    )


def main(args: argparse.Namespace) -> int:
    return check(args.paths, source=args.source)


def check(paths: Sequence[str | Path], source: str = "prometheus") -> int:
    try:
        ruleset = load_ruleset(paths, source=source)
    except RuleSetError as e:
        for problem in e.problems:
            print(problem, file=sys.stderr)
        return 1
    n = len(ruleset.rules)
    where = ", ".join(str(p) for p in paths)
    print(f"{where}: {n} rule{'' if n == 1 else 's'} OK")
    return 0
