"""How much work a scenario may ask for, and how a scenario over it is refused.

A scenario is input, and a typo (``initial: 100000000``, a ``duration`` of a
hundred years, ``arrivalsPerHour: .inf``) must not cost the machine its memory or
run for ever. So before anything is built (before a single node is named), the
scenario reader holds the work a scenario asks for against ``WorkLimits``:

* **devices**: what its pools may reach, ``max(initial, max) x devicesPerNode``,
  per pool and in all; every device is state in the fleet and series in the store;
* **evaluations**: ``duration`` over each interval at which something passes over
  the whole fleet: the controller's ``evaluationInterval`` (a cycle), and the
  telemetry's ``pollInterval``, ``scrapeInterval`` and ``ruleInterval``
  (``pipeline.py``: a scrape of every device, Prometheus's alerting rules over
  them); each is held against the limit on its own, at its own line. Polls are
  not simulated one by one (a scrape looks up the poll it returns), but polls that
  outnumber the limit are refused alike: a ``pollInterval`` of 1ms over a week is
  a typo;
* **jobs**: ``arrivalsPerHour x duration``, the jobs it expects, each kept for the
  summary;
* **faults**: the random fault rates x devices x duration.

A scenario over a limit is refused at the value that asks for it, with the amount,
the limit, what to change, and the flag of ``accel-autoscaler simulate`` that
raises the limit (``--max-devices`` and so on) for a machine that can afford more.
Fields with a natural bound (``devicesPerNode``, ``samples``, ``namespaces``) are
range-checked instead.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from yaml.nodes import MappingNode, Node

from accel_common.yamlread import Reader


@dataclass(frozen=True)
class WorkLimits:
    """The most work a scenario may ask for. The defaults leave room above the
    largest shipped scenario (``scenarios/fleet-1000.yaml``: 9,040 devices, 2,016
    evaluations, about 22,000 jobs) and keep a run to a few GiB: the store holds a
    couple of hours of every device's series, and every job is kept for the
    summary. Evaluations cost time, not memory."""

    devices: int = 20_000
    evaluations: int = 1_000_000
    jobs: int = 100_000
    faults: int = 100_000


WORK_LIMITS = WorkLimits()
# The flag of ``accel-autoscaler simulate`` that raises each limit.
LIMIT_FLAGS = {
    "devices": "--max-devices",
    "evaluations": "--max-evaluations",
    "jobs": "--max-jobs",
    "faults": "--max-faults",
}
# The most devices one node has (real ones have 4 to 16); the placement scheduler
# weighs every pair of a node's devices.
MAX_DEVICES_PER_NODE = 64
MAX_SAMPLES = 100_000
MAX_NAMESPACES = 1_000
MAX_ECC_BURST = 1_000_000
# Kueue in a scenario (scenario_kueue.py): ClusterQueues and LocalQueues (each is
# walked at every admission pass), and a quota in devices (queues.py's own bound).
MAX_CLUSTER_QUEUES = 64
MAX_LOCAL_QUEUES = 256
MAX_QUOTA = 1_000_000
# Kubernetes' own bound on backoffLimit and on a PDB's maxUnavailable (int32).
MAX_INT32 = 2**31 - 1


@dataclass(frozen=True)
class Ask:
    """An amount of work a scenario asks for: where, what asks for it, which limit
    it counts against, and what in the scenario would lower it."""

    node: Node
    what: str
    amount: float
    limit: str  # a WorkLimits field
    fix: str


def refuse(r: Reader, limits: WorkLimits, ask: Ask) -> bool:
    """Whether ``ask`` is over its limit; if so, the problem is recorded at its node
    (unless that value is already reported: the amount would be a default's)."""
    allowed: int = getattr(limits, ask.limit)
    if ask.amount <= allowed:
        return False
    if any(p.position == r.pos(ask.node) for p in r.problems):
        # The value is already reported as invalid: the amount is the default's.
        return False
    shown = f"{ask.amount:,.0f}" if ask.amount < 1e15 else f"{ask.amount:.3g}"
    r.problem(
        ask.node,
        f"{ask.what} is {shown} {ask.limit}, over the simulator's limit of {allowed:,} "
        f"{ask.limit}; {ask.fix}, or raise the limit with {LIMIT_FLAGS[ask.limit]}",
    )
    return True


def bounded(r: Reader, node: Node, what: str, low: int, high: int) -> int | None:
    """A whole number from ``low`` to ``high``; None with the problem recorded."""
    value = r.integer(node, what, low)
    if value is not None and value > high:
        r.problem(node, f"{what} must be at most {high:,}, got {value:,}")
        return None
    return value


@dataclass(frozen=True)
class Pass:
    """An interval at which the simulation passes over the whole fleet (the
    controller's evaluations, the exporters' polls, Prometheus's scrapes and rule
    evaluations): its key as the scenario spells it, its length, and the value node
    that set it (None: a default, reported at ``duration``)."""

    name: str
    interval: float
    node: Node | None


@dataclass(frozen=True)
class Work:
    """What a scenario asks for, as read: its duration, the passes over the fleet
    it asks for, each pool's devices at its largest, and its arrivals per hour."""

    duration: float
    passes: Sequence[Pass]
    pool_devices: Sequence[int]
    arrivals_per_hour: float

    @property
    def devices(self) -> int:
        return sum(self.pool_devices)


def check_work(
    r: Reader, limits: WorkLimits, spec: Mapping[str, Node], at: Node, work: Work
) -> bool:
    """Holds the devices in all, the evaluations and the jobs against ``limits``;
    False when one is over (a pool over the device limit alone is reported at the
    pool, by the reader of pools). ``spec``: the spec's entries, for positions."""
    ok = max(work.pool_devices, default=0) <= limits.devices
    asks = [
        Ask(
            p.node if p.node is not None else spec.get("duration", at),
            f"duration / {p.name} ({hours(work.duration)} every {p.interval:g}s)",
            work.duration / p.interval,
            "evaluations",
            f"shorten duration or lengthen {p.name}",
        )
        for p in work.passes
    ]
    asks += [
        Ask(
            _child(spec.get("workload", at), "arrivalsPerHour"),
            f"arrivalsPerHour x duration ({work.arrivals_per_hour:g} x {hours(work.duration)})",
            work.arrivals_per_hour * work.duration / 3600.0,
            "jobs",
            "lower arrivalsPerHour or shorten duration",
        ),
    ]
    if ok:
        asks.insert(
            0,
            Ask(
                spec.get("pools", at),
                "the pools' devices in all",
                work.devices,
                "devices",
                "lower the pools' initial and max",
            ),
        )
    # Every ask is checked (and every one over reported), not only the first.
    over = [refuse(r, limits, ask) for ask in asks]
    return ok and not any(over)


def check_faults(r: Reader, limits: WorkLimits, faults: Node, work: Work, rate: float) -> bool:
    """Holds the random faults expected (``rate`` per device-hour, all kinds
    together) against ``limits``; False when over."""
    return not refuse(
        r,
        limits,
        Ask(
            _child(faults, "ratesPerDeviceHour"),
            f"the fault rates x devices x duration ({rate:g} x {work.devices:,} x "
            f"{hours(work.duration)})",
            rate * work.devices * work.duration / 3600.0,
            "faults",
            "lower the rates or shorten duration",
        ),
    )


def _child(node: Node, key: str) -> Node:
    """The value of ``key`` in a mapping node, else the node: where to point."""
    if isinstance(node, MappingNode):
        return next((v for k, v in node.value if k.value == key), node)
    return node


def hours(seconds: float) -> str:
    """A duration in a message about work: ``24 h``."""
    h = seconds / 3600
    return f"{h:,.0f} h" if h >= 1000 else f"{h:g} h"
