"""``accel-autoscaler test``: run rule unit tests (promtool's ``test rules``, for
remediation rules). The format is ``ruleset/testfile.py``'s; the runner, which
evaluates through the production evaluation cycle, is ``engine/ruletest.py``.

The work a test file may ask for is bounded (``TestLimits``); each limit has a
flag here, for a machine that can afford a larger test."""

from __future__ import annotations

import argparse

from autoscaler.commands.limitflags import add_limit_arguments
from autoscaler.engine.ruletest import main as run_tests
from autoscaler.ruleset.testfile import LIMIT_FLAGS, TEST_LIMITS, TestLimits

_WHAT = {
    "samples": "input samples a test file may expand to (in all its tests)",
    "series": "input series and alerts one test may have",
    "evaluations": "evaluations a test file may need (each test's last expected time / the "
    "interval, in all)",
    "series_evaluations": "series x evaluations a test file may need (in all its tests)",
}


def add_arguments(t: argparse.ArgumentParser) -> None:
    t.add_argument("paths", nargs="+", metavar="FILE", help="test files or directories")
    add_limit_arguments(t, LIMIT_FLAGS, TEST_LIMITS, _WHAT)


def main(args: argparse.Namespace) -> int:
    limits = TestLimits(**{k: getattr(args, f"max_{k}") for k in LIMIT_FLAGS})
    return run_tests(args.paths, limits)
