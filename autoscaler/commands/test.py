"""``accel-autoscaler test``: run rule unit tests (promtool's ``test rules``, for
remediation rules). The format is ``ruleset/testfile.py``'s; the runner, which
evaluates through the production evaluation cycle, is ``engine/ruletest.py``."""

from __future__ import annotations

import argparse

from autoscaler.engine.ruletest import main as run_tests


def add_arguments(t: argparse.ArgumentParser) -> None:
    t.add_argument("paths", nargs="+", metavar="FILE", help="test files or directories")


def main(args: argparse.Namespace) -> int:
    return run_tests(args.paths)
