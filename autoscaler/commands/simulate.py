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
from autoscaler.ruleset.loader import RuleSetError, load_ruleset
from autoscaler.simulate.limits import LIMIT_FLAGS, WORK_LIMITS, WorkLimits
from autoscaler.simulate.plots import write_plots, write_spread
from autoscaler.simulate.results import ProgressBar, summary, table
from autoscaler.simulate.run import IntervalError, check_intervals, simulate
from autoscaler.simulate.scenario import Scenario, ScenarioError, load_scenario
from autoscaler.simulate.schedulers import SCHEDULERS
from autoscaler.simulate.seedreport import (
    compare_doc,
    compare_table,
    method,
    seed_text,
    seeds_doc,
    seeds_table,
)
from autoscaler.simulate.seeds import (
    RAY_HINT,
    Arm,
    Done,
    RuleText,
    SeedRunError,
    by_arm,
    make_tasks,
)
from autoscaler.simulate.seeds import run as run_seeds

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
        help="the comparison run: none = no remediation, static pools (default); "
        "skip = run the rules only",
    )
    p.add_argument("--no-plots", action="store_true", help="write summary.json only")
    add_seed_arguments(p)
    what = {
        "devices": "devices a scenario's pools may reach (max x devicesPerNode, in all)",
        "evaluations": "evaluations a scenario may ask for (duration / interval)",
        "jobs": "jobs a scenario may expect (arrivalsPerHour x duration)",
        "faults": "random faults a scenario may expect (rates x devices x duration)",
    }
    add_limit_arguments(p, LIMIT_FLAGS, WORK_LIMITS, what)


def _at_least_one(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"{n} is less than 1; give 1 or more")
    return n


def add_seed_arguments(p: argparse.ArgumentParser) -> None:
    """``--seeds``, ``--compare``, ``--compare-scheduler``, ``--jobs`` and
    ``--ray-address``: many runs of one scenario (``simulate/seeds.py``)."""
    p.add_argument(
        "--seeds",
        type=_at_least_one,
        metavar="N",
        help="run N seeds: the scenario's seed (or --seed), seed+1, ..., seed+N-1, and "
        "print each summary figure's mean with a 95%% interval (Student t on the "
        "per-seed values); writes seeds.json (or compare.json) under --out",
    )
    p.add_argument(
        "--compare",
        nargs=2,
        metavar=("RULES_A", "RULES_B"),
        help="run two rule sets (a file or a folder each) on the same seeds (needs "
        "--seeds N, N >= 2; the rules runs only) and print each figure's mean for A and "
        "B and the paired difference B - A with its 95%% interval, * where it excludes 0",
    )
    p.add_argument(
        "--compare-scheduler",
        nargs=2,
        choices=tuple(SCHEDULERS),
        metavar=("SCHED_A", "SCHED_B"),
        help="as --compare, with the same rules and two schedulers "
        f"({', '.join(SCHEDULERS)}) in place of the scenario's",
    )
    p.add_argument(
        "--jobs",
        type=_at_least_one,
        metavar="J",
        help="runs at once in local processes (default: the CPU count); with "
        "--ray-address local, the local Ray instance's CPUs",
    )
    p.add_argument(
        "--ray-address",
        metavar="ADDR",
        help="run the seeds on Ray instead of local processes: local (start a Ray "
        "instance here), auto (the cluster this machine is in), or a cluster's address "
        f"(ray://head:10001); needs {RAY_HINT}",
    )


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
    many = _many_error(args)
    if many is not None:
        print(f"accel-autoscaler: error: {many}", file=stderr)
        return 2
    if args.seeds is not None or args.compare or args.compare_scheduler:
        return _main_seeds(args, scenario, stderr)
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
            baseline=args.baseline != "skip",
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


def _many_error(args: argparse.Namespace) -> str | None:
    """What is wrong with the many-runs flags together, if anything."""
    comparing = bool(args.compare or args.compare_scheduler)
    if args.compare and args.compare_scheduler:
        return (
            "--compare (two rule sets) and --compare-scheduler (two schedulers) are two "
            "comparisons; give one"
        )
    if args.compare and args.rules:
        return "--compare RULES_A RULES_B names both rule sets; leave out --rules"
    if comparing and args.baseline is not None:
        return (
            "--compare and --compare-scheduler compare the two arms' rules runs; leave out "
            "--baseline (run --seeds N without a comparison for rules against baseline)"
        )
    if comparing and (args.seeds is None or args.seeds < 2):
        return (
            "a comparison needs --seeds N with N >= 2: a difference over one seed has no "
            "interval (16 seeds are a good start)"
        )
    if args.seeds is None and (args.jobs is not None or args.ray_address is not None):
        return "--jobs and --ray-address spread the runs of --seeds N; add --seeds N"
    if args.ray_address is not None and not args.ray_address.strip():
        return (
            "--ray-address is empty; give local, auto or the cluster's address (ray://head:10001)"
        )
    return None


class _Refused(Exception):
    """The rules of an arm did not load or cannot run the scenario (said already)."""


def _checked(label: str, paths: list[str], scenario: Scenario, stderr: TextIO) -> RuleText:
    """An arm's rules, loaded and checked here (with their own paths in any
    message) before any run starts, then read as text for the workers."""
    try:
        ruleset = load_ruleset(paths, source="scrape")
        check_intervals(scenario, ruleset)
    except RuleSetError as e:
        print(str(e), file=stderr)
        print(
            f"accel-autoscaler: error: the rules of {label} did not load "
            f"({count_text(len(e.problems), 'problem')} above)",
            file=stderr,
        )
        raise _Refused from None
    except IntervalError as e:
        print(f"accel-autoscaler: error: {label}: {e}", file=stderr)
        raise _Refused from None
    return RuleText.read(paths)


def _arms(args: argparse.Namespace, scenario: Scenario, stderr: TextIO) -> list[Arm]:
    if args.compare:
        return [
            Arm(key, path, _checked(f"{key} ({path})", [path], scenario, stderr))
            for key, path in zip(("A", "B"), args.compare, strict=True)
        ]
    if args.rules:
        rules = list(args.rules)
    else:
        try:
            rules = [default_rules(Path.cwd(), stderr)]
        except NoRulesError as e:
            print(f"accel-autoscaler: error: {e}", file=stderr)
            raise _Refused from None
    text = _checked(", ".join(rules), rules, scenario, stderr)
    if args.compare_scheduler:
        return [
            Arm(key, name, text, scheduler=name)
            for key, name in zip(("A", "B"), args.compare_scheduler, strict=True)
        ]
    return [Arm("rules", ", ".join(rules), text)]


def _main_seeds(args: argparse.Namespace, scenario: Scenario, stderr: TextIO) -> int:
    """``--seeds N``, alone or with a comparison: the runs, the table and the JSON."""
    first = scenario.seed if args.seed is None else args.seed
    seeds = list(range(first, first + (args.seeds or 1)))
    try:
        arms = _arms(args, scenario, stderr)
    except _Refused:
        return 2
    comparing = len(arms) == 2
    tasks = make_tasks(scenario, arms, seeds, baseline=not comparing and args.baseline != "skip")

    def report(done: Done, k: int, total: int) -> None:
        t = done.task
        arm = t.arm.label if t.arm.key == "rules" else f"{t.arm.key} ({t.arm.label})"
        print(f"seed {t.seed}, {arm}: {done.wall_seconds:.1f} s ({k}/{total})", file=stderr)

    logging.getLogger("accel_autoscaler").setLevel(logging.WARNING)
    where = f"Ray ({args.ray_address})" if args.ray_address else "local processes"
    print(f"{len(tasks)} runs on {where}", file=stderr)
    try:
        done = run_seeds(tasks, jobs=args.jobs, ray_address=args.ray_address, report=report)
    except SeedRunError as e:
        print(f"accel-autoscaler: error: {e}", file=stderr)
        return 1
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    print(f"{scenario.name}: {scenario.duration / 3600:g} h simulated per run, {seed_text(seeds)}")
    print(method(len(seeds)))
    if comparing:
        grouped = list(by_arm(done, arms))
        print(compare_table(grouped))
        doc, path = compare_doc(scenario.name, seeds, grouped), out / "compare.json"
    else:
        print(seeds_table(done))
        doc, path = seeds_doc(scenario.name, seeds, done), out / "seeds.json"
    path.write_text(json.dumps(doc, indent=2) + "\n")
    if not args.no_plots:
        plot = write_spread(doc, scenario.name, out)
        print(f"plot: {plot}")
    print(f"{path.stem}: {path}")
    return 0
