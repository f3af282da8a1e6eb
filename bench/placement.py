"""First-fit against the placement scorer, on the same simulated fleet and jobs.

``python -m bench.placement scenarios/placement.yaml [--seeds N]``
runs the scenario twice through the fleet simulator with static pools and no rules, once
per scheduler and with the same seed (the simulator draws arrivals, jobs and faults
from their own random streams, so both runs see the same jobs), and prints job
throughput, mean job completion time, queue wait, the mean topology slowdown of
multi-device jobs and the mean run-time factor (how long a job's first run takes
per unit of its nominal run time: the device model's speed against its reference,
times the topology slowdown) side by side. Remediation is left out on purpose:
this measures placement alone.

With several seeds the outcomes are pooled (counts add up, times are pooled), and
the per-seed throughput ratios are summarised too (median, range, how many seeds
the scorer came out ahead), because a pooled figure can hide a split.

Completion times are read by watching the jobs every ``--watch`` seconds of
simulated time (30 s), the same in both runs, so a job's completion time is known
to within that step.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import math
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field

from autoscaler.simulate.fleet import Fleet
from autoscaler.simulate.scenario import Scenario, ScenarioError, load_scenario
from autoscaler.simulate.schedulers import SCHEDULERS

SCHEDULER_NAMES: tuple[str, ...] = ("first-fit", "placement")


@dataclass
class Outcome:
    scheduler: str
    hours: float
    submitted: int = 0
    completed: int = 0
    completion: list[float] = field(default_factory=list)  # seconds, completed jobs
    queue_wait: list[float] = field(default_factory=list)
    slowdown: list[float] = field(default_factory=list)  # multi-device jobs, first run
    factor: list[float] = field(default_factory=list)  # every job, first run

    @property
    def throughput(self) -> float:
        return self.completed / self.hours


async def run_one(scenario: Scenario, scheduler: str, seed: int, watch: float) -> Outcome:
    fleet = Fleet(
        dataclasses.replace(scenario, scheduler=scheduler),
        SCHEDULERS[scheduler](),
        static_pools=True,
        seed=seed,
    )
    out = Outcome(scheduler, scenario.duration / 3600.0)
    seen_running: set[str] = set()
    seen_done: set[str] = set()

    def look() -> None:
        for job in fleet.jobs.values():
            if job.state == "running" and job.name not in seen_running:
                seen_running.add(job.name)
                out.factor.append(job.factor)
                if job.size > 1:
                    out.slowdown.append(job.links)
            if job.state == "done" and job.name not in seen_done:
                seen_done.add(job.name)
                out.completion.append(fleet.now - job.submitted)

    fleet.every(watch, look)
    await fleet.run()
    look()
    out.submitted = fleet.stats.submitted
    out.completed = fleet.stats.completed
    out.queue_wait = list(fleet.stats.queue_wait)
    return out


def _mean(values: Sequence[float]) -> float:
    return statistics.fmean(values) if values else float("nan")


def _p(values: Sequence[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def rows(a: Outcome, b: Outcome) -> list[tuple[str, float, float]]:
    return [
        ("jobs submitted", a.submitted, b.submitted),
        ("jobs completed", a.completed, b.completed),
        ("throughput (jobs/h)", a.throughput, b.throughput),
        ("mean job completion time (h)", _mean(a.completion) / 3600, _mean(b.completion) / 3600),
        ("mean queue wait (min)", _mean(a.queue_wait) / 60, _mean(b.queue_wait) / 60),
        ("p95 queue wait (min)", _p(a.queue_wait, 0.95) / 60, _p(b.queue_wait, 0.95) / 60),
        ("mean slowdown, multi-device jobs", _mean(a.slowdown), _mean(b.slowdown)),
        ("mean run-time factor, all jobs", _mean(a.factor), _mean(b.factor)),
    ]


def _num(x: float) -> str:
    return f"{x:,.3f}".rstrip("0").rstrip(".")


def table(a: Outcome, b: Outcome) -> str:
    head = ("", a.scheduler, b.scheduler, f"{b.scheduler}/{a.scheduler}")
    body = []
    for name, x, y in rows(a, b):
        ratio = f"{y / x:.3f}" if x else "-"
        body.append(
            (name, f"{x:,.3f}".rstrip("0").rstrip("."), f"{y:,.3f}".rstrip("0").rstrip("."), ratio)
        )
    lines = [head, *body]
    widths = [max(len(r[i]) for r in lines) for i in range(4)]
    return "\n".join(
        "  ".join(
            v.ljust(w) if i == 0 else v.rjust(w)
            for i, (v, w) in enumerate(zip(r, widths, strict=True))
        )
        for r in lines
    )


def compare_seeds(
    scenario: Scenario, seeds: Sequence[int], watch: float = 30.0
) -> list[tuple[Outcome, Outcome]]:
    """Both schedulers on each seed: (first-fit, placement) per seed."""
    return [
        (
            asyncio.run(run_one(scenario, SCHEDULER_NAMES[0], seed, watch)),
            asyncio.run(run_one(scenario, SCHEDULER_NAMES[1], seed, watch)),
        )
        for seed in seeds
    ]


def pooled(outcomes: Sequence[Outcome]) -> Outcome:
    """One outcome from several runs of one scheduler: counts add up, times are
    pooled before averaging."""
    total = Outcome(outcomes[0].scheduler, 0.0)
    for one in outcomes:
        total.hours += one.hours
        total.submitted += one.submitted
        total.completed += one.completed
        total.completion += one.completion
        total.queue_wait += one.queue_wait
        total.slowdown += one.slowdown
        total.factor += one.factor
    return total


def compare(
    scenario: Scenario, seeds: Sequence[int], watch: float = 30.0
) -> tuple[Outcome, Outcome]:
    """Both schedulers over the same seeds, pooled into one outcome each."""
    runs = compare_seeds(scenario, seeds, watch)
    return pooled([a for a, _ in runs]), pooled([b for _, b in runs])


def per_seed(runs: Sequence[tuple[Outcome, Outcome]], seeds: Sequence[int]) -> str:
    """The throughput ratio (placement / first-fit) of each seed, and their median."""
    ratios = [b.completed / a.completed if a.completed else math.nan for a, b in runs]
    each = ", ".join(f"{s}: {r:.3f}" for s, r in zip(seeds, ratios, strict=True))
    ahead = sum(1 for a, b in runs if b.completed > a.completed)
    behind = sum(1 for a, b in runs if b.completed < a.completed)
    return (
        f"throughput ratio per seed ({each}); median {statistics.median(ratios):.3f}, "
        f"range {min(ratios):.3f}-{max(ratios):.3f}; "
        f"{SCHEDULER_NAMES[1]} ahead on {ahead}, behind on {behind} of {len(runs)} seeds"
    )


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m bench.placement",
        description="first-fit against the placement scorer on one simulated scenario",
    )
    p.add_argument("scenario", metavar="SCENARIO.yaml")
    p.add_argument("--seed", type=int, help="overrides the scenario's seed")
    p.add_argument(
        "--seeds", type=int, default=1, metavar="N", help="N seeds from the first, pooled"
    )
    p.add_argument("--watch", type=float, default=30.0, metavar="SECONDS")
    args = p.parse_args(argv)
    try:
        scenario = load_scenario(args.scenario, SCHEDULER_NAMES)
    except ScenarioError as e:
        print(e, file=sys.stderr)
        return 2
    if args.seeds < 1:
        print("--seeds must be at least 1", file=sys.stderr)
        return 2
    seed = scenario.seed if args.seed is None else args.seed
    seeds = list(range(seed, seed + args.seeds))
    runs = compare_seeds(scenario, seeds, args.watch)
    a, b = pooled([x for x, _ in runs]), pooled([y for _, y in runs])
    hours = scenario.duration / 3600
    which = f"seed {seed}" if len(seeds) == 1 else f"seeds {seeds[0]}-{seeds[-1]} pooled"
    print(f"{scenario.name}: {hours:g} h simulated per run, {which}, static pools, no rules")
    print(table(a, b))
    if len(seeds) > 1:
        print(per_seed(runs, seeds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
