"""The built-in evaluator's cycle time at fleet scale, beside Prometheus's.

What is measured
----------------
* **Ours**: one full cycle of ``RULES`` (twenty remediation rules of the kind the
  shipped rule sets hold, and five that use ``topk``, ``label_replace``,
  ``histogram_quantile`` over one classic histogram per node, a subquery and
  ``predict_linear``) through ``Evaluator.instant`` at one instant, over
  10,000 nodes x 8 devices (80,000 series per metric, 880,000 in all) after 60
  minutes of 15 s scrapes into a ``SeriesStore`` that keeps the retention the rules
  need (``required_retention``: 35 minutes). The figure is the median of 5 cycles,
  each at a new instant after a new scrape was appended, so no cycle reuses the
  previous one's caches. One process, one thread: numpy's element-wise operations
  are single-threaded, and nothing here calls BLAS.
* **Prometheus**: the same rules as one recording-rule group in Debian's
  Prometheus 2.42, over the same series (same names, labels, values and
  timestamps), and its own figure for one evaluation of the group,
  ``prometheus_rule_group_last_duration_seconds``: the median of 5 evaluations after
  a first one that is left out. ``GOMAXPROCS=1`` holds it to one core as well.
* **The ratio** is taken at one scale, on one data set: ours is timed again on the
  very series Prometheus was given (``--prometheus-nodes``, 1,000 nodes by default,
  88,000 series). Prometheus's figure scaled linearly to the full fleet is printed
  too, marked as an estimate.

How Prometheus gets the same data
---------------------------------
Backfill, not scraping. A live scrape would need half an hour of wall time before
a ``[30m]`` window is as full as ours, and 880,000 series exposed every 15 s (and
written as text and backfilled: about 13 GB of OpenMetrics) is more than a
benchmark should ask of the machine that runs it; hence the smaller side-by-side
scale. The series are written as OpenMetrics (the last ``--backfill-minutes`` of
them, which must cover the rules' longest window, 30 minutes) and loaded with
``promtool tsdb create-blocks-from openmetrics``; Prometheus starts on that data
directory with the rules file and a long ``--storage.tsdb.retention.time``.
Prometheus evaluates rules at wall-clock time, so the samples are dated ahead by
an estimate of the time writing and backfilling takes, and the benchmark waits
until the newest one is in the past: Prometheus's windows are as full as ours
(``data_age_at_start_seconds`` in the JSON says by how much the estimate fell
short, if it did).

Prometheus's samples are then in blocks (memory-mapped, compressed chunks decoded
per query); on a live server the last hours would be in the head, also in
compressed chunks. Ours are in numpy arrays. That is the design under test.

Run: ``python bench/evaluator.py`` (``--help`` for the knobs; ``--json FILE``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import Any, NoReturn, TextIO

import numpy as np

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from autoscaler.promql.evaluator import Evaluator  # noqa: E402
from autoscaler.promql.store import SeriesStore  # noqa: E402
from autoscaler.promql.support import required_retention, unsupported  # noqa: E402
from bench.scrape import BenchError, Server, start_server  # noqa: E402

T0 = 1_700_000_000.0
INTERVAL = 15.0
CYCLES = 5
EVALUATIONS = 5

RULES: list[str] = [
    'increase(accel_fault_events_total{severity="fatal"}[5m]) > 0',
    "avg_over_time(accel_utilization_ratio[30m]) < 0.05 and on(node, device) accel_device_pod_info",
    "avg by (node) (accel_temperature_celsius)"
    " > 1.2 * on() group_left avg(accel_temperature_celsius)",
    "accel_up == 0",
    "max_over_time(accel_temperature_celsius[5m]) > 90",
    "accel_memory_used_bytes / accel_memory_total_bytes > 0.95",
    'increase(accel_ecc_errors_total{type="uncorrected"}[10m]) > 0',
    'rate(accel_fault_events_total{severity="recoverable"}[15m]) > 0.01',
    "avg_over_time(accel_power_watts[10m]) > 650",
    "sum by (node) (accel_utilization_ratio) / count by (node) (accel_utilization_ratio) < 0.1",
    "changes(accel_up[15m]) > 2",
    "min_over_time(accel_utilization_ratio[30m]) > 0.98"
    " unless on(node, device) accel_throttle_active == 1",
    'avg_over_time(accel_throttle_active{reason="thermal"}[10m]) > 0.5',
    "count by (node) (accel_up == 0) >= 2",
    "accel_utilization_ratio < 0.02 and on(node, device) accel_memory_used_bytes > 1e9",
    "delta(accel_temperature_celsius[10m]) > 15",
    "sum by (node) (increase(accel_fault_events_total[30m])) > 5",
    "resets(accel_fault_events_total[30m]) > 0",
    "last_over_time(accel_up[10m]) unless on(node, device) accel_device_pod_info",
    'absent(accel_up{node="node-00000"})',
    # PromQL 2.42 beyond the remediation subset: the functions rule authors reach
    # for next (top-k, label rewriting, classic-histogram quantiles, subqueries).
    "topk by (node) (1, accel_temperature_celsius) > 95",
    'label_replace(accel_up == 0, "host", "$1", "node", "node-(.*)")',
    "histogram_quantile(0.99, sum by (node, le) (rate(accel_step_seconds_bucket[5m]))) > 2",
    "max_over_time(avg by (node) (accel_utilization_ratio)[10m:1m]) < 0.05",
    "predict_linear(accel_memory_used_bytes[10m], 1800) > 150e9",
]
BUCKETS = ("0.25", "0.5", "1", "2.5", "+Inf")
"""The ``le`` bounds of ``accel_step_seconds_bucket``, one histogram per node."""


class Fleet:
    """Deterministic series for ``nodes`` x ``devices``, one scrape at a time."""

    def __init__(self, nodes: int, devices: int, seed: int = 7) -> None:
        self.nodes = nodes
        self.devices = devices
        self.rng = np.random.default_rng(seed)
        n = nodes * devices
        self.n = n
        self.node_names = [f"node-{i:05d}" for i in range(nodes)]
        self.util = self.rng.random(n)
        self.temp = 45 + 25 * self.rng.random(n)
        self.fatal = np.zeros(n)
        self.recoverable = np.zeros(n)
        self.ecc = np.zeros(n)
        self.up = np.ones(n)
        self.steps = np.zeros((nodes, len(BUCKETS)))

    def label_sets(self) -> dict[str, list[dict[str, str]]]:
        """Each family's series in device order (node-major)."""
        base = [
            {"node": node, "device": f"nvidia{d}", "vendor": "nvidia"}
            for node in self.node_names
            for d in range(self.devices)
        ]
        pods = [
            {**b, "namespace": "ml", "pod": f"train-{i // self.devices}-{i % self.devices}"}
            for i, b in enumerate(base)
        ]
        return {
            "accel_up": base,
            "accel_utilization_ratio": base,
            "accel_temperature_celsius": [{**b, "sensor": "edge"} for b in base],
            "accel_memory_used_bytes": base,
            "accel_memory_total_bytes": base,
            "accel_power_watts": base,
            "accel_fault_events_total:fatal": [{**b, "severity": "fatal"} for b in base],
            "accel_fault_events_total:recoverable": [
                {**b, "severity": "recoverable"} for b in base
            ],
            "accel_ecc_errors_total": [{**b, "type": "uncorrected"} for b in base],
            "accel_device_pod_info": pods,
            "accel_throttle_active": [{**b, "reason": "thermal"} for b in base],
            "accel_step_seconds_bucket": [
                {"node": node, "le": le} for node in self.node_names for le in BUCKETS
            ],
        }

    def scrape(self) -> dict[str, np.ndarray]:
        """The next scrape's values, per family key of ``label_sets``."""
        rng = self.rng
        n = self.n
        self.util = np.clip(self.util + rng.normal(0, 0.05, n), 0, 1)
        self.temp = np.clip(self.temp + rng.normal(0, 0.8, n), 30, 100)
        self.fatal += rng.random(n) < 0.0005
        self.recoverable += (rng.random(n) < 0.02) * rng.integers(1, 4, n)
        self.ecc += rng.random(n) < 0.001
        restart = rng.random(n) < 0.0002
        self.fatal[restart] = 0
        self.recoverable[restart] = 0
        self.up = np.where(rng.random(n) < 0.00005, 1 - self.up, self.up)
        return {
            "accel_up": self.up.copy(),
            "accel_utilization_ratio": np.round(self.util, 4),
            "accel_temperature_celsius": np.round(self.temp, 2),
            "accel_memory_used_bytes": np.round(80e9 * (0.1 + 0.85 * self.util)),
            "accel_memory_total_bytes": np.full(n, 80e9),
            "accel_power_watts": np.round(90 + 600 * self.util, 1),
            "accel_fault_events_total:fatal": self.fatal.copy(),
            "accel_fault_events_total:recoverable": self.recoverable.copy(),
            "accel_ecc_errors_total": self.ecc.copy(),
            "accel_device_pod_info": np.ones(n),
            "accel_throttle_active": (self.temp > 92).astype(np.float64),
            "accel_step_seconds_bucket": self._steps(),
        }

    def _steps(self) -> np.ndarray:
        """The next cumulative bucket counts, node-major (``label_sets``'s order)."""
        width = len(BUCKETS)
        self.steps += self.rng.integers(0, 4, (self.nodes, width))
        out: np.ndarray = np.cumsum(self.steps, axis=1).reshape(-1)
        return out


def family_name(key: str) -> str:
    return key.split(":", 1)[0]


def build_store(
    fleet: Fleet, start: float, minutes: int, interval: float
) -> tuple[SeriesStore, dict[str, np.ndarray], float]:
    """Fills a store with ``minutes`` of scrapes from ``start``; returns it, the
    refs per family key, and the time of the last scrape."""
    store = SeriesStore(retention=max(required_retention(r) for r in RULES))
    refs = {
        key: store.refs({**ls, "__name__": family_name(key)} for ls in sets)
        for key, sets in fleet.label_sets().items()
    }
    steps = int(minutes * 60 / interval) + 1
    t = start
    for step in range(steps):
        t = start + step * interval
        for key, values in fleet.scrape().items():
            store.append(refs[key], t, values)
    return store, refs, t


def time_cycles(
    store: SeriesStore,
    refs: dict[str, np.ndarray],
    fleet: Fleet,
    t: float,
    interval: float,
    cycles: int,
) -> tuple[list[float], dict[str, float], dict[str, int]]:
    """Seconds per full cycle, the slowest cycle's per-rule seconds, result sizes."""
    evaluator = Evaluator(store)
    for rule in RULES:
        evaluator.check(rule)
    durations: list[float] = []
    per_rule: dict[str, float] = {}
    sizes: dict[str, int] = {}
    for _ in range(cycles):
        t += interval
        for key, values in fleet.scrape().items():
            store.append(refs[key], t, values)
        rule_times: dict[str, float] = {}
        began = time.perf_counter()
        for rule in RULES:
            r0 = time.perf_counter()
            result = evaluator.instant(rule, t)
            rule_times[rule] = time.perf_counter() - r0
            sizes[rule] = len(getattr(result, "samples", ()))
        durations.append(time.perf_counter() - began)
        if durations[-1] >= max(durations):
            per_rule = rule_times
    return durations, per_rule, sizes


# -- Prometheus ------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _format_ts(ms: int) -> str:
    whole, frac = divmod(ms, 1000)
    return f"{whole}.{frac:03d}" if frac else str(whole)


def _heads(fleet: Fleet) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for key, sets in fleet.label_sets().items():
        name = family_name(key)
        out[key] = [name + "{" + ",".join(f'{k}="{v}"' for k, v in ls.items()) + "}" for ls in sets]
    return out


def backfill_data(
    fleet: Fleet, end_ms: int, minutes: int, out: Path, workdir: Path
) -> tuple[SeriesStore, dict[str, np.ndarray], float]:
    """Writes ``minutes`` of scrapes ending at ``end_ms`` as OpenMetrics, and the
    same scrapes into a store of ours; returns the store, its refs, the last time."""
    store = SeriesStore(retention=max(required_retention(r) for r in RULES))
    refs = {
        key: store.refs({**ls, "__name__": family_name(key)} for ls in sets)
        for key, sets in fleet.label_sets().items()
    }
    heads = _heads(fleet)
    steps = int(minutes * 60 / INTERVAL) + 1
    interval_ms = int(INTERVAL * 1000)
    files: dict[str, TextIO] = {}
    with contextlib.ExitStack() as stack:
        for key in refs:
            name = family_name(key)
            if name not in files:
                files[name] = stack.enter_context((workdir / f"{name}.part").open("w"))
        t = 0.0
        for step in range(steps):
            ms = end_ms - (steps - 1 - step) * interval_ms
            t = ms / 1000
            stamp = _format_ts(ms)
            for key, values in fleet.scrape().items():
                store.append(refs[key], t, values)
                files[family_name(key)].write(
                    "".join(
                        f"{h} {v!r} {stamp}\n"
                        for h, v in zip(heads[key], values.tolist(), strict=True)
                    )
                )
    with out.open("w") as f:
        for name in files:
            kind = "counter" if name.endswith("_total") else "gauge"
            family = name.removesuffix("_total") if kind == "counter" else name
            f.write(f"# TYPE {family} {kind}\n")
            part = workdir / f"{name}.part"
            with part.open() as src:
                while chunk := src.read(1 << 24):
                    f.write(chunk)
            part.unlink()
        f.write("# EOF\n")
    return store, refs, t


_GROUP = re.compile(r'^(prometheus_rule_group_\w+)\{[^}]*rule_group="[^"]*;bench"[^}]*\} (\S+)$')


def _group_metrics(body: bytes) -> dict[str, float]:
    out: dict[str, float] = {}
    for line in body.decode(errors="replace").splitlines():
        m = _GROUP.match(line)
        if m:
            out[m.group(1)] = float(m.group(2))
    return out


def prometheus_durations(
    prometheus: str, data: Path, workdir: Path, stack: contextlib.ExitStack, evaluations: int
) -> tuple[list[float], int]:
    """Starts Prometheus on ``data`` with RULES as one group; returns the group's
    ``last_duration`` for ``evaluations`` evaluations after a first, warm-up one,
    and how many series ``accel_up`` has there (a check that it sees the data)."""
    rules = workdir / "rules.yml"
    rules.write_text(
        json.dumps(
            {
                "groups": [
                    {
                        "name": "bench",
                        "interval": "4s",
                        "rules": [
                            {"record": f"bench:rule_{i:02d}", "expr": r}
                            for i, r in enumerate(RULES)
                        ],
                    }
                ]
            }
        )
    )
    config = workdir / "prometheus.yml"
    config.write_text(
        f"global:\n  evaluation_interval: 4s\nrule_files: [{json.dumps(str(rules))}]\n"
    )
    port = _free_port()
    # One core, like the evaluator's one Python thread (inherited by the child).
    os.environ["GOMAXPROCS"] = "1"
    server: Server = start_server(
        "prometheus",
        [
            prometheus,
            f"--config.file={config}",
            f"--storage.tsdb.path={data}",
            "--storage.tsdb.retention.time=100y",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
        ],
        port,
        workdir,
        stack,
    )
    seen: dict[float, float] = {}
    failures = 0.0
    deadline = time.monotonic() + 60 + 8 * (evaluations + 1)
    while len(seen) < evaluations + 1:
        if server.proc.poll() is not None:
            raise BenchError(f"prometheus exited; its log:\n{server.log_tail()}")
        if time.monotonic() > deadline:
            raise BenchError(f"no {evaluations + 1} rule evaluations in time: {sorted(seen)}")
        with contextlib.suppress(OSError):
            with urllib.request.urlopen(server.url, timeout=5) as resp:
                got = _group_metrics(resp.read())
            when = got.get("prometheus_rule_group_last_evaluation_timestamp_seconds", 0.0)
            if when > 0:
                seen[when] = got["prometheus_rule_group_last_duration_seconds"]
            failures = max(failures, got.get("prometheus_rule_evaluation_failures_total", 0.0))
        time.sleep(0.25)
    if failures:
        raise BenchError(f"{failures:g} rule evaluations failed; its log:\n{server.log_tail()}")
    base = server.url.removesuffix("/metrics")
    query = urllib.parse.urlencode({"query": "count(accel_up)"})
    with urllib.request.urlopen(f"{base}/api/v1/query?{query}", timeout=30) as resp:
        result = json.load(resp)["data"]["result"]
    series = int(result[0]["value"][1]) if result else 0
    server.stop()
    return [seen[k] for k in sorted(seen)][1:], series


# -- report ----------------------------------------------------------------------


def _median(values: Sequence[float]) -> float:
    return statistics.median(values)


def machine() -> dict[str, Any]:
    model = "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.partition(":")[2].strip()
                break
    return {
        "cpu_model": model,
        "nproc": len(os.sched_getaffinity(0)),
        "python": platform.python_version(),
        "numpy": np.__version__,
    }


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="bench/evaluator.py",
        description="One cycle of twenty-five rules: the built-in evaluator beside Prometheus.",
    )
    p.add_argument("--nodes", type=int, default=10_000, help="nodes (default %(default)s)")
    p.add_argument("--devices", type=int, default=8, help="devices per node (default %(default)s)")
    p.add_argument("--minutes", type=int, default=60, help="history ingested (default %(default)s)")
    p.add_argument(
        "--prometheus-nodes",
        type=int,
        default=1000,
        help="nodes for the side-by-side run with Prometheus; 0 skips it (default %(default)s)",
    )
    p.add_argument(
        "--backfill-minutes",
        type=int,
        default=36,
        help="minutes backfilled into Prometheus; at least the longest window plus one "
        "(default %(default)s)",
    )
    p.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    return p


def _ours(nodes: int, devices: int, minutes: int) -> dict[str, Any]:
    fleet = Fleet(nodes, devices)
    began = time.perf_counter()
    store, refs, t = build_store(fleet, T0, minutes, INTERVAL)
    built = time.perf_counter() - began
    durations, per_rule, sizes = time_cycles(store, refs, fleet, t, INTERVAL, CYCLES)
    return {
        "nodes": nodes,
        "series": store.series_count,
        "samples_kept": store.sample_count,
        "build_seconds": built,
        "cycle_seconds": durations,
        "median_cycle_seconds": _median(durations),
        "slowest_cycle_per_rule_seconds": per_rule,
        "result_sizes": sizes,
    }


def bench(args: argparse.Namespace) -> dict[str, Any]:
    problems = {r: unsupported(r) for r in RULES if unsupported(r)}
    if problems:
        raise BenchError(f"rules outside the built-in evaluator's subset: {problems}")
    print(
        f"built-in evaluator: {args.nodes} nodes x {args.devices} devices, "
        f"{args.minutes} min of {INTERVAL:g} s scrapes...",
        flush=True,
    )
    report: dict[str, Any] = {
        "machine": machine(),
        "rules": RULES,
        "ours": _ours(args.nodes, args.devices, args.minutes),
    }
    if args.prometheus_nodes <= 0:
        return report
    prometheus = shutil_which("prometheus")
    promtool = shutil_which("promtool")
    banner = subprocess.run(
        [prometheus, "--version"], capture_output=True, text=True, check=False
    ).stdout
    found = re.search(r"version (\d+\.\d+\.\d+)", banner)
    version = f"Prometheus {found.group(1) if found else 'unknown'}"
    nodes = args.prometheus_nodes
    print(
        f"side by side with {version}: {nodes} nodes, {args.backfill_minutes} min backfilled...",
        flush=True,
    )
    with contextlib.ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="accel-bench-")))
        fleet = Fleet(nodes, args.devices)
        om = workdir / "fleet.om"
        # The newest sample should be "now" when Prometheus first evaluates: date
        # the data ahead by a generous estimate of writing and backfilling it.
        lines = fleet.n * len(fleet.label_sets()) * (args.backfill_minutes * 4 + 1)
        end_ms = int((time.time() + 10 + lines * 4e-6) * 1000)
        store, refs, t = backfill_data(fleet, end_ms, args.backfill_minutes, om, workdir)
        data = workdir / "data"
        began = time.perf_counter()
        proc = subprocess.run(
            [promtool, "tsdb", "create-blocks-from", "openmetrics", str(om), str(data)],
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0:
            raise BenchError(f"promtool could not backfill: {proc.stderr[-2000:]}")
        backfill_seconds = time.perf_counter() - began
        om.unlink()
        # Let the wall clock pass the newest sample, so Prometheus's windows are full.
        lag = time.time() - end_ms / 1000
        time.sleep(max(0.0, 1 - lag))
        prom, series = prometheus_durations(prometheus, data, workdir, stack, EVALUATIONS)
        ours_durations, _, _ = time_cycles(store, refs, fleet, t, INTERVAL, CYCLES)
    expected = nodes * args.devices
    if series != expected:
        raise BenchError(f"Prometheus sees {series} accel_up series, not {expected}")
    ours_same = _median(ours_durations)
    theirs = _median(prom)
    report["side_by_side"] = {
        "prometheus": version,
        "nodes": nodes,
        "series": store.series_count,
        "backfill_seconds": backfill_seconds,
        "data_age_at_start_seconds": max(0.0, lag),
        "ours_cycle_seconds": ours_durations,
        "ours_median_seconds": ours_same,
        "prometheus_group_seconds": prom,
        "prometheus_median_seconds": theirs,
        "ratio_ours_over_prometheus": ours_same / theirs if theirs else None,
        "prometheus_scaled_to_full_seconds_estimate": theirs * args.nodes / nodes,
    }
    return report


def shutil_which(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise BenchError(f"{name} is not on PATH: install Debian's prometheus package")
    return path


def render(r: dict[str, Any]) -> str:
    ours = r["ours"]
    lines = [
        f"machine: {r['machine']['cpu_model']}, python {r['machine']['python']}, "
        f"numpy {r['machine']['numpy']}",
        f"built-in evaluator, {ours['nodes']} nodes, {ours['series']} series: "
        f"median cycle {ours['median_cycle_seconds']:.3f} s of {len(RULES)} rules "
        f"(cycles: {', '.join(f'{d:.3f}' for d in ours['cycle_seconds'])})",
    ]
    slow = sorted(ours["slowest_cycle_per_rule_seconds"].items(), key=lambda kv: -kv[1])[:3]
    lines += [f"  slowest rule: {s * 1000:7.1f} ms  {rule}" for rule, s in slow]
    side = r.get("side_by_side")
    if side:
        lines += [
            f"side by side, {side['nodes']} nodes, {side['series']} series, same data:",
            f"  built-in evaluator       median {side['ours_median_seconds']:.4f} s",
            f"  {side['prometheus']:<24} median {side['prometheus_median_seconds']:.4f} s "
            "(prometheus_rule_group_last_duration_seconds, GOMAXPROCS=1)",
            f"  ours/Prometheus          {side['ratio_ours_over_prometheus']:.2f}",
        ]
        if side["nodes"] != ours["nodes"]:
            lines.append(
                f"  Prometheus at {ours['nodes']} nodes, scaled linearly (an estimate): "
                f"{side['prometheus_scaled_to_full_seconds_estimate']:.3f} s beside our "
                f"{ours['median_cycle_seconds']:.3f} s"
            )
    return "\n".join(lines)


def _on_sigterm(signum: int, frame: FrameType | None) -> NoReturn:
    raise SystemExit(128 + signum)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        result = bench(args)
    except BenchError as e:
        print(f"bench/evaluator.py: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("bench/evaluator.py: interrupted; Prometheus stopped", file=sys.stderr)
        return 130
    finally:
        signal.signal(signal.SIGTERM, previous)
    print(render(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
