"""Scrape cost of accel-exporter beside Debian's node_exporter, from one run.

What is measured:

* **Scrape latency**, p50 and p99, of ``GET /metrics`` on our exporter (sim backend,
  64 simulated devices by default) and on ``prometheus-node-exporter``, and the
  ratio ours/theirs. The clock runs from sending the request to having read the
  whole body.
* **Throughput** (scrapes per second of wall time) and **server CPU per scrape**:
  the server process's on-CPU time (every thread, from the scheduler's nanosecond
  counters) during its own scrape batches, divided by its scrapes. A background
  poll of ours that falls inside one of its batches is counted: it is part of the
  cost.
* **Our RSS** after the warm-up and after the measured scrapes, and its growth: a
  server of cached bytes should not grow per scrape (node_exporter's is shown too).
* **Poll duration** of the simulated devices: the median of
  ``accel_exporter_poll_duration_seconds{backend="sim"}`` over distinct polls (told
  apart by their success timestamp, the first, discovering poll left out), first on
  an idle machine (the headline), then as seen between the measured rounds.

Why the comparison is fair:

* **Same series.** node_exporter serves, through its textfile collector, exactly the
  exposition our exporter rendered (scraped once and written, as is, to a ``.prom``
  file), with its default collectors and its exporter metrics off. Both sample
  counts are printed and must agree within a few: node_exporter 1.5 adds 7 of its
  own (``node_textfile_*``, ``node_scrape_collector_*``, its build info and the
  promhttp error counters).
* **Same client.** One aiohttp session, the same concurrency, keep-alive
  connections, and ``Accept-Encoding: gzip`` as Prometheus sends it; both servers
  answer gzip (checked on every response). The body is read whole but not
  decompressed, so the client's own work stays small and alike for both.
* **Same noise.** The measured scrapes run in 10 interleaved rounds, the order
  alternating each round, after a warm-up of both, so a noisy neighbour on a shared
  machine hits both alike.
* **Same cores.** node_exporter runs with its default ``--runtime.gomaxprocs=1``;
  our HTTP server is one Python event loop: each serves on one core.

What differs is the design under test, not a handicap added to either side:
node_exporter reads and parses the textfile on every scrape, then encodes and
gzips it; ours serves the bytes it rendered and gzipped once per poll. So this
measures what serving these series costs the node, not how fast Go or Python is.

Every process this starts is stopped on exit, on Ctrl-C and on SIGTERM (and is told
by the kernel to stop if this process is killed outright).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import json
import math
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
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, NoReturn

import aiohttp
import psutil

REPO = Path(__file__).resolve().parent.parent
NODE_EXPORTER = "prometheus-node-exporter"
DEFAULT_DEVICES = "nvidia:32,amd:24,oneapi:8"
POLL_INTERVAL = 5.0  # our exporter's --poll-interval, as in production
READY_TIMEOUT = 15.0
ROUNDS = 10
REQUEST_TIMEOUT = 30.0
MIB = 1024 * 1024
# node_exporter 1.5 adds 7 of its own: node_textfile_{mtime_seconds,scrape_error},
# node_scrape_collector_{duration_seconds,success}, node_exporter_build_info and
# promhttp_metric_handler_errors_total{cause} (2); more than a few beyond is a mismatch.
SERIES_SLACK = 10
NODE_EXPORTER_FLAGS = (
    "--collector.disable-defaults",
    "--collector.textfile",
    "--collector.textfile.directory",
    "--web.disable-exporter-metrics",
    "--web.listen-address",
)

# A proxy from the environment must never see a request to 127.0.0.1.
_HTTP = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class BenchError(Exception):
    """A reason the benchmark cannot give a figure; printed as one message."""


# -- processes -------------------------------------------------------------------


def _die_with_parent() -> None:
    """Runs in the child before exec: SIGTERM it if this benchmark dies, even by
    SIGKILL, so no exporter is left behind holding a port."""
    with contextlib.suppress(OSError, AttributeError):
        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class Server:
    name: str
    proc: subprocess.Popen[bytes]
    url: str
    log: Path

    def log_tail(self, lines: int = 15) -> str:
        try:
            text = self.log.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)


def start_server(
    name: str, argv: Sequence[str], port: int, workdir: Path, stack: contextlib.ExitStack
) -> Server:
    log = workdir / f"{name}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=REPO,
            # Its own session: a Ctrl-C reaches only us, and we stop it in order.
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
    server = Server(name, proc, f"http://127.0.0.1:{port}/metrics", log)
    stack.callback(server.stop)
    return server


def fetch(url: str, timeout: float = 5.0) -> bytes:
    """One plain (uncompressed) GET, for setup and checks rather than timing."""
    with _HTTP.open(url, timeout=timeout) as resp:
        body: bytes = resp.read()
        return body


def wait_ready(server: Server, ready: Callable[[bytes], bool]) -> bytes:
    """Polls /metrics until ``ready(body)``, the process exits, or READY_TIMEOUT."""
    deadline = time.monotonic() + READY_TIMEOUT
    last = "no answer yet"
    while time.monotonic() < deadline:
        rc = server.proc.poll()
        if rc is not None:
            raise BenchError(
                f"{server.name} exited with status {rc} before it was ready; its log:\n"
                f"{server.log_tail()}"
            )
        try:
            body = fetch(server.url, timeout=2.0)
        except (urllib.error.URLError, OSError) as e:
            last = str(e)
        else:
            if ready(body):
                return body
            last = "answered, but not with what it should serve yet"
        time.sleep(0.1)
    raise BenchError(
        f"{server.name} was not ready at {server.url} within {READY_TIMEOUT:g} s "
        f"({last}); its log:\n{server.log_tail()}"
    )


def node_exporter_version(path: str) -> str:
    proc = subprocess.run([path, "--version"], capture_output=True, timeout=10, check=False)
    out = proc.stdout + proc.stderr
    m = re.search(rb"version (\S+)", out)
    return m.group(1).decode() if m else "unknown"


def check_node_exporter_flags(path: str) -> None:
    proc = subprocess.run([path, "--help"], capture_output=True, timeout=10, check=False)
    text = (proc.stdout + proc.stderr).decode(errors="replace")
    missing = [f for f in NODE_EXPORTER_FLAGS if f not in text]
    if missing:
        raise BenchError(f"{path} does not support {', '.join(missing)} (see its --help)")


# -- exposition ------------------------------------------------------------------


def count_samples(text: bytes) -> int:
    return sum(1 for line in text.splitlines() if line.strip() and not line.startswith(b"#"))


def sample_value(text: bytes, series: str) -> float | None:
    m = re.search(rb"^" + re.escape(series.encode()) + rb" (\S+)$", text, re.MULTILINE)
    return float(m.group(1)) if m else None


POLL_DURATION = 'accel_exporter_poll_duration_seconds{backend="sim"}'
LAST_SUCCESS = 'accel_exporter_last_success_timestamp_seconds{backend="sim"}'
SIM_UP = b'accel_exporter_backend_up{backend="sim"} 1\n'


@dataclass
class PollSamples:
    """Distinct polls, keyed by their success timestamp, so that two scrapes of the
    same poll count once."""

    # The poll seen when the exporter became ready may be the one that discovered the
    # devices, which costs more than a steady poll: it is not counted.
    discovery: float | None = None
    idle: dict[float, float] = field(default_factory=dict)
    loaded: dict[float, float] = field(default_factory=dict)

    def add(self, text: bytes, *, under_load: bool) -> None:
        when, took = sample_value(text, LAST_SUCCESS), sample_value(text, POLL_DURATION)
        if when is None or took is None or when == self.discovery or when in self.idle:
            return
        (self.loaded if under_load else self.idle).setdefault(when, took)


# -- load ------------------------------------------------------------------------


@dataclass
class Target:
    name: str
    url: str
    pid: int
    latencies: list[float] = field(default_factory=list)
    wall: float = 0.0
    cpu: float = 0.0  # the server's on-CPU seconds during its measured batches
    body_bytes: int = 0


HEADERS = {"Accept-Encoding": "gzip"}
# For reading a value (aiohttp would otherwise ask for gzip, which we do not decode).
PLAIN = {"Accept-Encoding": "identity"}


async def scrape_batch(
    session: aiohttp.ClientSession, target: Target, n: int, concurrency: int, *, record: bool
) -> None:
    """``n`` scrapes of one target by ``concurrency`` workers, each waiting for its
    previous answer (Prometheus's habit: one request in flight per connection)."""
    left = n

    async def worker() -> None:
        nonlocal left
        while left > 0:
            left -= 1
            start = time.perf_counter()
            try:
                async with session.get(target.url, headers=HEADERS) as resp:
                    body = await resp.read()
            except (aiohttp.ClientError, TimeoutError) as e:
                raise BenchError(f"a scrape of {target.name} failed: {e!r}") from e
            took = time.perf_counter() - start
            if resp.status != 200:
                raise BenchError(f"{target.name} answered {resp.status} to a scrape")
            if resp.headers.get("Content-Encoding") != "gzip":
                raise BenchError(f"{target.name} did not answer gzip to Accept-Encoding: gzip")
            if record:
                target.latencies.append(took)
                target.body_bytes = len(body)

    cpu = cpu_seconds(target.pid)
    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(min(concurrency, n))))
    if record:
        target.wall += time.perf_counter() - start
        target.cpu += cpu_seconds(target.pid) - cpu


async def read_plain(session: aiohttp.ClientSession, target: Target) -> bytes:
    """An untimed, uncompressed scrape, for reading values."""
    try:
        async with session.get(target.url, headers=PLAIN) as resp:
            return await resp.read()
    except (aiohttp.ClientError, TimeoutError) as e:
        raise BenchError(f"a scrape of {target.name} failed: {e!r}") from e


SCHEDSTAT = Path("/proc/self/schedstat").exists()


def cpu_seconds(pid: int) -> float:
    """On-CPU time of every thread of ``pid``. The scheduler's figure is in
    nanoseconds; psutil's (from /proc/PID/stat) is in 10 ms ticks, too coarse for a
    round of sub-millisecond scrapes, so it is only the fallback."""
    if not SCHEDSTAT:
        t = psutil.Process(pid).cpu_times()
        return float(t.user + t.system)
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):  # a thread that just exited
            total += int((task / "schedstat").read_text().split()[0])
    return total / 1e9


def _rss_mib(pid: int) -> float:
    return float(psutil.Process(pid).memory_info().rss) / MIB


@dataclass
class LoadResult:
    rss_after_warmup_mib: dict[str, float]
    rss_after_mib: dict[str, float]


async def sample_idle_polls(
    session: aiohttp.ClientSession, ours: Target, polls: PollSamples
) -> None:
    """Scrapes every 0.5 s until two polls after the discovery poll are seen, bounded
    by a little over two poll intervals."""
    deadline = time.monotonic() + 2 * POLL_INTERVAL + 2.0
    while time.monotonic() < deadline and len(polls.idle) < 2:
        polls.add(await read_plain(session, ours), under_load=False)
        await asyncio.sleep(0.5)


async def run_load(
    ours: Target, theirs: Target, args: argparse.Namespace, polls: PollSamples
) -> LoadResult:
    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT)
    connector = aiohttp.TCPConnector(limit=0, limit_per_host=args.concurrency)
    async with aiohttp.ClientSession(
        connector=connector, timeout=timeout, auto_decompress=False
    ) as session:
        await sample_idle_polls(session, ours, polls)
        # Enough for keep-alive connections, allocator and Go heap to settle.
        warmup = min(200, max(20, args.scrapes // 10))
        for t in (ours, theirs):
            await scrape_batch(session, t, warmup, args.concurrency, record=False)
        rss_warm = {t.name: _rss_mib(t.pid) for t in (ours, theirs)}
        per_round = [
            args.scrapes // ROUNDS + (1 if i < args.scrapes % ROUNDS else 0) for i in range(ROUNDS)
        ]
        for i, n in enumerate(per_round):
            order = (ours, theirs) if i % 2 == 0 else (theirs, ours)
            for t in order:
                if n:
                    await scrape_batch(session, t, n, args.concurrency, record=True)
            polls.add(await read_plain(session, ours), under_load=True)
        rss_after = {t.name: _rss_mib(t.pid) for t in (ours, theirs)}
    return LoadResult(rss_warm, rss_after)


# -- report ----------------------------------------------------------------------


def percentile(values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile: a latency some scrape actually had."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


def _median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def machine() -> dict[str, Any]:
    model = "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.partition(":")[2].strip()
                break
    return {
        "nproc": len(os.sched_getaffinity(0)),
        "cpu_model": model,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "aiohttp": aiohttp.__version__,
    }


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def summarize(
    ours: Target,
    theirs: Target,
    series: dict[str, int],
    load: LoadResult,
    polls: PollSamples,
    args: argparse.Namespace,
    ne_version: str,
) -> dict[str, Any]:
    def side(t: Target) -> dict[str, Any]:
        n = len(t.latencies)
        return {
            "scrapes": n,
            "series": series[t.name],
            "body_bytes_gzip": t.body_bytes,
            "p50_seconds": percentile(t.latencies, 50),
            "p99_seconds": percentile(t.latencies, 99),
            "max_seconds": max(t.latencies),
            "mean_seconds": statistics.fmean(t.latencies),
            "scrapes_per_second": n / t.wall,
            "cpu_seconds_per_scrape": t.cpu / n,
            "rss_after_warmup_mib": load.rss_after_warmup_mib[t.name],
            "rss_after_scrapes_mib": load.rss_after_mib[t.name],
            "rss_growth_mib": load.rss_after_mib[t.name] - load.rss_after_warmup_mib[t.name],
        }

    a, b = side(ours), side(theirs)
    ratio_of = {
        "p50": "p50_seconds",
        "p99": "p99_seconds",
        "max": "max_seconds",
        "mean": "mean_seconds",
        "scrapes_per_second": "scrapes_per_second",
        "cpu_per_scrape": "cpu_seconds_per_scrape",
        "body_bytes_gzip": "body_bytes_gzip",
        "rss_after_scrapes": "rss_after_scrapes_mib",
    }
    return {
        "machine": {**machine(), "node_exporter": ne_version},
        "settings": {
            "scrapes": args.scrapes,
            "concurrency": args.concurrency,
            "devices": args.devices,
            "device_count": args.device_count,
            "rounds": ROUNDS,
            "poll_interval_seconds": POLL_INTERVAL,
        },
        "ours": a,
        "node_exporter": b,
        "ratio": {name: _ratio(a[k], b[k]) for name, k in ratio_of.items()},
        "rss": {
            "after_warmup_mib": a["rss_after_warmup_mib"],
            "after_scrapes_mib": a["rss_after_scrapes_mib"],
            "growth_mib": a["rss_growth_mib"],
            "scrapes": a["scrapes"],
        },
        "poll_duration_seconds": {
            "median": _median(list(polls.idle.values())),
            "samples": sorted(polls.idle.values()),
            "under_load_median": _median(list(polls.loaded.values())),
            "under_load_samples": sorted(polls.loaded.values()),
        },
    }


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def render_table(r: dict[str, Any]) -> str:
    m, s, a, b, q = r["machine"], r["settings"], r["ours"], r["node_exporter"], r["ratio"]
    ms = 1000.0
    rows: list[tuple[str, str, str, str]] = [
        ("series (sample lines)", str(a["series"]), str(b["series"]), ""),
        ("body, gzip (bytes)", str(a["body_bytes_gzip"]), str(b["body_bytes_gzip"]),
         _fmt(q["body_bytes_gzip"], ".3g")),
        ("latency p50 (ms)", _fmt(a["p50_seconds"] * ms, ".3f"),
         _fmt(b["p50_seconds"] * ms, ".3f"), _fmt(q["p50"], ".3g")),
        ("latency p99 (ms)", _fmt(a["p99_seconds"] * ms, ".3f"),
         _fmt(b["p99_seconds"] * ms, ".3f"), _fmt(q["p99"], ".3g")),
        ("latency max (ms)", _fmt(a["max_seconds"] * ms, ".3f"),
         _fmt(b["max_seconds"] * ms, ".3f"), _fmt(q["max"], ".3g")),
        ("throughput (scrapes/s)", _fmt(a["scrapes_per_second"], ".0f"),
         _fmt(b["scrapes_per_second"], ".0f"), _fmt(q["scrapes_per_second"], ".3g")),
        ("server CPU per scrape (ms)", _fmt(a["cpu_seconds_per_scrape"] * ms, ".3f"),
         _fmt(b["cpu_seconds_per_scrape"] * ms, ".3f"), _fmt(q["cpu_per_scrape"], ".3g")),
        ("RSS after warm-up (MiB)", _fmt(a["rss_after_warmup_mib"], ".1f"),
         _fmt(b["rss_after_warmup_mib"], ".1f"), ""),
        (f"RSS after {a['scrapes']} scrapes (MiB)", _fmt(a["rss_after_scrapes_mib"], ".1f"),
         _fmt(b["rss_after_scrapes_mib"], ".1f"), _fmt(q["rss_after_scrapes"], ".3g")),
        ("RSS growth (MiB)", _fmt(a["rss_growth_mib"], "+.2f"),
         _fmt(b["rss_growth_mib"], "+.2f"), ""),
    ]  # fmt: skip
    pd = r["poll_duration_seconds"]
    header = ("", "accel-exporter", "node_exporter", "ours/theirs")
    w0 = max(len(x[0]) for x in [*rows, header])
    lines = [
        f"accel-exporter (sim, {s['device_count']} devices: {s['devices']}) vs "
        f"prometheus-node-exporter {m['node_exporter']} (textfile, same exposition)",
        f"machine: {m['nproc']} CPUs, {m['cpu_model']}, Python {m['python']}, {m['platform']}",
        f"client:  aiohttp {m['aiohttp']}, concurrency {s['concurrency']}, "
        f"Accept-Encoding: gzip, {s['scrapes']} scrapes each in {s['rounds']} interleaved rounds",
        "",
        f"{header[0]:<{w0}}  {header[1]:>15}  {header[2]:>15}  {header[3]:>11}",
    ]
    lines += [f"{n:<{w0}}  {x:>15}  {y:>15}  {z:>11}" for n, x, y, z in rows]
    idle, loaded = pd["samples"], pd["under_load_samples"]
    lines += [
        "",
        f"poll duration, {s['device_count']} sim devices (median of distinct polls, "
        f"every {s['poll_interval_seconds']:g}s): "
        f"{_fmt(_ms(pd['median']), '.2f')} ms idle (n={len(idle)}), "
        f"{_fmt(_ms(pd['under_load_median']), '.2f')} ms under load (n={len(loaded)})",
        "",
        "node_exporter reads and parses the textfile on every scrape, on one core (its default",
        "--runtime.gomaxprocs=1); accel-exporter serves bytes it rendered and gzipped once per",
        "poll. Server CPU: on-CPU time of the server process during its own scrape batches.",
    ]
    return "\n".join(lines)


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000.0


# -- main ------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="bench/scrape.py",
        description=(
            "Scrape our exporter (sim backend) and Debian's prometheus-node-exporter, "
            "serving the same series through its textfile collector, with one client in "
            "interleaved rounds; print p50/p99 latency of both and the ratio ours/theirs, "
            "throughput and server CPU per scrape, our RSS after warm-up and after the "
            "scrapes, and the poll duration of the simulated devices."
        ),
        epilog=(
            "Both servers bind to 127.0.0.1 on free ports and are stopped on exit. "
            "node_exporter re-parses the textfile on every scrape; ours serves bytes "
            "rendered once per poll (--poll-interval 5s): that is the design compared. "
            "See the module docstring for why the comparison is fair."
        ),
    )
    p.add_argument(
        "--scrapes",
        type=int,
        default=10000,
        metavar="N",
        help="measured scrapes per exporter, after a warm-up (default %(default)s)",
    )
    p.add_argument(
        "--concurrency",
        type=int,
        default=4,
        metavar="N",
        help="scrapes in flight at once, each on its own keep-alive connection "
        "(default %(default)s)",
    )
    p.add_argument(
        "--devices",
        default=DEFAULT_DEVICES,
        metavar="SPEC",
        help="simulated devices, as accel-exporter's --sim-devices (default %(default)s)",
    )
    p.add_argument("--json", type=Path, metavar="FILE", help="also write the results as JSON")
    return p


def _device_count(spec: str) -> int:
    total = 0
    for part in filter(None, (x.strip() for x in spec.split(","))):
        _, _, count = part.partition(":")
        if not count.isdigit():
            raise BenchError(f"--devices: bad device count in {part!r} (use e.g. nvidia:8,amd:4)")
        total += int(count)
    if total < 1:
        raise BenchError("--devices: no devices given (use e.g. nvidia:8,amd:4)")
    return total


def _on_sigterm(signum: int, frame: FrameType | None) -> NoReturn:
    raise SystemExit(128 + signum)


def bench(args: argparse.Namespace) -> dict[str, Any]:
    ne_path = shutil.which(NODE_EXPORTER)
    if ne_path is None:
        raise BenchError(
            f"{NODE_EXPORTER} is not on PATH: install Debian's prometheus-node-exporter, "
            "or run `make bench`"
        )
    check_node_exporter_flags(ne_path)
    ne_version = node_exporter_version(ne_path)
    args.device_count = _device_count(args.devices)
    with contextlib.ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="accel-bench-")))
        textfile_dir = workdir / "textfile"
        textfile_dir.mkdir()

        port = _free_port()
        ours_srv = start_server(
            "accel-exporter",
            [
                sys.executable, "-m", "exporter.cli",
                "--backends", "sim",
                "--sim-devices", args.devices,
                "--web.listen-address", f"127.0.0.1:{port}",
                "--poll-interval", f"{POLL_INTERVAL:g}s",
                "--log.level", "warn",
            ],
            port, workdir, stack,
        )  # fmt: skip
        exposition = wait_ready(ours_srv, lambda body: SIM_UP in body)
        polls = PollSamples(discovery=sample_value(exposition, LAST_SUCCESS))
        # Ours, as is: the same names, labels, HELP and values node_exporter will serve.
        (textfile_dir / "accel.prom").write_bytes(exposition)

        port2 = _free_port()
        ne_srv = start_server(
            "node_exporter",
            [
                ne_path,
                "--collector.disable-defaults",
                "--collector.textfile",
                f"--collector.textfile.directory={textfile_dir}",
                "--web.disable-exporter-metrics",
                f"--web.listen-address=127.0.0.1:{port2}",
                "--log.level=warn",
            ],
            port2, workdir, stack,
        )  # fmt: skip
        theirs_text = wait_ready(ne_srv, lambda body: b"node_textfile_scrape_error" in body)
        if sample_value(theirs_text, "node_textfile_scrape_error") != 0:
            raise BenchError(
                "node_exporter could not parse our exposition (node_textfile_scrape_error "
                f"is not 0); its log:\n{ne_srv.log_tail()}"
            )
        series = {
            ours_srv.name: count_samples(fetch(ours_srv.url)),
            ne_srv.name: count_samples(theirs_text),
        }
        print(
            f"series: accel-exporter {series[ours_srv.name]}, "
            f"node_exporter {series[ne_srv.name]} (textfile of ours + its own)",
            flush=True,
        )
        if abs(series[ours_srv.name] - series[ne_srv.name]) > SERIES_SLACK:
            raise BenchError(
                f"series counts differ by more than {SERIES_SLACK}: accel-exporter "
                f"{series[ours_srv.name]}, node_exporter {series[ne_srv.name]}"
            )

        ours = Target(ours_srv.name, ours_srv.url, ours_srv.proc.pid)
        theirs = Target(ne_srv.name, ne_srv.url, ne_srv.proc.pid)
        print(
            f"measuring: {args.scrapes} scrapes each, concurrency {args.concurrency}, "
            f"{ROUNDS} interleaved rounds...",
            flush=True,
        )
        load = asyncio.run(run_load(ours, theirs, args, polls))
        for srv in (ours_srv, ne_srv):
            if srv.proc.poll() is not None:
                raise BenchError(f"{srv.name} exited during the run; its log:\n{srv.log_tail()}")
        return summarize(ours, theirs, series, load, polls, args, ne_version)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.scrapes < 1:
        parser.error("--scrapes must be at least 1")
    if args.concurrency < 1:
        parser.error("--concurrency must be at least 1")
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        result = bench(args)
    except BenchError as e:
        print(f"bench/scrape.py: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("bench/scrape.py: interrupted; servers stopped", file=sys.stderr)
        return 130
    except SystemExit as e:
        if e.code == 128 + signal.SIGTERM:
            print("bench/scrape.py: terminated; servers stopped", file=sys.stderr)
        raise
    finally:
        signal.signal(signal.SIGTERM, previous)
    print()
    print(render_table(result))
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
        print(f"\nresults written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
