"""Shared inputs for the built-in evaluator's tests: a deterministic fleet of series
and the expressions asked of it.

The series are built to hit every rule in the evaluator that Prometheus has too:
counters that reset (exporter restarts) and counters born mid-range, gauges with
NaN and infinities, a node that vanishes (its series end without a stale marker,
so the 5 m lookback decides), a node born late, a long gap in scrapes (the 1.1x
extrapolation threshold), per-target scrape offsets with millisecond jitter, and
pods that come and go. ``EXPRESSIONS`` covers the whole supported subset and the
errors Prometheus raises; ``eval_times`` picks instants at the edges of windows.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

T0 = 1_700_000_000
"""The first scrape (seconds). Fixed, so Prometheus's retention (relative to the
newest block) keeps every sample however old it is."""
DURATION = 7200
INTERVAL = 15
VANISH_AT = T0 + 5400
"""Node n4 stops answering here."""
BORN_AT = T0 + 1800
"""Node n5 appears here."""
GAP = (T0 + 3000, T0 + 3600)
"""Node n2 is not scraped in this span."""

NODES: dict[str, list[tuple[str, str]]] = {
    "n1": [("nvidia0", "nvidia"), ("nvidia1", "nvidia")],
    "n2": [("amd0", "amd"), ("amd1", "amd")],
    "n3": [("oneapi0", "oneapi"), ("cpu0", "cpu")],
    "n4": [("nvidia0", "nvidia")],
    "n5": [("amd0", "amd")],
}
POOLS = {"n1": ("gpu-a", "z1"), "n2": ("gpu-b", "z1"), "n3": ("cpu", "z2"), "n4": ("gpu-a", "z2")}


@dataclass
class SeriesData:
    labels: dict[str, str]
    type: str
    points: list[tuple[int, float]] = field(default_factory=list)


def _scrape_times(rng: random.Random, node: str) -> list[int]:
    """Millisecond timestamps at which the node's target was scraped."""
    offset = rng.randrange(0, INTERVAL * 1000)
    out: list[int] = []
    for i in range(DURATION // INTERVAL):
        base = T0 * 1000 + i * INTERVAL * 1000 + offset
        t = base + rng.randrange(-150, 151)
        # The millisecond promtool (and our loader) will read back: int(seconds * 1000).
        t = int(float(_format_ts(t)) * 1000)
        s = t / 1000
        if node == "n4" and s >= VANISH_AT:
            continue
        if node == "n5" and s < BORN_AT:
            continue
        if node == "n2" and GAP[0] <= s < GAP[1]:
            continue
        if rng.random() < 0.03:
            continue
        out.append(t)
    return out


def generate() -> list[SeriesData]:
    """The fleet's series, in a fixed order, from a fixed seed."""
    rng = random.Random(20240611)
    series: dict[tuple[tuple[str, str], ...], SeriesData] = {}

    def put(name: str, kind: str, labels: dict[str, str], t: int, v: float) -> None:
        full = {"__name__": name, **labels}
        key = tuple(sorted(full.items()))
        s = series.get(key)
        if s is None:
            s = series[key] = SeriesData(full, kind)
        s.points.append((t, v))

    for node, devices in NODES.items():
        times = _scrape_times(rng, node)
        restarts = {times[k] for k in rng.sample(range(len(times)), 2)} if node != "n5" else set()
        state: dict[str, dict[str, float]] = {}
        for dev, _vendor in devices:
            state[dev] = {
                "util": rng.random(),
                "temp": 50 + 20 * rng.random(),
                "fatal": 0.0,
                "recoverable": float(rng.randrange(0, 5)),
                "info": float(rng.randrange(0, 50)),
                "corrected": 1e6 + rng.random() * 1e6,
                "uncorrected": 0.0,
                "energy": 1e7 * rng.random(),
                "pod": 0.0,
            }
        pod_changes = {rng.randrange(0, 480) for _ in range(4)}
        for i, t in enumerate(times):
            restarted = t in restarts
            for dev, vendor in devices:
                st = state[dev]
                base = {"node": node, "device": dev, "vendor": vendor}
                st["util"] = min(1.0, max(0.0, st["util"] + rng.uniform(-0.08, 0.08)))
                st["temp"] += rng.uniform(-1.5, 1.5)
                if restarted:
                    for c in ("fatal", "recoverable", "info", "corrected", "uncorrected", "energy"):
                        st[c] = 0.0
                if rng.random() < 0.01:
                    st["fatal"] += 1
                if rng.random() < 0.05:
                    st["recoverable"] += rng.randrange(1, 3)
                st["info"] += rng.randrange(0, 3)
                st["corrected"] += rng.random() * 500
                if rng.random() < 0.02:
                    st["uncorrected"] += 1
                power = 100 + 300 * st["util"] + rng.uniform(-5, 5)
                st["energy"] += power * INTERVAL
                up = 0.0 if (node == "n1" and dev == "nvidia1" and 200 <= i < 230) else 1.0
                put("accel_up", "gauge", base, t, up)
                put("accel_utilization_ratio", "gauge", base, t, round(st["util"], 6))
                for sensor, delta in (("edge", 0.0), ("junction", 8.5)):
                    temp = st["temp"] + delta
                    if node == "n3" and dev == "cpu0" and sensor == "edge" and i % 97 == 13:
                        temp = float("nan")
                    put(
                        "accel_temperature_celsius",
                        "gauge",
                        {**base, "sensor": sensor},
                        t,
                        round(temp, 3),
                    )
                put("accel_power_watts", "gauge", base, t, round(power, 2))
                put("accel_memory_total_bytes", "gauge", base, t, 80e9)
                used = round(80e9 * (0.2 + 0.7 * st["util"]))
                put("accel_memory_used_bytes", "gauge", base, t, float(used))
                for sev in ("fatal", "recoverable", "info"):
                    put(
                        "accel_fault_events_total", "counter", {**base, "severity": sev}, t, st[sev]
                    )
                for typ in ("corrected", "uncorrected"):
                    put(
                        "accel_ecc_errors_total",
                        "counter",
                        {**base, "type": typ},
                        t,
                        round(st[typ], 3),
                    )
                put("accel_energy_joules_total", "counter", base, t, round(st["energy"], 1))
                if i in pod_changes:
                    st["pod"] += 1
                if not (node == "n3" and dev == "cpu0"):
                    pod = {"namespace": "ml", "pod": f"train-{node}-{dev}-{int(st['pod'])}"}
                    put("accel_device_pod_info", "gauge", {**base, **pod}, t, 1.0)
            if node in POOLS:
                pool, zone = POOLS[node]
                put("accel_node_info", "gauge", {"node": node, "pool": pool, "zone": zone}, t, 1.0)
            if node == "n1":
                k = i % 8
                specials = {
                    "inf": float("inf") if k != 3 else 1.0,
                    "neg_inf": float("-inf"),
                    "nan": float("nan") if k % 2 else 2.0,
                    "huge": 1e300 * (1 + k),
                    "tiny": 1e-300 * (1 + k),
                    "negative": -1.5 * k,
                    "zero": 0.0,
                }
                for kind, v in specials.items():
                    put("accel_special", "gauge", {"node": node, "kind": kind}, t, v)
    _add_histograms(series, put)
    return list(series.values())


BUCKETS = ("0.1", "0.5", "1", "5", "+Inf")


def _add_histograms(
    series: dict[tuple[tuple[str, str], ...], SeriesData],
    put: Callable[[str, str, dict[str, str], int, float], None],
) -> None:
    """Classic histogram buckets (``le``) per device, counted from its power
    readings; no random draws, so the other series stay as they were."""
    power = [s for s in series.values() if s.labels["__name__"] == "accel_power_watts"]
    for s in power:
        base = {k: v for k, v in s.labels.items() if k != "__name__"}
        raw = [0.0] * len(BUCKETS)
        for j, (t, p) in enumerate(s.points):
            for b in range(len(BUCKETS)):
                raw[b] += float((int(p) + j) % (3 + 2 * b))
            total = 0.0
            for b, le in enumerate(BUCKETS):
                total += raw[b]
                put("accel_step_seconds_bucket", "gauge", {**base, "le": le}, t, total)


def _format_value(v: float) -> str:
    if v != v:
        return "NaN"
    if v == float("inf"):
        return "+Inf"
    if v == float("-inf"):
        return "-Inf"
    return repr(v)


def _format_ts(ms: int) -> str:
    whole, frac = divmod(ms, 1000)
    return f"{whole}.{frac:03d}" if frac else str(whole)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def to_openmetrics(series: list[SeriesData]) -> str:
    """The series as OpenMetrics with timestamps, grouped by family, ``# EOF``-ended."""
    families: dict[str, list[SeriesData]] = {}
    for s in series:
        families.setdefault(s.labels["__name__"], []).append(s)
    lines: list[str] = []
    for name, members in families.items():
        kind = members[0].type
        family = name.removesuffix("_total") if kind == "counter" else name
        lines.append(f"# TYPE {family} {kind}")
        for s in members:
            labels = ",".join(f'{k}="{_escape(v)}"' for k, v in s.labels.items() if k != "__name__")
            head = f"{name}{{{labels}}}" if labels else name
            for t, v in s.points:
                lines.append(f"{head} {_format_value(v)} {_format_ts(t)}")
    lines.append("# EOF")
    return "\n".join(lines) + "\n"


def eval_times(series: list[SeriesData]) -> list[float]:
    """Instants to compare at: ordinary ones, one right on a sample 5 m back (the
    closed start of a [5m] window), and the edges of n4's 5 m lookback."""
    n4_last = max(t for s in series if s.labels.get("node") == "n4" for t, _ in s.points)
    n1_sample = next(
        t
        for s in series
        if s.labels.get("node") == "n1"
        for t, _ in s.points
        if t > (T0 + 4000) * 1000
    )
    return [
        T0 + 3600,
        T0 + 3600 + 7.5,
        T0 + 3300.25,
        BORN_AT + 40,
        (n1_sample + 300_000) / 1000,
        (n4_last + 300_000) / 1000,
        (n4_last + 300_001) / 1000,
        T0 + DURATION - 1,
    ]


EXPRESSIONS: list[str] = [
    # selectors and matchers
    "accel_utilization_ratio",
    'accel_utilization_ratio{vendor="nvidia"}',
    'accel_utilization_ratio{vendor!="nvidia"}',
    'accel_utilization_ratio{device=~"nvidia.*|amd0"}',
    'accel_utilization_ratio{device!~"nvidia.*"}',
    'accel_temperature_celsius{sensor="edge", node=~"n[12]"}',
    '{__name__=~"accel_memory_.*_bytes", node="n1"}',
    "accel_utilization_ratio offset 5m",
    'accel_up{missing=""}',
    'accel_up{vendor=~"nv.*|"}',
    "accel_special",
    "accel_device_pod_info",
    "accel_utilization_ratio[5m]",
    'accel_fault_events_total{node="n1"}[2m] offset 1m',
    # range functions
    "rate(accel_fault_events_total[5m])",
    'increase(accel_fault_events_total{severity="fatal"}[5m])',
    "increase(accel_ecc_errors_total[10m])",
    "rate(accel_energy_joules_total[1m])",
    "rate(accel_ecc_errors_total[30m] offset 10m)",
    "increase(accel_fault_events_total[1h])",
    "delta(accel_temperature_celsius[10m])",
    "delta(accel_memory_used_bytes[2m])",
    "changes(accel_up[30m])",
    "resets(accel_ecc_errors_total[1h])",
    "avg_over_time(accel_utilization_ratio[30m])",
    "min_over_time(accel_temperature_celsius[15m])",
    "max_over_time(accel_temperature_celsius[15m])",
    "sum_over_time(accel_power_watts[5m])",
    "count_over_time(accel_utilization_ratio[10m])",
    "last_over_time(accel_utilization_ratio[10m])",
    "last_over_time(accel_device_pod_info[1h])",
    "rate(accel_special[5m])",
    "max_over_time(accel_special[5m])",
    "min_over_time(accel_special[5m])",
    "avg_over_time(accel_special[5m])",
    "sum_over_time(accel_special[2m])",
    "changes(accel_special[10m])",
    "rate((accel_fault_events_total[5m]))",
    # other functions
    "abs(delta(accel_temperature_celsius[5m]))",
    "clamp(accel_temperature_celsius, 50, 70)",
    "clamp_min(accel_utilization_ratio, 0.5)",
    "clamp_max(accel_utilization_ratio, 0.5)",
    "clamp(accel_utilization_ratio, 0.8, 0.2)",
    "clamp(accel_special, -1, 1)",
    'absent(accel_up{node="n9"})',
    "absent(accel_up)",
    'absent(nonexistent{node="n1", device=~"x.*", vendor="a", vendor="b"})',
    "absent(sum(nonexistent))",
    'absent((nonexistent{node="n1"}))',
    "time()",
    "time() - accel_up",
    # aggregations
    "sum(accel_utilization_ratio)",
    "sum by (node) (accel_utilization_ratio)",
    "avg by (vendor) (accel_temperature_celsius)",
    "max without (sensor) (accel_temperature_celsius)",
    "min by (node, sensor) (accel_temperature_celsius)",
    "count by (vendor) (accel_up)",
    "count without (device, vendor) (accel_up)",
    "sum by (severity) (rate(accel_fault_events_total[5m]))",
    'sum by (__name__) ({__name__=~"accel_memory_.*"})',
    "sum without () (accel_up)",
    "count(nonexistent)",
    "sum by (kind) (accel_special)",
    "max(accel_special)",
    "min(accel_special)",
    "avg(accel_special)",
    "avg by (node) (accel_power_watts)",
    # arithmetic and comparisons
    "accel_memory_used_bytes / accel_memory_total_bytes",
    "accel_memory_used_bytes / on(node, device) group_left accel_memory_total_bytes",
    "accel_utilization_ratio * 100",
    "100 * accel_utilization_ratio - 5",
    "accel_power_watts % 7",
    "accel_utilization_ratio ^ 2",
    "2 ^ accel_utilization_ratio",
    "-accel_utilization_ratio",
    "accel_temperature_celsius > 60",
    "accel_temperature_celsius > bool 60",
    "60 < accel_temperature_celsius",
    "60 < bool accel_temperature_celsius",
    "accel_utilization_ratio == accel_utilization_ratio",
    "accel_utilization_ratio != bool 0.5",
    "accel_utilization_ratio * on(node) group_left(pool, zone) accel_node_info",
    "accel_node_info * on(node) group_right(pool) accel_utilization_ratio",
    "accel_node_info > on(node) group_right accel_utilization_ratio",
    "accel_utilization_ratio > on(node, device) accel_utilization_ratio offset 5m",
    "accel_temperature_celsius - ignoring(sensor) group_left accel_utilization_ratio",
    "accel_utilization_ratio < bool on(node, device) accel_up",
    "accel_utilization_ratio >= ignoring(vendor) accel_utilization_ratio",
    "1 + 2 * 3",
    "2 ^ 3 ^ 2",
    "10 % 3",
    "1 / 0",
    "-1 / 0",
    "0 / 0",
    "2 > bool 1",
    "-(1 - 3)",
    "(accel_utilization_ratio)",
    "accel_special * 2",
    "accel_special + accel_special",
    "accel_special > 0",
    "accel_special == bool accel_special",
    "accel_special % 1.5",
    # set operators
    "accel_utilization_ratio and accel_up == 1",
    "accel_utilization_ratio unless on(node, device) accel_device_pod_info",
    "accel_utilization_ratio or accel_temperature_celsius",
    'accel_up unless ignoring(vendor) accel_up{vendor="amd"}',
    "sum by (node) (accel_utilization_ratio) > 0.5 or sum by (node) (accel_power_watts)",
    "nonexistent or accel_up",
    "accel_up and nonexistent",
    # rules as they are written
    'increase(accel_fault_events_total{severity="fatal"}[5m]) > 0',
    "avg_over_time(accel_utilization_ratio[30m]) < 0.5 and on(node, device) accel_device_pod_info",
    "avg by (node) (accel_power_watts) > 0.9 * on() group_left avg(accel_power_watts)",
    'increase(accel_fault_events_total{severity="fatal"}[5m]) > 0'
    " or on(node, device) accel_up == 0",
    "changes(accel_device_pod_info[1h]) or on(node, device) (accel_up * 0)",
    # errors Prometheus raises too
    "accel_utilization_ratio + on() group_left accel_up",
    'abs({__name__=~"accel_memory_.*_bytes"})',
    "accel_temperature_celsius + on(node, device) accel_utilization_ratio",
    'rate({__name__=~"accel_(memory_used|memory_total)_bytes"}[5m])',
    "accel_temperature_celsius * on(node) group_left accel_utilization_ratio",
    '{__name__=~"accel_memory_.*_bytes"} * on(node, device) group_left accel_utilization_ratio',
    '-{__name__=~"accel_memory_.*_bytes"}',
    # PromQL 2.42's other aggregations
    "topk(3, accel_temperature_celsius)",
    "bottomk by (node) (1, accel_utilization_ratio)",
    "topk(2, accel_special)",
    "bottomk(2, accel_special)",
    "quantile(0.9, accel_utilization_ratio)",
    "quantile by (vendor) (0.5, accel_temperature_celsius)",
    "quantile(0.3, accel_special)",
    'count_values("value", accel_up)',
    'count_values by (node) ("temp", round(accel_temperature_celsius))',
    "stddev by (node) (accel_power_watts)",
    "stdvar(accel_utilization_ratio)",
    "group by (vendor) (accel_up)",
    'avg(accel_special{kind="huge"} * 1e7)',
    # label functions
    'label_replace(accel_up, "host", "$1", "node", "n(.*)")',
    'label_replace(accel_up, "vendor", "", "vendor", "amd")',
    'label_replace(accel_up, "x", "${1}-$2", "device", "([a-z]+)([0-9]+)")',
    'label_join(accel_up, "id", "/", "node", "device")',
    # classic histograms
    "histogram_quantile(0.9, rate(accel_step_seconds_bucket[5m]))",
    "histogram_quantile(0.5, sum by (le, node) (rate(accel_step_seconds_bucket[10m])))",
    "histogram_quantile(0.99, accel_step_seconds_bucket)",
    "histogram_quantile(1.5, accel_step_seconds_bucket)",
    # subqueries and @
    "max_over_time(rate(accel_energy_joules_total[1m])[10m:1m])",
    "avg_over_time(accel_utilization_ratio[30m:45s] offset 5m)",
    "rate(accel_fault_events_total[5m:30s])",
    "min_over_time(sum by (node) (accel_power_watts)[20m:])",
    'avg_over_time((accel_special{kind="huge"} * 1e7)[5m:15s])',
    "accel_up @ 1700003600",
    "rate(accel_energy_joules_total[5m] @ 1700004000)",
    "accel_utilization_ratio @ end() - accel_utilization_ratio offset 10m",
    "max_over_time(accel_power_watts[10m:1m] @ 1700005000)",
    "accel_utilization_ratio[5m:1m]",
    # range functions that read every point
    "deriv(accel_temperature_celsius[15m])",
    "predict_linear(accel_memory_used_bytes[30m], 3600)",
    "irate(accel_energy_joules_total[5m])",
    "idelta(accel_temperature_celsius[5m])",
    "holt_winters(accel_utilization_ratio[10m], 0.5, 0.3)",
    "quantile_over_time(0.9, accel_power_watts[10m])",
    "stddev_over_time(accel_temperature_celsius[10m])",
    "stdvar_over_time(accel_special[5m])",
    "present_over_time(accel_up[5m])",
    'absent_over_time(accel_up{node="n9"}[5m])',
    'absent_over_time(accel_up{node="n4"}[10m])',
    "irate(accel_special[5m])",
    "deriv(accel_special[5m])",
    "sum_over_time(accel_special[5m:30s])",
    # functions of an instant vector
    "round(accel_temperature_celsius)",
    "round(accel_power_watts, 5)",
    "ceil(accel_temperature_celsius) - floor(accel_temperature_celsius)",
    "exp(accel_utilization_ratio)",
    "ln(accel_power_watts)",
    "log2(accel_power_watts)",
    "log10(accel_special)",
    "sqrt(accel_utilization_ratio)",
    "sgn(accel_special)",
    "sin(accel_utilization_ratio) + cos(accel_utilization_ratio) + tan(accel_utilization_ratio)",
    "asin(accel_utilization_ratio) + acos(accel_utilization_ratio) + atan(accel_special)",
    "sinh(accel_utilization_ratio) + cosh(accel_utilization_ratio) + tanh(accel_special)",
    "asinh(accel_special) + acosh(accel_power_watts) + atanh(accel_utilization_ratio * 0.5)",
    "deg(accel_utilization_ratio) + rad(accel_temperature_celsius)",
    "pi()",
    "sort(accel_utilization_ratio)",
    "sort_desc(accel_power_watts)",
    "timestamp(accel_up)",
    "timestamp(sum(accel_up))",
    "vector(1)",
    "vector(time())",
    "scalar(sum(accel_up))",
    "scalar(accel_up)",
    "minute()",
    "hour(timestamp(accel_up))",
    "day_of_week() + day_of_month() + day_of_year() + days_in_month() + month() + year()",
    "year(vector(1700000000))",
    "accel_utilization_ratio atan2 accel_up",
    'accel_up{vendor=~"(?i)NVIDIA"}',
    'accel_up{device=~"((?i)NV)idia.*"}',
]
