"""The Chargeback dashboard: device-hours by namespace, vendor and model, billed by a
named policy (docs/dashboards.md, "Billing policy").

The dashboard bills by the policy in its custom ``$policy`` variable: each policy is
one expression (``POLICY_EXPRESSIONS``), and ``and on ()`` with a constant series
that exists only when ``$policy`` names it keeps the chosen one, so one query serves
every policy and the dashboard needs no recording rule; the recording rules in
``rules/prometheus/accel-fleet.rules.yaml`` record the same three for long ranges.
Built from ``dashboards/panels.py``; ``dashboards/generate.py`` writes it.
"""

from __future__ import annotations

from dashboards.panels import (
    FILTER,
    Json,
    Layout,
    dashboard,
    panel,
    stat,
    table,
    target,
    targets,
    timeseries,
)

# --- Chargeback ---------------------------------------------------------------------

# Each pod's share of a device: 1 for a device it holds alone, 1/N for a device that
# N pods share (time-slicing, MPS), so that a shared device is billed once in total.
SHARE = (
    f'accel_device_pod_info{{{FILTER}, namespace=~"$namespace"}} / on (uuid) group_left '
    f"count by (uuid) (accel_device_pod_info{{{FILTER}}})"
)
SHARE_WITH_MODEL = (
    f"{SHARE} * on (uuid) group_left (model) max by (uuid, model) (accel_device_info{{{FILTER}}})"
)

# What a bill is summed over: one series per device and pod.
BILL_BY = "cluster, node, device, vendor, uuid, namespace, pod"
# The head count per pod and device: the ``held`` policy, and every policy's answer
# for a device without any measure of use.
HELD = f"sum by ({BILL_BY}) ({SHARE})"
# Devices whose exporter measures per-pod use (accel_pod_utilization_ratio exists
# for them: NVML process samples, AMD SMI engine time).
PER_POD = f"accel_pod_utilization_ratio{{{FILTER}}}"
# What each pod's processes used on those devices; pod="" (processes of no pod, the
# MPS server) is nobody's to pay.
MEASURED_USE = (
    f"sum by ({BILL_BY}) (accel_pod_utilization_ratio"
    f'{{{FILTER}, namespace=~"$namespace", pod!=""}})'
)
# Head count on the devices without a per-pod measure.
HEAD_COUNT = f"({HELD}) unless on (uuid) {PER_POD}"
# Those devices' own utilization, split 1/N between their N pods: a pod that holds a
# device alone is billed what the device did. Devices that report no utilization
# at all (an identity-only backend) stay on head count.
DEVICE_USE = (
    f"(({HEAD_COUNT}) * on (uuid) group_left () "
    f"max by (uuid) (accel_utilization_ratio{{{FILTER}}})) "
    f"or (({HEAD_COUNT}) unless on (uuid) accel_utilization_ratio{{{FILTER}}})"
)
# What no pod used of a measured device (idle time, host processes), split 1/N
# between the pods that hold it.
IDLE_SHARE = (
    f"(({HELD}) and on (uuid) {PER_POD}) * on (uuid) group_left () "
    f'clamp_min(1 - sum by (uuid) (accel_pod_utilization_ratio{{{FILTER}, pod!=""}}), 0)'
)

# The billing policies (docs/dashboards.md), each a pod's billed device-equivalents
# on each device it holds.
POLICY_EXPRESSIONS = {
    # Every pod pays its share of the device, used or not; a measured device's idle
    # time and host processes are split between its pods, so each device is billed
    # in full and shared devices are split by use.
    "measured-with-idle-split": (
        f"(({MEASURED_USE}) + ({IDLE_SHARE})) or ({MEASURED_USE}) or ({IDLE_SHARE}) "
        f"or ({HEAD_COUNT})"
    ),
    # Only use is billed: per-pod use where measured, else the device's use split
    # between its pods; idle time and host processes are billed to nobody.
    "measured": f"({MEASURED_USE}) or ({DEVICE_USE})",
    # Head count: 1 for a device held alone, 1/N of a device that N pods share.
    "held": HELD,
}
POLICIES = tuple(POLICY_EXPRESSIONS)
DEFAULT_POLICY = POLICIES[0]


def policy_chosen(name: str) -> str:
    """One sample when the dashboard's ``$policy`` is ``name``, none otherwise:
    ``and on ()`` with it keeps only the chosen policy's expression."""
    return (
        'label_replace(vector(1), "policy", "$policy", "", "") and on (policy) '
        f'label_replace(vector(1), "policy", "{name}", "", "")'
    )


BILLED = " or ".join(
    f"(({expr}) and on () ({policy_chosen(name)}))" for name, expr in POLICY_EXPRESSIONS.items()
)
BILLED_WITH_MODEL = (
    f"({BILLED}) * on (uuid) group_left (model) "
    f"max by (uuid, model) (accel_device_info{{{FILTER}}})"
)
# Devices held by pods, by whether the exporter measures each pod's use of them.
MEASURED_DEVICES = f"count(count by (uuid) ({PER_POD}))"
HEAD_COUNT_DEVICES = (
    f"count(count by (uuid) (accel_device_pod_info{{{FILTER}}}) unless on (uuid) {PER_POD})"
)
# The policy in force, as a series whose ``policy`` label a stat panel shows.
POLICY_IN_FORCE = 'label_replace(vector(1), "policy", "$policy", "", "")'

POLICY_HOW = (
    "The billing policy is the dashboard's $policy variable (default "
    f"{DEFAULT_POLICY}; docs/dashboards.md). measured-with-idle-split: each pod pays "
    "what its processes used of a device plus an equal share of what no pod used "
    "(idle time, host processes), so every held device is billed in full and a "
    "shared device is split by use. measured: each pod pays what it used, and idle "
    "time is billed to nobody; a pod holding an idle GPU alone pays its (small) use. "
    "held: head count, 1 for a device held alone and 1/N of a device N pods share. "
    "Where the exporter has no per-pod measure for a device (no "
    "accel_pod_utilization_ratio: other vendors, a MIG instance shared by several "
    "containers), measured bills the device's own utilization split 1/N, and the "
    "other two bill head count."
)
DEVICE_HOURS_HOW = (
    "Device-hours = Σ over the range of (the pod's billed share of the device) × time, "
    "under the billing policy in force. "
    + POLICY_HOW
    + " The subquery samples the share every $__interval "
    "(range [$__range:$__interval]); sum_over_time adds the samples, × "
    "$__interval_ms / 3 600 000 turns samples into hours. A MIG instance or AMD "
    "partition counts as one device (its own uuid)."
)


def device_hours(by: str = "") -> str:
    """Device-hours in the dashboard's range, summed ``by`` these labels (or all)."""
    grouping = f"sum by ({by})" if by else "sum"
    return (
        f"{grouping} (sum_over_time(({BILLED_WITH_MODEL})[$__range:$__interval]))"
        " * $__interval_ms / 3600000"
    )


def policy_variable() -> Json:
    """The billing policy: a fixed list, the default first (docs/dashboards.md)."""
    return {
        "name": "policy",
        "label": "Billing policy",
        "description": POLICY_HOW,
        "type": "custom",
        "query": ",".join(POLICIES),
        "current": {"selected": True, "text": DEFAULT_POLICY, "value": DEFAULT_POLICY},
        "options": [
            {"selected": name == DEFAULT_POLICY, "text": name, "value": name} for name in POLICIES
        ],
        "hide": 0,
        "includeAll": False,
        "multi": False,
    }


def chargeback() -> Json:
    lay = Layout()
    lay.row("Device-hours in the time range, billed by policy $policy")
    lay.add(
        stat(
            "Billing policy",
            POLICY_HOW,
            POLICY_IN_FORCE,
            options={
                "reduceOptions": {"calcs": ["lastNotNull"]},
                "textMode": "name",
                "colorMode": "none",
            },
        )
        | {"targets": [target(POLICY_IN_FORCE, "{{policy}}", instant=True)]},
        w=6,
        h=4,
    )
    lay.add(
        stat(
            "Device-hours, all namespaces ($policy)",
            DEVICE_HOURS_HOW,
            device_hours(),
            decimals=2,
        ),
        w=18,
        h=4,
    )
    lay.add(
        panel(
            "bargauge",
            "Device-hours by namespace ($policy)",
            DEVICE_HOURS_HOW,
            [target(device_hours("namespace"), "{{namespace}}", instant=True)],
            options={
                "orientation": "horizontal",
                "displayMode": "gradient",
                "reduceOptions": {"calcs": ["lastNotNull"], "values": False},
            },
            decimals=2,
            unit="h",
        ),
        w=24,
        h=8,
    )
    lay.add(
        table(
            "Device-hours by namespace, vendor and model ($policy)",
            DEVICE_HOURS_HOW,
            [target(device_hours("namespace, vendor, model"), instant=True)],
            decimals=2,
        ),
        w=24,
    )
    lay.add(
        stat(
            "Devices with per-pod use",
            "Devices held by pods whose exporter measures each pod's use "
            "(accel_pod_utilization_ratio): measured and measured-with-idle-split bill "
            "their pods by it.",
            MEASURED_DEVICES,
        ),
        w=12,
        h=4,
    )
    lay.add(
        stat(
            "Devices without per-pod use",
            "Devices held by pods without a per-pod measure (no "
            "accel_pod_utilization_ratio for the device): measured bills the device's "
            "utilization split 1/N between its N pods, the other policies 1/N of it.",
            HEAD_COUNT_DEVICES,
        ),
        w=12,
        h=4,
    )
    lay.row("Devices held now")
    lay.add(
        timeseries(
            "Devices held by namespace",
            "Device-equivalents that each namespace's pods hold (a shared device "
            "split 1/N between its pods): what the held policy bills.",
            targets((f"sum by (namespace) ({SHARE})", "{{namespace}}")),
            custom={"drawStyle": "line", "fillOpacity": 20, "stacking": {"mode": "normal"}},
        ),
        w=12,
    )
    lay.add(
        timeseries(
            "Devices held by vendor and model",
            "Device-equivalents held by pods, by vendor and model.",
            targets((f"sum by (vendor, model) ({SHARE_WITH_MODEL})", "{{vendor}} {{model}}")),
            custom={"drawStyle": "line", "fillOpacity": 20, "stacking": {"mode": "normal"}},
        ),
        w=12,
    )
    lay.add(
        timeseries(
            "Billed by namespace ($policy)",
            "Device-equivalents that each namespace's pods are billed now under the "
            "policy in force; the area under this curve is the device-hours above. " + POLICY_HOW,
            targets((f"sum by (namespace) ({BILLED})", "{{namespace}}")),
            custom={"drawStyle": "line", "fillOpacity": 20, "stacking": {"mode": "normal"}},
        ),
        w=12,
    )
    lay.add(
        timeseries(
            "Measured use by namespace",
            "Device-equivalents that each namespace's processes keep busy, on the "
            "devices whose exporter measures per-pod use (accel_pod_utilization_ratio); "
            "the gap to 'Devices held' is idle capacity, which held and "
            "measured-with-idle-split bill and measured does not.",
            targets((f"sum by (namespace) ({MEASURED_USE})", "{{namespace}}")),
            custom={"drawStyle": "line", "fillOpacity": 20, "stacking": {"mode": "normal"}},
        ),
        w=12,
    )
    lay.add(
        table(
            "Pods and their devices ($policy)",
            "Which pod holds which device now, and its billed share of it under the "
            "policy in force. " + POLICY_HOW,
            [target(f"{BILLED_WITH_MODEL}", instant=True)],
            hide={"job": True, "instance": True, "cluster": True},
        ),
        w=24,
    )
    return dashboard(
        "accel-chargeback",
        "Accelerators / Chargeback",
        "Device-hours by namespace, vendor and model, billed by the policy chosen in "
        f"$policy (default {DEFAULT_POLICY}): per-pod use "
        "(accel_pod_utilization_ratio) where the exporter has it, the device's use or "
        "head count (accel_device_pod_info, 1/N of a shared device) where it does not.",
        lay,
        time_from="now-7d",
        more_variables=[policy_variable()],
    )
