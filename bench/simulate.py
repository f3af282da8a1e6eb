"""Wall time of the fleet simulator on its 1,000-node, 8-device, 7-day scenario.

    .venv/bin/python bench/simulate.py [SCENARIO] [--rules DIR]

Runs the scenario with the shipped rules and the baseline, as ``accel-autoscaler
simulate`` does (no plots), and prints each run's wall time, the total, what was
simulated (evaluation cycles, jobs, faults, actions) and the side-by-side table.
The budget is 60 s for both runs together on the development machine.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from autoscaler.simulate.results import summary, table  # noqa: E402
from autoscaler.simulate.run import simulate  # noqa: E402
from autoscaler.simulate.scenario import load_scenario  # noqa: E402

BUDGET_SECONDS = 60.0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("scenario", nargs="?", default=str(ROOT / "scenarios" / "fleet-1000.yaml"))
    p.add_argument("--rules", action="append", default=None)
    args = p.parse_args()
    scenario = load_scenario(args.scenario)
    rules = args.rules or [str(ROOT / "rules")]
    devices = sum(pool.initial * pool.devices_per_node for pool in scenario.pools)
    nodes = sum(pool.initial for pool in scenario.pools)
    print(
        f"{scenario.name}: {nodes} nodes, {devices} devices, "
        f"{scenario.duration / 86400:g} days, evaluation every "
        f"{scenario.evaluation_interval:g}s",
        flush=True,
    )
    start = time.perf_counter()
    results = simulate(scenario, rules)
    total = time.perf_counter() - start
    rules_run, base = results["rules"], results["baseline"]
    print(table(summary(results, scenario, scenario.seed)))
    print()
    print(f"evaluation cycles (rules run)  {rules_run.cycles:,}")
    print(f"faults                         {rules_run.stats.faults_total:,}")
    print(f"wall, rules run                {rules_run.wall_seconds:7.1f} s")
    print(f"wall, baseline run             {base.wall_seconds:7.1f} s")
    print(f"wall, total (with setup)       {total:7.1f} s   budget {BUDGET_SECONDS:g} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
