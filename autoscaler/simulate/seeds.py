"""One scenario over many seeds, and two arms (rule sets or schedulers) over the
same seeds: the runs, spread over local processes or a Ray cluster, and what they
yield (each run's ``summary.json`` document).

A run is a ``Task``: the scenario, the rules as text, one seed, one arm. It
carries the rule files' contents rather than their paths, and the scenario's
alerting-rule file too where the scenario reads one, so that a worker on another
machine (a Ray cluster's node) needs only accel-fleet installed, not this
checkout. The worker writes them into a temporary folder, in the order given,
and runs ``simulate`` there; the rules were already loaded and checked once
here, with their own paths in any message.

Local runs go to a ``ProcessPoolExecutor`` (one process per run at a time, at
most ``jobs``); each worker runs the rules and then the baseline in turn
(``simulate(parallel=False)``), since the pool already keeps every core busy.
With ``ray_address``, the same task function is a Ray remote task; Ray is
imported only then.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autoscaler.ruleset.files import rule_files
from autoscaler.simulate.results import summary
from autoscaler.simulate.run import simulate
from autoscaler.simulate.scenario import Scenario

RAY_HINT = "pip install 'accel-fleet[ray]'"


class SeedRunError(RuntimeError):
    """A run failed in its worker; the message says which run and why."""


@dataclass(frozen=True)
class RuleText:
    """The rule files of one arm, as (file name, text) in load order."""

    files: tuple[tuple[str, str], ...]

    @staticmethod
    def read(paths: Sequence[str]) -> RuleText:
        """The files ``paths`` name (a folder's ``*.yaml`` as the loader reads
        them). The caller has loaded the rules already, so every path exists."""
        files, _ = rule_files(paths)
        return RuleText(tuple((Path(f).name, Path(f).read_text()) for f in files))

    def write(self, folder: Path) -> str:
        """Writes the files into ``folder`` (numbered, so that two files of the
        same name from two folders stay apart and the order holds)."""
        for i, (name, text) in enumerate(self.files):
            (folder / f"{i:03d}-{name}").write_text(text)
        return str(folder)


@dataclass(frozen=True)
class Arm:
    """One side of a comparison (or the only one): its key (``A``, ``B``, or
    ``rules`` alone), a label for the output, its rules, and the scheduler it runs
    with (None: the scenario's)."""

    key: str
    label: str
    rules: RuleText
    scheduler: str | None = None


@dataclass(frozen=True)
class Task:
    scenario: Scenario
    arm: Arm
    seed: int
    baseline: bool
    # The scenario's alerting-rule file, where it reads one (source: alertmanager).
    alert_rules: str | None = None


@dataclass(frozen=True)
class Done:
    """A finished run: its summary document, and how long its worker took."""

    task: Task
    doc: dict[str, Any]
    wall_seconds: float


def make_tasks(
    scenario: Scenario, arms: Sequence[Arm], seeds: Sequence[int], baseline: bool
) -> list[Task]:
    """A task per seed and arm, seed-major (both arms of a seed are next to each
    other, so a comparison that stops early has whole pairs)."""
    alert_rules = None
    if scenario.telemetry.source == "alertmanager":
        alert_rules = Path(scenario.telemetry.alert_rules).read_text()
    return [Task(scenario, arm, seed, baseline, alert_rules) for seed in seeds for arm in arms]


def run_task(task: Task) -> Done:
    """One run, in a worker: the rules (and the baseline) on one seed."""
    logging.getLogger("accel_autoscaler").setLevel(logging.WARNING)
    start = time.perf_counter()
    scenario = task.scenario
    if task.arm.scheduler is not None:
        scenario = dataclasses.replace(scenario, scheduler=task.arm.scheduler)
    try:
        with tempfile.TemporaryDirectory(prefix="accel-seeds-") as tmp:
            folder = Path(tmp)
            rules_dir = folder / "rules"
            rules_dir.mkdir()
            rules = task.arm.rules.write(rules_dir)
            if task.alert_rules is not None:
                alerts = folder / "alert-rules.yaml"
                alerts.write_text(task.alert_rules)
                telemetry = dataclasses.replace(scenario.telemetry, alert_rules=str(alerts))
                scenario = dataclasses.replace(scenario, telemetry=telemetry)
            results = simulate(
                scenario, [rules], seed=task.seed, baseline=task.baseline, parallel=False
            )
    except Exception as e:
        # Said as text: an exception with its own constructor need not survive
        # the trip back from a process or a Ray worker.
        raise SeedRunError(
            f"seed {task.seed} ({task.arm.label}): {type(e).__name__}: {e}"
        ) from None
    return Done(task, summary(results, scenario, task.seed), time.perf_counter() - start)


Report = Callable[[Done, int, int], None]


def run_local(tasks: Sequence[Task], jobs: int, report: Report | None = None) -> list[Done]:
    """The tasks in at most ``jobs`` local processes; results in task order."""
    out: dict[int, Done] = {}
    with ProcessPoolExecutor(max_workers=min(jobs, len(tasks))) as pool:
        pending: dict[Future[Done], int] = {
            pool.submit(run_task, t): i for i, t in enumerate(tasks)
        }
        try:
            while pending:
                finished, _ = wait(pending, return_when=FIRST_COMPLETED)
                for future in finished:
                    i = pending.pop(future)
                    out[i] = future.result()
                    if report is not None:
                        report(out[i], len(out), len(tasks))
        except BaseException:
            for future in pending:
                future.cancel()
            raise
    return [out[i] for i in range(len(tasks))]


def import_ray() -> Any:
    """Ray, imported now and only now; a clear error where it is missing."""
    try:
        import ray
    except ImportError as e:
        raise SeedRunError(
            f"--ray-address needs Ray, which is not installed ({e}): {RAY_HINT}"
        ) from None
    except Exception as e:
        # Ray 2.56 and later import amdsmi at start and fail on a machine that
        # has the amdsmi package (accel-fleet[amd]) without ROCm's library.
        raise SeedRunError(
            f"importing Ray failed ({type(e).__name__}: {e}); {RAY_HINT} installs a "
            "version that starts here"
        ) from None
    return ray


def ray_init_args(address: str, jobs: int) -> dict[str, Any]:
    """``ray.init``'s arguments: ``local`` starts a Ray instance on this machine
    with ``jobs`` CPUs; ``auto`` joins the cluster this machine is part of; any
    other address (``ray://head:10001``, ``head:6379``) connects to that cluster."""
    quiet = {"log_to_driver": False, "configure_logging": False}
    if address == "local":
        return {"num_cpus": jobs, "include_dashboard": False, **quiet}
    return {"address": address, **quiet}


def run_ray(
    tasks: Sequence[Task], address: str, jobs: int, report: Report | None = None
) -> list[Done]:
    """The tasks as Ray remote tasks (one CPU each); results in task order.
    A Ray instance this call started (``local``, or any address while none was
    connected) is shut down after."""
    ray = import_ray()
    started = not ray.is_initialized()
    if started:
        with warnings.catch_warnings():
            # Ray's note about a future default for accelerator variables: these
            # tasks ask for no accelerator.
            warnings.simplefilter("ignore", FutureWarning)
            ray.init(**ray_init_args(address, jobs))
    try:
        remote = ray.remote(num_cpus=1, max_retries=0)(run_task)
        refs = [remote.remote(t) for t in tasks]
        index = {ref: i for i, ref in enumerate(refs)}
        out: dict[int, Done] = {}
        waiting = list(refs)
        while waiting:
            ready, waiting = ray.wait(waiting, num_returns=1)
            for ref in ready:
                i = index[ref]
                out[i] = _ray_get(ray, ref)
                if report is not None:
                    report(out[i], len(out), len(tasks))
        return [out[i] for i in range(len(tasks))]
    finally:
        if started:
            ray.shutdown()


def _ray_get(ray: Any, ref: Any) -> Done:
    """A task's result; a failed task's ``SeedRunError`` as itself rather than
    wrapped in Ray's ``RayTaskError``."""
    try:
        done: Done = ray.get(ref)
    except ray.exceptions.RayTaskError as e:
        cause = e.as_instanceof_cause()
        if isinstance(cause, SeedRunError):
            raise SeedRunError(str(cause.args[0]) if cause.args else str(cause)) from None
        raise SeedRunError(str(e)) from None
    return done


def run(
    tasks: Sequence[Task],
    *,
    jobs: int | None = None,
    ray_address: str | None = None,
    report: Report | None = None,
) -> list[Done]:
    """The tasks, locally in processes or (with ``ray_address``) on Ray."""
    jobs = jobs or os.cpu_count() or 1
    if ray_address is not None:
        return run_ray(tasks, ray_address, jobs, report)
    return run_local(tasks, jobs, report)


def by_arm(done: Sequence[Done], arms: Sequence[Arm]) -> Iterator[tuple[Arm, list[Done]]]:
    """The finished runs of each arm, in seed order."""
    for arm in arms:
        mine = (d for d in done if d.task.arm.key == arm.key)
        yield arm, sorted(mine, key=lambda d: d.task.seed)


__all__ = [
    "RAY_HINT",
    "Arm",
    "Done",
    "RuleText",
    "SeedRunError",
    "Task",
    "by_arm",
    "import_ray",
    "make_tasks",
    "run",
    "run_local",
    "run_ray",
    "run_task",
]
