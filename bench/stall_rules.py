"""What the stall rules on a job's learned rhythm cost per evaluation, beside the
stall rules they replaced, over the Llama-3-like fleet's own store.

    .venv/bin/python bench/stall_rules.py [--scenario scenarios/llama3.yaml]
        [--at 2h] [--instants 5] [--old-ref 26ef636] [--json FILE]

What is measured
----------------
* **Old**: one evaluation of the three stall rules (``stalled-gang``,
  ``stalled-pod``, ``stalled-job``) as they were at ``--old-ref`` (read with
  ``git show REF:rules/remediation.yaml``; ``--old-rules FILE`` instead).
* **New**: one evaluation of the same three rules as ``rules/`` ships them, plus
  the rhythm learner's work of one cycle (``autoscaler.rhythm.learn``: its
  queries, in a cycle where some job is idle its host-traffic queries, the
  observation and the rows written back into the store), on a copy of the
  learner so that the simulation's own is not disturbed; and, apart, the three
  detection rules issue 31 added (``hung-collective``, ``lost-node``,
  ``stalled-progress``), so that all of issue 31's work is set against the
  stall rules it started from.

The store is the simulator's: the scenario (16,384 H100 in gangs, 1-minute scrapes
and evaluations, by default) is run with the shipped rules up to ``--at`` (so that
the jobs have a rhythm and the rhythm series exist), and at each of the next
``--instants`` evaluations both sets are timed through the simulation's source
(``Evaluator.instant`` underneath), the old first at even instants and the new
first at odd ones, each from a cold start: the evaluator's per-time results and
the store's window searches are dropped before each set (a new scrape drops them
in a real cycle), so a set shares only among its own queries, the learner's with
the rules' as in ``run_cycle``.
Figures: the median over the instants of each, and their ratio. One process, one
thread, on whatever else the machine is doing: read the ratio, not the absolutes.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import dataclasses
import gc
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from accel_common.durations import parse_duration  # noqa: E402
from autoscaler import rhythm  # noqa: E402
from autoscaler.simulate import run as sim  # noqa: E402
from autoscaler.simulate.scenario import load_scenario  # noqa: E402
from autoscaler.sources.base import Source  # noqa: E402

STALL_RULES = ("stalled-gang", "stalled-pod", "stalled-job")
# The detection rules issue 31 added beside them, timed with the new set.
DETECTION_RULES = ("hung-collective", "lost-node", "stalled-progress")


# How long the simulation's learner took to write its rows, by cycle time.
WRITES: dict[float, float] = {}


def _timed_write(write: Any) -> Any:
    def timed(self: rhythm.Rhythm, store: Any, now: float) -> None:
        start = time.perf_counter()
        write(self, store, now)
        WRITES[now] = time.perf_counter() - start

    return timed


class Done(Exception):
    """Stops the simulation once the instants are timed."""


def stall_exprs(text: str, where: str, names: tuple[str, ...] = STALL_RULES) -> dict[str, str]:
    """The expressions of the named rules (the three stall rules) in a rule file's text."""
    doc = yaml.safe_load(text)
    found = {r["name"]: r["expr"] for r in doc["spec"]["rules"] if "expr" in r}
    missing = [n for n in names if n not in found]
    if missing:
        raise SystemExit(f"{where}: no rule named {', '.join(missing)}")
    return {n: found[n] for n in names}


def old_rules(args: argparse.Namespace) -> dict[str, str]:
    if args.old_rules:
        return stall_exprs(Path(args.old_rules).read_text(), args.old_rules)
    ref = f"{args.old_ref}:rules/remediation.yaml"
    proc = subprocess.run(["git", "show", ref], cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"git show {ref}: {proc.stderr.strip()} (pass --old-rules FILE)")
    return stall_exprs(proc.stdout, ref)


def _cold(source: Source) -> None:
    """Forgets what the evaluator and the store keep between queries at one time
    (range results, selections, window searches), as a new scrape would, and
    collects garbage now rather than inside a timing: each set is timed as the
    first to ask at its instant, sharing only among its own queries."""
    store = getattr(source, "store", None)
    if store is not None:
        store.generation += 1
        for family in store.families.values():
            family._searches.clear()
    gc.collect()


async def _time_rules(
    source: Source, exprs: dict[str, str], now: float, *, cold: bool = True
) -> float:
    if cold:
        _cold(source)
    start = time.perf_counter()
    for expr in exprs.values():
        await source.query(expr, now)
    return time.perf_counter() - start


async def _time_new(
    source: Source, exprs: dict[str, str], more: dict[str, str], state: object, now: float
) -> tuple[float, float, float]:
    """(the learner's cycle, the new stall rules', the detection rules') at ``now``."""
    # A copy of the simulation's learner, its jobs and table deep, the store it
    # writes to (and whose symbols its mapped answers hold) shared. It does not
    # write: the simulation's learner wrote its rows at this time already (a store
    # takes one sample a series and time), and that write, timed in the cycle, is
    # added.
    real = rhythm.learner(state)
    store = getattr(source, "store", None)
    shared = {} if store is None else {id(store): store, id(store.symbols): store.symbols}
    mine = copy.deepcopy(real, shared)
    mine.write = lambda store, now: None  # type: ignore[method-assign]
    _cold(source)
    start = time.perf_counter()
    await rhythm.learn(mine, source, now)
    learned = time.perf_counter() - start + WRITES.pop(now, 0.0)
    rules = await _time_rules(source, exprs, now, cold=False)
    return learned, rules, await _time_rules(source, more, now, cold=False)


def measure(args: argparse.Namespace) -> dict[str, Any]:
    scenario = load_scenario(args.scenario)
    old = old_rules(args)
    shipped = (ROOT / "rules" / "remediation.yaml").read_text()
    new = stall_exprs(shipped, "rules/remediation.yaml")
    more = stall_exprs(shipped, "rules/remediation.yaml", DETECTION_RULES)
    at = parse_duration(args.at)
    scenario = dataclasses.replace(scenario, duration=at + (args.instants + 2) * 60.0)
    times: dict[str, list[float]] = {
        "old": [],
        "new": [],
        "rules": [],
        "learner": [],
        "detection": [],
        "all": [],
    }
    start: list[float] = []

    async def both(source: Source, state: object, now: float) -> None:
        learned, rules, detection = await _time_new(source, new, more, state, now)
        times["learner"].append(learned)
        times["rules"].append(rules)
        times["detection"].append(detection)
        times["new"].append(learned + rules)
        times["all"].append(learned + rules + detection)

    # The simulation's run_cycle, wrapped: the module's namespace is patched for
    # this run only (run.py calls it by name) and restored after.
    names = vars(sim)
    real_cycle = names["run_cycle"]

    async def cycle(
        ruleset: Any, source: Source, alerts: Any, state: Any, now: float, **kw: Any
    ) -> Any:
        result = await real_cycle(ruleset, source, alerts, state, now, **kw)
        if not start:
            start.append(now)
        if now - start[0] >= at:
            if len(times["old"]) % 2 == 0:
                times["old"].append(await _time_rules(source, old, now))
                await both(source, state, now)
            else:
                await both(source, state, now)
                times["old"].append(await _time_rules(source, old, now))
            if len(times["old"]) >= args.instants:
                raise Done
        return result

    names["run_cycle"] = cycle
    real_write = rhythm.Rhythm.write
    rhythm.Rhythm.write = _timed_write(real_write)  # type: ignore[method-assign]
    try:
        asyncio.run(sim._run_rules(scenario, [str(ROOT / "rules")], scenario.seed, None))
    except Done:
        pass
    finally:
        names["run_cycle"] = real_cycle
        rhythm.Rhythm.write = real_write  # type: ignore[method-assign]
    devices = sum(p.initial * p.devices_per_node for p in scenario.pools)
    med = {k: statistics.median(v) for k, v in times.items()}
    return {
        "scenario": args.scenario,
        "devices": devices,
        "at": args.at,
        "instants": len(times["old"]),
        "old_ref": args.old_rules or args.old_ref,
        "seconds": times,
        "median_seconds": med,
        "ratio_new_over_old": med["new"] / med["old"] if med["old"] > 0 else None,
        "ratio_rules_over_old": med["rules"] / med["old"] if med["old"] > 0 else None,
        "ratio_all_over_old": med["all"] / med["old"] if med["old"] > 0 else None,
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--scenario", default=str(ROOT / "scenarios" / "llama3.yaml"))
    p.add_argument("--at", default="2h", help="simulated time before the first instant")
    p.add_argument("--instants", type=int, default=9)
    # The last commit before issue 31's stall rules (its learner is there, unused).
    p.add_argument("--old-ref", default="26ef636")
    p.add_argument("--old-rules", default=None, metavar="FILE")
    p.add_argument("--json", default=None, metavar="FILE")
    args = p.parse_args()
    r = measure(args)
    med = r["median_seconds"]
    print(f"{r['scenario']}: {r['devices']:,} devices, {r['instants']} instants from {r['at']}")
    print(f"old stall rules ({r['old_ref']}): median {med['old'] * 1000:8.1f} ms")
    print(f"new stall rules + learner:        median {med['new'] * 1000:8.1f} ms")
    print(f"  the new stall rules alone:      median {med['rules'] * 1000:8.1f} ms")
    print(f"  the learner's cycle alone:      median {med['learner'] * 1000:8.1f} ms")
    print(f"the three detection rules ({', '.join(DETECTION_RULES)}):")
    print(f"                                  median {med['detection'] * 1000:8.1f} ms")
    print(f"all of issue 31's (stall + detection + learner): {med['all'] * 1000:8.1f} ms")
    print(
        f"ratio new / old: {r['ratio_new_over_old']:.2f} (the rules alone: "
        f"{r['ratio_rules_over_old']:.2f}; all of issue 31's: {r['ratio_all_over_old']:.2f})"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(r, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
