"""Wall time of the fleet simulator on a large scenario: by default the 1,000-node,
8-device, 7-day mixed fleet; ``--scenario scenarios/llama3.yaml`` the Llama-3-like
training fleet (2,048 nodes x 8 H100, gang jobs).

    .venv/bin/python bench/simulate.py [SCENARIO | --scenario SCENARIO] [--rules DIR]
        [--duration 12h] [--repeat 3] [--profile FILE] [--memory]

Runs the scenario with the shipped rules and the baseline, as ``accel-autoscaler
simulate`` does (no plots), and prints each run's wall time, the total, what was
simulated (evaluation cycles, jobs, faults, actions) and the side-by-side table.
``--repeat N`` runs it N times and reports the median wall time of the rules run
(the figures are the same every time: one seed). ``--duration`` overrides the
scenario's. ``--profile FILE`` runs the rules run alone under cProfile, writes the
profile to FILE and prints its top entries by own time. ``--memory`` runs the rules
run alone and prints the process's peak RSS and what the store holds at the end:
samples, the bytes of its sample arrays and bytes per sample (Prometheus's
compressed chunks take about 1.3).

The budgets on the development machine (2 cores): 60 s for both runs of
``fleet-1000.yaml`` together, 120 s for the rules run of ``llama3.yaml``.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import dataclasses
import pstats
import resource
import statistics
import sys
import time
from pathlib import Path
from typing import ClassVar

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from accel_common.durations import parse_duration  # noqa: E402
from autoscaler.promql.store import SeriesStore  # noqa: E402
from autoscaler.simulate import run as sim  # noqa: E402
from autoscaler.simulate.results import summary, table  # noqa: E402
from autoscaler.simulate.scenario import Scenario, load_scenario  # noqa: E402

BUDGETS = {"fleet-1000": ("both runs", 60.0), "llama3": ("the rules run", 120.0)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("scenario", nargs="?", default=None)
    p.add_argument("--scenario", dest="scenario_flag", default=None, metavar="SCENARIO")
    p.add_argument("--rules", action="append", default=None)
    p.add_argument("--duration", default=None, help="override the scenario's (e.g. 12h)")
    p.add_argument("--repeat", type=int, default=1, help="runs; the median wall time counts")
    p.add_argument("--profile", default=None, metavar="FILE")
    p.add_argument("--memory", action="store_true", help="peak RSS and bytes per sample")
    args = p.parse_args()
    path = args.scenario_flag or args.scenario or str(ROOT / "scenarios" / "fleet-1000.yaml")
    scenario = load_scenario(path)
    if args.duration:
        scenario = dataclasses.replace(scenario, duration=parse_duration(args.duration))
    rules = args.rules or [str(ROOT / "rules")]
    devices = sum(pool.initial * pool.devices_per_node for pool in scenario.pools)
    nodes = sum(pool.initial for pool in scenario.pools)
    print(
        f"{scenario.name}: {nodes} nodes, {devices} devices, "
        f"{scenario.duration / 86400:g} days, evaluation every "
        f"{scenario.evaluation_interval:g}s",
        flush=True,
    )
    if args.profile:
        profile = cProfile.Profile()
        start = time.perf_counter()
        profile.enable()
        asyncio.run(sim._run_rules(scenario, rules, scenario.seed, None))
        profile.disable()
        print(f"rules run under cProfile: {time.perf_counter() - start:.1f} s")
        profile.dump_stats(args.profile)
        pstats.Stats(profile).sort_stats("tottime").print_stats(25)
        return 0
    if args.memory:
        return _memory(scenario, rules)
    walls: list[float] = []
    totals: list[float] = []
    for _ in range(max(1, args.repeat)):
        start = time.perf_counter()
        results = sim.simulate(scenario, rules)
        totals.append(time.perf_counter() - start)
        walls.append(results["rules"].wall_seconds)
    rules_run, base = results["rules"], results["baseline"]
    print(table(summary(results, scenario, scenario.seed)))
    print()
    print(f"evaluation cycles (rules run)  {rules_run.cycles:,}")
    print(f"faults                         {rules_run.stats.faults_total:,}")
    print(f"wall, rules run                {statistics.median(walls):7.1f} s (median of "
          f"{len(walls)}: {', '.join(f'{w:.1f}' for w in walls)})")  # fmt: skip
    print(f"wall, baseline run             {base.wall_seconds:7.1f} s")
    what, budget = BUDGETS.get(scenario.name, ("both runs", 60.0))
    print(
        f"wall, total (with setup)       {statistics.median(totals):7.1f} s   "
        f"budget {budget:g} s for {what}"
    )
    return 0


class _KeptStore(SeriesStore):
    """A store that the benchmark can read after the run that made it."""

    made: ClassVar[list[SeriesStore]] = []

    def __init__(self, retention: float = 3600.0) -> None:
        super().__init__(retention)
        _KeptStore.made.append(self)


def _memory(scenario: Scenario, rules: list[str]) -> int:
    """The rules run alone; its peak RSS and its store's bytes per sample."""
    sim.SeriesStore = _KeptStore  # type: ignore[attr-defined]  # what the run makes its store of
    start = time.perf_counter()
    asyncio.run(sim._run_rules(scenario, rules, scenario.seed, None))
    wall = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB
    store = max(_KeptStore.made, key=lambda s: s.series_count)
    f = store.footprint()
    samples = max(f["samples"], 1)
    print(f"rules run                      {wall:7.1f} s")
    print(f"peak RSS                       {peak / 2**30:7.2f} GiB")
    print(f"series / samples at the end    {f['series']:,} / {f['samples']:,}")
    print(
        f"sample arrays                  {f['bytes'] / 2**20:,.0f} MiB in the rows in use "
        f"({f['bytes'] / samples:.1f} bytes/sample), {f['allocated'] / 2**20:,.0f} MiB "
        f"allocated ({f['allocated'] / samples:.1f}); Prometheus about 1.3"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
