"""The Queues dashboard: Kueue's ClusterQueues as the controller sees them.

Why a dashboard of its own: teams are held to their ClusterQueue's quota, not to a
namespace, so "how much of my quota do I use, do I borrow, how long do my jobs
wait, what did my queue cost" are questions per ClusterQueue and ResourceFlavor.
Every panel reads the controller's queue series (``autoscaler/queues.py``,
docs/kueue.md), which exist only where Kueue is installed: without Kueue the
panels are empty by design. Chargeback over the time range comes from the raw
series; over 30 days, from the recording rules in
``rules/prometheus/accel-fleet.rules.yaml`` (``cluster_queue:accel_queue_*``).
"""

from __future__ import annotations

from dashboards.panels import (
    CLUSTER,
    Json,
    Layout,
    dashboard,
    query_variable,
    table,
    target,
    targets,
    timeseries,
)

QUEUE = f'{CLUSTER}, cluster_queue=~"$cluster_queue"'
BY = "cluster_queue, flavor, resource"
HELD = f'sum by ({BY}) (accel_queue_device_requests{{{QUEUE}, state=~"reserved|admitted"}})'
NOMINAL = f"sum by ({BY}) (accel_queue_nominal_quota{{{QUEUE}}})"
# Used share of the nominal quota; above 1 while the queue borrows from its cohort.
USED_SHARE = f"{HELD} / on ({BY}) ({NOMINAL} > 0)"
BORROWED = f"clamp_min({HELD} - on ({BY}) {NOMINAL}, 0)"
PENDING = f'sum by (cluster_queue, flavor) (accel_queue_workloads{{{QUEUE}, state="pending"}})'
WAIT = (
    "time() - min by (cluster_queue, flavor) "
    f"(accel_queue_oldest_pending_timestamp_seconds{{{QUEUE}}})"
)
ADMITTED = f'sum by (cluster_queue) (accel_queue_device_requests{{{QUEUE}, state="admitted"}})'
# Device-hours in the range: the admitted devices sampled once a minute, summed, / 60.
DEVICE_HOURS = f"sum_over_time(({ADMITTED})[$__range:1m]) / 60"

HOW_USED = (
    "Devices that Workloads holding quota (reserved or admitted) ask for, as a share "
    "of the ClusterQueue's nominal quota, per flavor and device resource. Above 1 the "
    "queue borrows from its cohort (up to its borrowing limit); a queue whose nominal "
    "quota is 0 is left out."
)
HOW_BORROWED = (
    "Devices held beyond the nominal quota: what the ClusterQueue borrows from the "
    "other queues of its cohort. 0 when it stays within its own quota."
)
HOW_PENDING = (
    "Device-using Workloads that hold no quota yet, per ClusterQueue and the flavor "
    "quota would give them (docs/kueue.md). A queue with pending Workloads and a used "
    "share near 1 waits for quota; with room left it waits for nodes."
)
HOW_WAIT = (
    "How long the longest-waiting pending Workload of each ClusterQueue and flavor has "
    "waited: since its creation, or its last requeue (Kueue's Requeued condition)."
)
HOW_HOURS = (
    "Device-hours the admitted Workloads of each ClusterQueue held in the time range: "
    "their devices sampled once a minute. The 30-day figure is the recording rule "
    "cluster_queue:accel_queue_device_hours:30d (rules/prometheus)."
)
HOW_QUOTAS = (
    "Each ClusterQueue's nominal quota and borrowing limit per flavor and device "
    "resource, with the devices held and pending now."
)


def queue_variable() -> Json:
    return query_variable(
        "cluster_queue",
        "ClusterQueue",
        f"label_values(accel_queue_info{{{CLUSTER}}}, cluster_queue)",
    )


def queues() -> Json:
    lay = Layout()
    lay.row("Quota")
    lay.add(
        timeseries(
            "Used share of nominal quota",
            HOW_USED,
            [target(USED_SHARE, "{{cluster_queue}} {{flavor}}")],
            unit="percentunit",
            min=0,
        )
    )
    lay.add(
        timeseries(
            "Borrowed from the cohort",
            HOW_BORROWED,
            [target(BORROWED, "{{cluster_queue}} {{flavor}}")],
            min=0,
        )
    )
    lay.add(
        table(
            "Quotas now",
            HOW_QUOTAS,
            targets(
                (NOMINAL, "nominal"),
                (f"sum by ({BY}) (accel_queue_borrowing_limit{{{QUEUE}}})", "borrowing limit"),
                (HELD, "held"),
                (
                    f'sum by ({BY}) (accel_queue_device_requests{{{QUEUE}, state="pending"}})',
                    "pending",
                ),
                instant=True,
            ),
        ),
        w=24,
    )
    lay.row("Waiting")
    lay.add(
        timeseries(
            "Pending Workloads",
            HOW_PENDING,
            [target(PENDING, "{{cluster_queue}} {{flavor}}")],
            min=0,
        )
    )
    lay.add(
        timeseries(
            "Longest wait of a pending Workload",
            HOW_WAIT,
            [target(WAIT, "{{cluster_queue}} {{flavor}}")],
            unit="s",
            min=0,
        )
    )
    lay.row("Chargeback per ClusterQueue")
    lay.add(
        table(
            "Device-hours in the time range",
            HOW_HOURS,
            [target(DEVICE_HOURS, "{{cluster_queue}}", instant=True)],
        ),
        w=24,
    )
    return dashboard(
        "accel-queues",
        "Accelerators / Queues",
        "Kueue ClusterQueues: quota used and borrowed, pending Workloads and their wait, "
        "device-hours per queue.",
        lay,
        more_variables=[queue_variable()],
    )
