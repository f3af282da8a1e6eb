"""The node agent's metric catalogue and the status its ``/metrics`` renders.

The agent's series are few, but they are read by people debugging a node and by
alert rules, so they are declared once here (name, type, HELP, labels) and
rendered through ``prometheus-client`` (``accel_common/ownmetrics.py``) from a
frozen ``AgentStatus`` that ``Agent.status`` copies. The copy matters: the
rounds run in a worker thread (NVML and sysfs calls block) while ``/metrics``
answers on the event loop, and a scrape must neither wait for a round (which
holds the agent's lock while a MIG layout is built) nor see half of one.
"""

from __future__ import annotations

from dataclasses import dataclass

from accel_common.ownmetrics import Families, Metric, check_catalogue, render_snapshot

PARTITION_LAYOUT = Metric(
    "accel_partition_layout_info",
    "gauge",
    "The partition layout this node's agent last answered, and its state "
    "(applied, refused, failed); 1 while it stands.",
    ("node", "layout", "state"),
)
ROUNDS = Metric(
    "accel_node_agent_rounds_total", "counter", "Agent rounds by result (ok, error).", ("result",)
)
LAST_SUCCESS = Metric(
    "accel_node_agent_last_success_timestamp_seconds",
    "gauge",
    "When the agent last read and answered its Node (Unix seconds); 0 before that.",
)

CATALOGUE: tuple[Metric, ...] = check_catalogue((PARTITION_LAYOUT, ROUNDS, LAST_SUCCESS))


@dataclass(frozen=True)
class AgentStatus:
    """The agent's state as its series show it, at one instant. ``layouts``: the
    (layout, state) each partition task last answered."""

    node: str
    layouts: tuple[tuple[str, str], ...] = ()
    rounds: tuple[tuple[str, int], ...] = ()
    last_success: float = 0.0


def samples(s: AgentStatus) -> Families:
    return (
        (PARTITION_LAYOUT, [((s.node, layout, state), 1.0) for layout, state in s.layouts]),
        (ROUNDS, [((result,), n) for result, n in s.rounds]),
        (LAST_SUCCESS, [((), s.last_success)]),
    )


def render(status: AgentStatus) -> str:
    """The agent's ``/metrics`` text for one status."""
    return render_snapshot(CATALOGUE, status, samples)
