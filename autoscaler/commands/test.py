"""``accel-autoscaler test``: run rule unit tests (promtool's ``test rules``, for
remediation rules). The format is ``ruleset/testfile.py``'s; the runner, which
evaluates through the production evaluation cycle, is ``engine/ruletest.py``.

The work a test file may ask for is bounded (``TestLimits``); each limit has a
flag here, for a machine that can afford a larger test."""

from __future__ import annotations

import argparse

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
    for limit, flag in LIMIT_FLAGS.items():
        t.add_argument(
            flag,
            dest=f"max_{limit}",
            type=_positive,
            default=getattr(TEST_LIMITS, limit),
            metavar="N",
            help=f"the most {_WHAT[limit]} (default %(default)s)",
        )


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, got {value}")
    return value


def main(args: argparse.Namespace) -> int:
    limits = TestLimits(**{k: getattr(args, f"max_{k}") for k in LIMIT_FLAGS})
    return run_tests(args.paths, limits)
