"""Three teams under Kueue: per-team queue wait and work done with the shipped pool
rules, which read the Workloads Kueue holds back, against the same rules reading
pending pods only, and against no rules at all.

    .venv/bin/python bench/kueue_teams.py [--scenario scenarios/kueue-teams.yaml]
        [--seeds 8] [--first-seed N] [--jobs J] [--write-rules DIR] [--json FILE]

The arms, on the same seeds (paired: same arrivals, jobs and faults per seed):

* **shipped**: ``rules/remediation.yaml`` as it is. ``pool-scale-up`` adds the
  devices of suspended Workloads that fit their quota
  (``accel_pool_queued_device_requests``) to the pending pods' devices, and
  ``pool-scale-down`` keeps a pool that such Workloads wait for.
* **pods-only**: the same file with every line of those two rules' expressions
  that reads ``accel_pool_queued_device_requests`` taken out, derived here at run
  time so that it never drifts from the shipped rules: the pool rules as they were
  before Kueue-aware scaling, seeing a Kueue job only once it is admitted and has
  pods. ``--write-rules DIR`` writes it, for ``accel-autoscaler simulate SCENARIO
  --seeds 8 --compare DIR/pods-only rules`` by hand (the same comparison).
* **no rules**: the simulator's baseline (pools stay at their initial size).

Printed: per ClusterQueue, the queue wait (submission to first admission) p50 and
p95, the work its jobs kept (device-hours), their goodput, the mean share of its
nominal quota in use, jobs completed and evictions, each
the mean over the seeds, and the paired difference shipped - pods-only with its
95% interval (``*`` where it excludes 0). The machine's noise does not enter: the
figures are simulated time.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from autoscaler.ruleset.loader import load_ruleset  # noqa: E402
from autoscaler.simulate import seeds as runs  # noqa: E402
from autoscaler.simulate.scenario import load_scenario  # noqa: E402
from autoscaler.simulate.seedreport import comparison, num  # noqa: E402
from autoscaler.simulate.stats import Interval, across, figures  # noqa: E402

SHIPPED = ROOT / "rules" / "remediation.yaml"
QUEUED = "accel_pool_queued_device_requests"
POOL_RULES = ("pool-scale-up", "pool-scale-down")
COLUMNS = (
    ("wait_p50_seconds", "wait p50 s"),
    ("wait_p95_seconds", "wait p95 s"),
    ("device_hours_useful", "device-h kept"),
    ("goodput_ratio", "goodput"),
    ("quota_used_ratio", "quota used"),
    ("jobs_completed", "completed"),
    ("evictions", "evictions"),
)


class DerivationError(RuntimeError):
    """The shipped rules no longer look as this bench expects."""


def pods_only(text: str) -> str:
    """The shipped rule file with the queued-Workload lines taken out of the pool
    rules' expressions (module docstring)."""
    lines = text.splitlines(keepends=True)
    out: list[str] = []
    rule = ""
    in_expr = False
    expr_indent = 0
    dropped: dict[str, int] = dict.fromkeys(POOL_RULES, 0)
    for line in lines:
        stripped = line.strip()
        indent = len(line) - len(line.lstrip())
        if stripped.startswith("- name:"):
            rule = stripped.split(":", 1)[1].strip()
            in_expr = False
        elif stripped.startswith("expr:"):
            in_expr, expr_indent = True, indent
        elif in_expr and stripped and indent <= expr_indent:
            in_expr = False
        if in_expr and rule in POOL_RULES and QUEUED in line:
            dropped[rule] += 1
            continue
        out.append(line)
    missing = [r for r, n in dropped.items() if n == 0]
    if missing:
        raise DerivationError(
            f"{SHIPPED.name}: rule {missing[0]} reads no {QUEUED} any more; "
            "update bench/kueue_teams.py's derivation"
        )
    return "".join(out)


def write_pods_only(folder: Path) -> Path:
    """Writes the pods-only rule file into ``folder``/pods-only and checks it loads."""
    target = folder / "pods-only"
    target.mkdir(parents=True, exist_ok=True)
    path = target / SHIPPED.name
    path.write_text(pods_only(SHIPPED.read_text()))
    ruleset = load_ruleset([str(target)], source="scrape")
    for rule in ruleset.rules:
        if rule.name in POOL_RULES and QUEUED in (rule.expr or ""):
            raise DerivationError(f"{rule.name} still reads {QUEUED}")
    return target


def _cell(i: Interval | None) -> str:
    return "-" if i is None else num(i.mean)


def _diff(i: Interval | None) -> str:
    if i is None:
        return "-"
    if i.half is None:
        return num(i.mean, sign=True)
    mark = " *" if i.significant else ""
    low, high = num(i.mean - i.half, sign=True), num(i.mean + i.half, sign=True)
    return f"{num(i.mean, sign=True)} [{low}, {high}]{mark}"


def team_table(
    queues: list[str],
    none: dict[str, Interval],
    pods: dict[str, Interval],
    shipped: dict[str, Interval],
    diff: dict[str, Interval],
) -> str:
    header = ["team", "figure", "no rules", "pods-only", "shipped", "shipped - pods-only [95%]"]
    rows = [header]
    for q in queues:
        for key, label in COLUMNS:
            name = f"kueue.{q}.{key}"
            rows.append(
                [
                    q,
                    label,
                    _cell(none.get(name)),
                    _cell(pods.get(name)),
                    _cell(shipped.get(name)),
                    _diff(diff.get(name)),
                ]
            )
    for name, label in (("jobs_completed", "completed"), ("node_hours", "node-hours")):
        rows.append(
            [
                "all",
                label,
                _cell(none.get(name)),
                _cell(pods.get(name)),
                _cell(shipped.get(name)),
                _diff(diff.get(name)),
            ]
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    return "\n".join(
        "  ".join(
            c.ljust(w) if i < 2 else c.rjust(w)
            for i, (c, w) in enumerate(zip(r, widths, strict=True))
        ).rstrip()
        for r in rows
    )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--scenario", default=str(ROOT / "scenarios" / "kueue-teams.yaml"))
    p.add_argument("--seeds", type=int, default=8)
    p.add_argument("--first-seed", type=int, default=None)
    p.add_argument("--jobs", type=int, default=None, help="runs at once (default: CPUs)")
    p.add_argument("--write-rules", default=None, metavar="DIR")
    p.add_argument("--json", default=None, metavar="FILE")
    args = p.parse_args()
    if args.seeds < 2:
        p.error("--seeds must be at least 2 (a paired interval needs two)")
    scenario = load_scenario(args.scenario)
    if scenario.kueue is None:
        p.error(f"{args.scenario} has no kueue section")
    first = scenario.seed if args.first_seed is None else args.first_seed
    seeds = list(range(first, first + args.seeds))
    with tempfile.TemporaryDirectory(prefix="kueue-teams-") as tmp:
        folder = Path(args.write_rules) if args.write_rules else Path(tmp)
        derived = write_pods_only(folder)
        arm_a = runs.Arm("A", "pods-only", runs.RuleText.read([str(derived)]))
        arm_b = runs.Arm("B", "shipped", runs.RuleText.read([str(SHIPPED)]))
        tasks = runs.make_tasks(scenario, [arm_a, arm_b], seeds, baseline=True)
        done = runs.run(tasks, jobs=args.jobs)
    arms = list(runs.by_arm(done, [arm_a, arm_b]))
    pods, shipped, diff = comparison(arms)
    none = across([figures(d.doc["baseline"]) for d in arms[0][1]])
    queues = [cq.name for cq in scenario.kueue.cluster_queues]
    print(f"{scenario.name}: {len(seeds)} seeds ({seeds[0]}..{seeds[-1]}), paired; means")
    print(team_table(queues, none, pods, shipped, diff))
    if args.json:
        doc: dict[str, Any] = {
            "scenario": scenario.name,
            "seeds": seeds,
            "no_rules": {k: i.as_json() for k, i in none.items()},
            "pods_only": {k: i.as_json() for k, i in pods.items()},
            "shipped": {k: i.as_json() for k, i in shipped.items()},
            "difference": {
                k: {**i.as_json(), "significant": i.significant} for k, i in diff.items()
            },
        }
        Path(args.json).write_text(json.dumps(doc, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
