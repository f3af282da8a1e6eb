"""``accel-autoscaler simulate``: its flags, and the run from them to
``summary.json``, the table and the plots (``autoscaler/simulate/``).

Without ``--rules`` it runs the shipped rules, found wherever it runs from:
``rules/`` of the current directory where there is one (a checkout's root, as
before), else the ``rules/`` folder that ships beside this package in the
source tree (an editable install from anywhere). Where neither exists (a wheel
carries no rules) it says both places it looked and what to pass instead,
rather than "cannot read rules/".
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import TextIO

from accel_common.yamlread import count_text
from autoscaler.commands.limitflags import add_limit_arguments
from autoscaler.ruleset.loader import RuleSetError
from autoscaler.simulate.limits import LIMIT_FLAGS, WORK_LIMITS, WorkLimits
from autoscaler.simulate.plots import write_plots
from autoscaler.simulate.results import ProgressBar, summary, table
from autoscaler.simulate.run import IntervalError, simulate
from autoscaler.simulate.scenario import ScenarioError, load_scenario
from autoscaler.simulate.schedulers import SCHEDULERS

SHIPPED_RULES = Path(__file__).resolve().parents[2] / "rules"
"""The rule folder of the source tree this module is in (``<repo>/rules``)."""


class NoRulesError(Exception):
    """No ``--rules`` and no rules where the default looks."""


def default_rules(cwd: Path, stderr: TextIO, shipped: Path = SHIPPED_RULES) -> str:
    """The rules to run without ``--rules``: ``rules/`` in ``cwd``, else the
    shipped ones (said on ``stderr``, so the run names the rules it used)."""
    here = cwd / "rules"
    if here.is_dir():
        return "rules/"
    if (shipped / "remediation.yaml").is_file():
        print(f"no --rules: running the shipped rules in {shipped}", file=stderr)
        return str(shipped)
    raise NoRulesError(
        f"no --rules given and no rules found: not in {here} (the current directory) "
        f"nor in {shipped} (the source tree's rules/, which an installed package does "
        "not carry); pass --rules PATH (a rule file or a folder such as rules/ of "
        "accel-fleet's source)"
    )


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("scenario", metavar="SCENARIO.yaml", help="scenario file (see scenarios/)")
    p.add_argument(
        "--rules",
        action="append",
        metavar="PATH",
        help="rule file or directory (repeatable; default: rules/ here, else the shipped "
        "rules of the source tree this command runs from)",
    )
    p.add_argument(
        "--out",
        default="simulate-out",
        metavar="DIR",
        help="where summary.json and the plots go (default %(default)s)",
    )
    p.add_argument("--seed", type=int, metavar="N", help="overrides the scenario's seed")
    p.add_argument(
        "--baseline",
        choices=("none", "skip"),
        default="none",
        help="the comparison run: none = no remediation, static pools (default); "
        "skip = run the rules only",
    )
    p.add_argument("--no-plots", action="store_true", help="write summary.json only")
    what = {
        "devices": "devices a scenario's pools may reach (max x devicesPerNode, in all)",
        "evaluations": "evaluations a scenario may ask for (duration / interval)",
        "jobs": "jobs a scenario may expect (arrivalsPerHour x duration)",
        "faults": "random faults a scenario may expect (rates x devices x duration)",
    }
    add_limit_arguments(p, LIMIT_FLAGS, WORK_LIMITS, what)


def main(args: argparse.Namespace, stderr: TextIO = sys.stderr) -> int:
    try:
        limits = WorkLimits(**{k: getattr(args, f"max_{k}") for k in LIMIT_FLAGS})
        scenario = load_scenario(args.scenario, tuple(SCHEDULERS), limits)
    except ScenarioError as e:
        print(str(e), file=stderr)
        n = len(e.problems)
        print(
            f"accel-autoscaler: error: the scenario did not load ({n} "
            f"{'problem' if n == 1 else 'problems'} above)",
            file=stderr,
        )
        return 2
    if args.rules:
        rules = args.rules
    else:
        try:
            rules = [default_rules(Path.cwd(), stderr)]
        except NoRulesError as e:
            print(f"accel-autoscaler: error: {e}", file=stderr)
            return 2
    seed = scenario.seed if args.seed is None else args.seed
    logging.getLogger("accel_autoscaler").setLevel(logging.WARNING)
    try:
        results = simulate(
            scenario,
            rules,
            seed=seed,
            baseline=args.baseline == "none",
            progress=ProgressBar(stderr),
        )
    except IntervalError as e:
        print(f"accel-autoscaler: error: {e}", file=stderr)
        return 2
    except RuleSetError as e:
        print(str(e), file=stderr)
        print(
            f"accel-autoscaler: error: the rules did not load "
            f"({count_text(len(e.problems), 'problem')} above)",
            file=stderr,
        )
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    doc = summary(results, scenario, seed)
    (out / "summary.json").write_text(json.dumps(doc, indent=2) + "\n")
    print(f"{scenario.name}: {scenario.duration / 3600:g} h simulated, seed {seed}")
    print(table(doc))
    if not args.no_plots:
        paths = write_plots(results, scenario, out)
        print(f"plots: {', '.join(str(p) for p in paths)}")
    print(f"summary: {out / 'summary.json'}")
    return 0
