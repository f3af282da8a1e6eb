"""The Remediation dashboard: the controller's decisions and actions, and its Gangs
row (multi-node jobs as one thing each). Built from ``dashboards/panels.py``;
``dashboards/generate.py`` writes it."""

from __future__ import annotations

from accel_common.names import GANG_LABEL, REMEDIATION_ANNOTATION
from dashboards.panels import (
    CLUSTER,
    FILTER,
    RED_WHEN_ONE,
    Json,
    Layout,
    dashboard,
    stat,
    table,
    target,
    targets,
    timeseries,
)

# --- Remediation --------------------------------------------------------------------


def remediation() -> Json:
    lay = Layout()
    ctl = f"{{{CLUSTER}}}"
    lay.row("Controller")
    lay.add(
        stat(
            "Breaker open",
            "1 when the circuit breaker stopped new remediation (too many unhealthy "
            "nodes at once: more often a driver rollout or a broken exporter than "
            "failing hardware). See the AccelAutoscalerBreakerOpen alert's runbook.",
            f"max(accel_autoscaler_breaker_open{ctl})",
            thresholds=RED_WHEN_ONE,
            color={"mode": "thresholds"},
            mappings=[
                {
                    "type": "value",
                    "options": {"0": {"text": "closed"}, "1": {"text": "open"}},
                }
            ],
        ),
        w=6,
        h=4,
    )
    lay.add(
        stat(
            "Source up",
            "Whether the controller's source (Prometheus or its own scrapes) "
            "answered with data in its last cycle; when 0 every rule is unknown and "
            "nothing is remediated.",
            f"min(accel_autoscaler_source_up{ctl})",
            mappings=[{"type": "value", "options": {"0": {"text": "down"}, "1": {"text": "up"}}}],
        ),
        w=6,
        h=4,
    )
    lay.add(
        stat(
            "Leader",
            "The replica holding the Lease; only the leader acts.",
            f"max by (instance) (accel_autoscaler_leader{ctl}) == 1",
            options={"reduceOptions": {"calcs": ["lastNotNull"]}, "textMode": "name"},
        ),
        w=6,
        h=4,
    )
    lay.add(
        stat(
            "Nodes under remediation",
            f"Nodes carrying the {REMEDIATION_ANNOTATION} annotation now.",
            f"sum(max by (node) (accel_autoscaler_nodes_under_remediation"
            f'{{{CLUSTER}, node=~"$node"}}))',
        ),
        w=6,
        h=4,
    )
    lay.row("Decisions and actions")
    lay.add(
        timeseries(
            "Decisions by rule",
            "Decisions per second by rule, action and kind (act, recover); dry-run "
            "decisions are marked.",
            targets(
                (
                    "sum by (rule, action, kind, dry_run) "
                    f"(rate(accel_autoscaler_decisions_total{ctl}[$__rate_interval]))",
                    "{{rule}} {{action}} {{kind}} dry-run={{dry_run}}",
                )
            ),
            unit="ops",
        ),
        w=12,
    )
    lay.add(
        timeseries(
            "Actions by rule and status",
            "Actions the controller carried out per second, by rule, action and status "
            "(done, partial, skipped, failed).",
            targets(
                (
                    "sum by (rule, action, status) "
                    f"(rate(accel_autoscaler_actions_total{ctl}[$__rate_interval]))",
                    "{{rule}} {{action}} {{status}}",
                )
            ),
            unit="ops",
        ),
        w=12,
    )
    lay.add(
        table(
            "Decisions in range",
            "Decisions by rule, action and kind in the dashboard's time range.",
            [
                target(
                    "sum by (rule, action, kind, dry_run) "
                    f"(increase(accel_autoscaler_decisions_total{ctl}[$__range]))",
                    instant=True,
                )
            ],
            decimals=0,
        ),
        w=12,
    )
    lay.add(
        table(
            "Actions in range",
            "Actions by rule, action and status in the dashboard's time range; a "
            "failed or partial action is worth a look at the controller's log.",
            [
                target(
                    "sum by (rule, action, status) "
                    f"(increase(accel_autoscaler_actions_total{ctl}[$__range]))",
                    instant=True,
                )
            ],
            decimals=0,
        ),
        w=12,
    )
    lay.row("Rules")
    lay.add(
        timeseries(
            "Pending targets by rule",
            "Targets whose condition holds but whose 'for' has not yet passed.",
            targets((f"sum by (rule) (accel_autoscaler_pending_targets{ctl})", "{{rule}}")),
        ),
        w=8,
    )
    lay.add(
        timeseries(
            "Active targets by rule",
            "Targets under remediation by each rule (acted on, not yet recovered).",
            targets((f"sum by (rule) (accel_autoscaler_active_targets{ctl})", "{{rule}}")),
        ),
        w=8,
    )
    lay.add(
        timeseries(
            "Unknown evaluations by rule",
            "Evaluations per second whose result was unknown (failed, timed out or "
            "empty): an unknown never acts, so a rule that stays unknown is blind.",
            targets(
                (
                    "sum by (rule) "
                    f"(rate(accel_autoscaler_rule_unknown_total{ctl}[$__rate_interval]))",
                    "{{rule}}",
                )
            ),
            unit="ops",
        ),
        w=8,
    )
    lay.add(
        timeseries(
            "Source health",
            "1 when the source answered with data, by source and replica.",
            targets(
                (
                    f"accel_autoscaler_source_up{ctl}",
                    "{{instance}} {{source}}",
                )
            ),
            min=0,
            max=1,
        ),
        w=8,
    )
    lay.add(
        timeseries(
            "Evaluation cycle",
            "How long the last evaluation cycle took, and how long ago it ran.",
            targets(
                (f"accel_autoscaler_evaluation_duration_seconds{ctl}", "{{instance}} took"),
                (
                    f"time() - accel_autoscaler_last_evaluation_timestamp_seconds{ctl}",
                    "{{instance}} age",
                ),
            ),
            unit="s",
        ),
        w=8,
    )
    lay.add(
        timeseries(
            "Rules loaded",
            "Rules loaded, and whether the last reload succeeded (on 0 the last good "
            "rules still run; the controller's log says what is wrong, file:line:col).",
            targets(
                (f"accel_autoscaler_rules{ctl}", "{{instance}} rules"),
                (f"accel_autoscaler_rules_reload_success{ctl}", "{{instance}} reload ok"),
            ),
        ),
        w=8,
    )
    gangs(lay)
    lay.row("Nodes")
    lay.add(
        table(
            "Nodes under remediation",
            f"Nodes carrying the {REMEDIATION_ANNOTATION} annotation: which rule "
            "acts on them, with which action, and in which phase.",
            [
                target(
                    "max by (node, rule, action, phase) (accel_autoscaler_nodes_under_"
                    f'remediation{{{CLUSTER}, node=~"$node"}}) == 1',
                    instant=True,
                )
            ],
            hide={"Value": True},
        ),
        w=24,
    )
    return dashboard(
        "accel-remediation",
        "Accelerators / Remediation",
        "What accel-autoscaler decided and did, its circuit breaker, its source and "
        "the nodes it is remediating.",
        lay,
    )


# --- Gangs (on the Remediation dashboard) -------------------------------------------

# Each gang member's utilization: the busiest device it holds, labelled with its gang
# (accel_gang_info comes from the controller's cluster state; max by drops the
# replica's instance so two replicas do not double a member).
GANG_MEMBER_UTILIZATION = (
    "max by (cluster, namespace, pod, gang) ("
    f"accel_device_pod_info{{{FILTER}}} * on (cluster, node, device) group_left () "
    f"accel_utilization_ratio{{{FILTER}}} "
    "* on (cluster, namespace, pod) group_left (gang) "
    f"max by (cluster, namespace, pod, gang) (accel_gang_info{{{CLUSTER}}}))"
)
# The stall rules' view: every member idle (at most 5%) for the last 3 minutes.
GANG_IDLE_3M = (
    "max by (cluster, namespace, gang) ("
    f"max by (cluster, node) (max_over_time(accel_utilization_ratio{{{FILTER}}}[3m])) "
    "* on (cluster, node) group_right () "
    f"max by (cluster, namespace, pod, node, gang) (accel_gang_info{{{CLUSTER}}})) <= 0.05"
)

# Each gang member's device-link traffic (NVLink, xGMI; both directions, every link
# of every device it holds), labelled with its gang: a hung collective keeps the
# members busy while this falls to 0 for all of them (the hung-collective rule).
GANG_MEMBER_LINKS = (
    "sum by (namespace, gang, pod) ("
    f"accel_device_pod_info{{{FILTER}}} * on (cluster, node, device) group_left () "
    "sum by (cluster, node, device) "
    f"(accel_link_throughput_bytes_per_second{{{FILTER}}}) "
    "* on (cluster, namespace, pod) group_left (gang) "
    f"max by (cluster, namespace, pod, gang) (accel_gang_info{{{CLUSTER}}}))"
)
# The hung-collective rule's view of a gang: no link traffic on any member's node
# for the last minute while every member's devices stayed busy.
GANG_SILENT_1M = (
    "max by (cluster, namespace, gang) ("
    "max by (cluster, node) (max_over_time("
    f"accel_link_throughput_bytes_per_second{{{FILTER}}}[1m])) "
    "* on (cluster, node) group_right () "
    f"max by (cluster, namespace, pod, node, gang) (accel_gang_info{{{CLUSTER}}})) == 0 "
    "and on (cluster, namespace, gang) min by (cluster, namespace, gang) ("
    f"min by (cluster, node) (min_over_time(accel_utilization_ratio{{{FILTER}}}[1m])) "
    "* on (cluster, node) group_right () "
    f"max by (cluster, namespace, pod, node, gang) (accel_gang_info{{{CLUSTER}}})) >= 0.5"
)
# A learned rhythm figure per gang (autoscaler/rhythm.py), 0 where none is learned:
# a gang that has not yet recovered from a pause has no such series.
_GANG_ZERO = f"max by (namespace, gang) (accel_gang_info{{{CLUSTER}}}) * 0"


def _rhythm(expr: str) -> str:
    return f"max by (namespace, gang) ({expr}) or {_GANG_ZERO}"


def gangs(lay: Layout) -> None:
    """Multi-node training jobs as one thing each: how evenly their members work,
    and which gangs the stall rules would call stalled."""
    lay.row("Gangs")
    lay.add(
        timeseries(
            "Gang utilization, least and most busy member",
            "Per gang (JobSet, PyTorchJob, TrainJob, MPIJob, Volcano Job, or pods "
            f"sharing the {GANG_LABEL} label): the utilization of its least "
            "and its most busy member (each member's busiest device). A synchronous "
            "job's members move together; a checkpoint takes them all to 0 for its "
            "declared pause; a stall keeps them all at 0. One member far below the "
            "others is a straggler, not a stall.",
            targets(
                (
                    f"min by (namespace, gang) ({GANG_MEMBER_UTILIZATION})",
                    "{{namespace}}/{{gang}} min",
                ),
                (
                    f"max by (namespace, gang) ({GANG_MEMBER_UTILIZATION})",
                    "{{namespace}}/{{gang}} max",
                ),
            ),
            fieldConfig={"defaults": {"unit": "percentunit", "min": 0, "max": 1}},
        ),
        w=16,
    )
    lay.add(
        stat(
            "Gangs idle for 3 minutes",
            "Gangs whose every member has been idle (at most 5%) for the last three "
            "minutes: longer than any checkpoint pause of up to 2m30s, so the "
            "stalled-gang rule restarts them unless they declared a longer pause "
            "(docs/rules.md, the stall detector).",
            f"count({GANG_IDLE_3M}) or vector(0)",
            thresholds=RED_WHEN_ONE,
            color={"mode": "thresholds"},
        ),
        w=8,
    )
    lay.add(
        table(
            "Gang members (1: the gang has been idle for 3 minutes)",
            "Every gang member with its node, 1 when its whole gang is counted "
            "above: where to look for the faulty device or the hung rank.",
            [
                target(
                    f"max by (namespace, gang, pod, node) (accel_gang_info{{{CLUSTER}}} "
                    f"* on (cluster, namespace, gang) group_left () ({GANG_IDLE_3M})) "
                    f"or max by (namespace, gang, pod, node) (accel_gang_info{{{CLUSTER}}}) * 0",
                    instant=True,
                )
            ],
        ),
        w=24,
    )
    gang_signals(lay)


def gang_signals(lay: Layout) -> None:
    """What the hung-collective, lost-node and stall rules read of a gang
    besides its utilization: its members' link traffic, their nodes' readiness,
    and the rhythm the controller learned from its pauses (docs/rules.md)."""
    lay.add(
        timeseries(
            "Gang member link traffic",
            "Per gang member: the bytes per second its devices' links carry (NVLink, "
            "xGMI; both directions, summed). A synchronous job's members talk all "
            "the time they work; a checkpoint silences them with their devices idle; "
            "a hung collective silences them while their devices stay busy, which "
            "the hung-collective rule restarts after one minute. Only NVIDIA and AMD "
            "exporters publish link traffic (docs/rules.md, hung collectives).",
            targets((GANG_MEMBER_LINKS, "{{namespace}}/{{gang}} {{pod}}")),
            unit="Bps",
        ),
        w=16,
    )
    lay.add(
        stat(
            "Gangs busy with silent links",
            "Gangs whose members' links carried nothing for the last minute while "
            "every member stayed busy (at least 50%): a collective hung with its "
            "kernels spinning, which the hung-collective rule restarts.",
            f"count({GANG_SILENT_1M}) or vector(0)",
            thresholds=RED_WHEN_ONE,
            color={"mode": "thresholds"},
        ),
        w=8,
    )
    lay.add(
        table(
            "Gang members' nodes (1: Ready)",
            "Every gang member with its node and that node's Ready condition "
            "(accel_node_ready): a member on a node that is not Ready, whose devices "
            "report no work, has its gang restarted by the lost-node rule a "
            "minute later instead of at the pods' 300 s toleration.",
            [
                target(
                    "max by (namespace, gang, pod, node) ("
                    f"accel_gang_info{{{CLUSTER}}} * on (cluster, node) group_left () "
                    f"max by (cluster, node) (accel_node_ready{{{CLUSTER}}}))",
                    instant=True,
                )
            ],
        ),
        w=12,
    )
    lay.add(
        timeseries(
            "Gang rhythm, learned",
            "What the controller learned of each gang's pauses from its utilization "
            "(autoscaler/rhythm.py): the longest idle dip it recovered from, the "
            "usual spacing between dips, and how long the current dip has lasted. "
            "The stall rules call a dip that outlasts twice the longest pause (plus "
            "a minute), or that comes well before the spacing is up, a stall. 0 "
            "where nothing is learned yet, or no dip is under way.",
            targets(
                (
                    _rhythm(f"accel_gang_rhythm_longest_pause_seconds{{{CLUSTER}}}"),
                    "{{namespace}}/{{gang}} longest pause",
                ),
                (
                    _rhythm(f"accel_gang_rhythm_spacing_seconds{{{CLUSTER}}}"),
                    "{{namespace}}/{{gang}} spacing",
                ),
                (
                    _rhythm(
                        f"time() - accel_gang_rhythm_idle_start_timestamp_seconds{{{CLUSTER}}}"
                    ),
                    "{{namespace}}/{{gang}} current dip",
                ),
            ),
            unit="s",
        ),
        w=12,
    )
    lay.add(
        timeseries(
            "Gang data moved: this dip against its pauses",
            "What the gang's nodes move in a dip (the most of any member's node, "
            "network and disk, as node_exporter counts it) beside the least they "
            "moved at any look during the pauses the gang recovered from "
            "(autoscaler/rhythm.py). A checkpoint writes: a dip that moves under a "
            "tenth of that least is a stall at once, one that moves half of it or "
            "more is a checkpoint however long it lasts (docs/rules.md, the stall "
            "detector). 0 where node_exporter's counters are missing (no figure: the "
            "rules make no I/O call then), or no dip is under way.",
            targets(
                (
                    _rhythm(f"accel_gang_rhythm_io_bytes_per_second{{{CLUSTER}}}"),
                    "{{namespace}}/{{gang}} in this dip",
                ),
                (
                    _rhythm(f"accel_gang_rhythm_pause_io_min_bytes_per_second{{{CLUSTER}}}"),
                    "{{namespace}}/{{gang}} least in its pauses",
                ),
            ),
            unit="Bps",
        ),
        w=24,
    )
