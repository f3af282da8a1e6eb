"""The action class of each simulated fault, and which repair can fix which class.

Why a module of its own: the ladder's simulated benefit rests on one question, which
repair fixes which fault, and the vendors answer it per fault (NVIDIA's Xid catalog
buckets RESET_GPU and RESTART_BM, a row-remap failure that only a new part cures,
MindCluster's SeparateNPU). Before classes, the simulator answered it with two
probabilities for every fatal fault alike, so a reset could fix an Xid 79 that no
reset can reach, which flattered a ladder that always starts with a reset. Here each
fault carries the class the exporter would publish (``accel_common.remedies``), and
the class decides:

- **what the exporter publishes**: the fault-event series' ``action`` label (a lost
  device: ``code="lost"``, ``severity="fatal"``, ``action="reboot"``, as every
  backend reports it);
- **which repair can fix it** (``FIXED_BY``): a reset fixes ``reset`` and
  ``reset_when_idle`` faults, never ``reboot`` or ``isolate`` ones; a reboot (which
  resets every device on the way) fixes those and ``reboot`` faults, not
  ``isolate``; only a new machine fixes an ``isolate`` fault. Within what a repair
  can fix, the scenario's ``fixes`` probability still applies (a reset-class fault
  that comes back after a reset), except for a pending remap, which any reset
  applies.

A kind's class comes from the scenario (``faults.classes``: one class, or weights
over the classes the kind allows; an event's own ``action``), else the kind's
default (``DEFAULT``, documented in docs/simulator.md). Only the kinds that publish
a fault event use their class; the others keep it for the record (``stall`` is an
``app`` fault, but the simulated exporter sees nothing of it; nor of a
``collective_hang``, whose signature is in the utilization and link series).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from yaml.nodes import MappingNode, Node, ScalarNode

from accel_common.remedies import LOST_CODE, ActionClass
from autoscaler.simulate.scenario_workload import ScenarioReader

# Each kind's classes, its default first. ``fatal``: a RESET_GPU Xid (48, 95, 109,
# an uncorrectable RAS event) by default; a scenario can make some of them Xid 79s
# (``reboot``) or row-remap failures (``isolate``). ``device_lost``: the device
# stopped answering, which every backend reports as code ``lost`` with class
# ``reboot``. ``remap_pending``: a row remap (or Gaudi row replacement) waits for
# a reset; ``remap_failure``: a row could not be remapped, the part must be
# returned (the exporter's codes of the same names). ``app``: the application
# faulted (NVIDIA's RESTART_APP Xids 13, 31, 68, 69; Ascend's RestartBusiness),
# graded ``info`` as the exporter grades it: the job hangs, the device is fine.
# The rest publish no fault event here.
ALLOWED: Final[dict[str, tuple[ActionClass, ...]]] = {
    "fatal": ("reset", "reboot", "isolate"),
    "ecc_uncorrected": ("reset",),
    "hang": ("reset",),
    "stall": ("app",),
    "device_lost": ("reboot", "isolate"),
    "node_down": ("reboot",),
    "remap_pending": ("reset_when_idle",),
    "remap_failure": ("isolate",),
    "app": ("app",),
    # A hung collective (an NCCL ring whose kernels spin): the job's own fault,
    # restarted as a whole; the devices are fine.
    "collective_hang": ("app",),
}
DEFAULT: Final[dict[str, ActionClass]] = {kind: allowed[0] for kind, allowed in ALLOWED.items()}
# The kinds that publish a fault event, with its severity.
SEVERITY: Final[dict[str, str]] = {
    "fatal": "fatal",
    "device_lost": "fatal",
    "remap_pending": "recoverable",
    "remap_failure": "fatal",
    "app": "info",
}
# The code a kind's event carries when it has a fixed one.
CODE: Final[dict[str, str]] = {"device_lost": LOST_CODE}
# Which repair fixes which class (``reset``, ``reboot``, ``replace``).
FIXED_BY: Final[dict[str, frozenset[ActionClass]]] = {
    "reset": frozenset({"reset", "reset_when_idle"}),
    "reboot": frozenset({"reset", "reset_when_idle", "reboot"}),
    "replace": frozenset({"reset", "reset_when_idle", "reboot", "isolate"}),
}
# The fault-event series every simulated device exposes from its first scrape,
# whatever the scenario: one per severity, with that severity's usual class.
BASE_EVENT_KEYS: Final[tuple[tuple[str, ActionClass], ...]] = (
    ("fatal", "reset"),
    ("recoverable", "watch"),
    ("info", "ignore"),
)


def fixes(how: str, action: ActionClass) -> bool:
    """Whether a repair (``reset``, ``reboot``, ``replace``) can fix a fault of
    class ``action`` at all."""
    return action in FIXED_BY[how]


@dataclass(frozen=True)
class ClassMix:
    """A kind's classes with their weights (one class: weight 1)."""

    kind: str
    weights: tuple[tuple[ActionClass, float], ...]

    def draw(self, u: float) -> ActionClass:
        """The class for a uniform draw ``u`` in [0, 1)."""
        total = sum(w for _, w in self.weights)
        acc = 0.0
        for action, w in self.weights:
            acc += w / total
            if u < acc:
                return action
        return self.weights[-1][0]


def default_mixes() -> dict[str, ClassMix]:
    return {kind: ClassMix(kind, ((action, 1.0),)) for kind, action in DEFAULT.items()}


def event_keys(mixes: dict[str, ClassMix], kinds: set[str]) -> tuple[tuple[str, ActionClass], ...]:
    """The (severity, action) pairs of the fault-event series: the base ones and
    those the scenario's fault ``kinds`` can publish with their ``mixes`` (an
    exporter's counters exist at 0 from its first scrape, so that ``increase``
    sees the first event)."""
    keys = list(BASE_EVENT_KEYS)
    for kind in sorted(kinds & SEVERITY.keys()):
        for action, w in mixes[kind].weights:
            key = (SEVERITY[kind], action)
            if w > 0 and key not in keys:
                keys.append(key)
    return tuple(keys)


def _allowed_text(kind: str) -> str:
    return ", ".join(ALLOWED[kind])


def read_action(r: ScenarioReader, node: Node, kind: str | None) -> ActionClass | None:
    """An event's ``action``: one of the classes its kind allows."""
    value = node.value if isinstance(node, ScalarNode) else None
    if kind is None:
        return None
    if value not in ALLOWED[kind]:
        r.problem(
            node,
            f"a {kind} fault's action must be one of {_allowed_text(kind)}, got {value!r}",
        )
        return None
    return value  # type: ignore[no-any-return]


def read_classes(r: ScenarioReader, node: Node) -> dict[str, ClassMix]:
    """``classes``: kind -> class, or kind -> {class: weight}; every problem said."""
    mixes = default_mixes()
    if not isinstance(node, MappingNode):
        r.problem(node, "classes must map fault kinds to a class or {class: weight}")
        return mixes
    for k, v in node.value:
        kind = k.value if isinstance(k, ScalarNode) else None
        if kind not in ALLOWED:
            r.problem(k, f"classes: unknown fault kind {kind!r} (kinds: {', '.join(ALLOWED)})")
            continue
        if isinstance(v, ScalarNode):
            action = read_action(r, v, kind)
            if action is not None:
                mixes[kind] = ClassMix(kind, ((action, 1.0),))
            continue
        mix = _weights(r, v, kind)
        if mix is not None:
            mixes[kind] = mix
    return mixes


def _weights(r: ScenarioReader, node: Node, kind: str) -> ClassMix | None:
    if not isinstance(node, MappingNode) or not node.value:
        r.problem(node, f"classes.{kind} must be a class or {{class: weight}}")
        return None
    weights: list[tuple[ActionClass, float]] = []
    for k, v in node.value:
        action = read_action(r, k, kind)
        w = r.number(v, f"classes.{kind}: the weight of {k.value}")
        if action is not None and w is not None:
            weights.append((action, w))
    if weights and sum(w for _, w in weights) <= 0:
        r.problem(node, f"classes.{kind}: the weights must not all be 0")
        return None
    return ClassMix(kind, tuple(weights)) if weights else None


__all__ = [
    "ALLOWED",
    "BASE_EVENT_KEYS",
    "CODE",
    "DEFAULT",
    "FIXED_BY",
    "SEVERITY",
    "ClassMix",
    "default_mixes",
    "event_keys",
    "fixes",
    "read_action",
    "read_classes",
]
