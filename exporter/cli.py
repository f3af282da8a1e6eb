"""``accel-exporter``: flags in node_exporter's style, then poll and serve.

Every bad input (a flag, the web config, the sim script) is found before anything
starts, and reported as one line that names the problem, with exit status 2, so a
crash-looping DaemonSet shows the reason in its last log line.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import socket
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from accel_common import logs
from accel_common.durations import parse_duration
from accel_common.httpbounds import raise_fd_limit
from accel_common.listen import Listener, ListenError, split_listen_address
from accel_common.nvmlhold import DEFAULT_DIR as DEFAULT_HOLD_DIR
from exporter import __version__, backends, faults
from exporter.backends.base import Backend, BackendOptions
from exporter.backends.sim import SimScriptError, parse_sim_devices
from exporter.faults import tables
from exporter.poller import Poller
from exporter.procmap import ProcMap
from exporter.server import ExporterServer, check_telemetry_path, fd_headroom_limits
from exporter.webconfig import WebConfig, WebConfigError, load_web_config

log = logging.getLogger("accel_exporter")

DEFAULT_PORT = 9835


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # One line, not the usage block: the reason is what an operator needs.
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def _duration(text: str) -> float:
    seconds = parse_duration(text)
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"duration must be positive, got {text!r}")
    return seconds


_duration.__name__ = "duration"  # argparse names the type in its message


def _backend_list(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in backends.REGISTRY]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown backend {unknown[0]!r} (available: {', '.join(backends.REGISTRY)})"
        )
    if not names:
        raise argparse.ArgumentTypeError("no backend named")
    return names


def _sim_devices(text: str) -> tuple[tuple[str, int], ...]:
    try:
        return parse_sim_devices(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from e


def _fault_table(text: str) -> tuple[str, Path]:
    vendor, sep, path = text.partition("=")
    if not sep or not path:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not VENDOR=FILE, e.g. nvidia=/etc/accel/xid-catalog.csv"
        )
    if vendor not in tables.FORMATS:
        raise argparse.ArgumentTypeError(
            f"no fault table format for {vendor!r}; use one of {', '.join(tables.FORMATS)}"
        )
    return vendor, Path(path)


def load_fault_tables(specs: Sequence[tuple[str, Path]]) -> faults.Catalogue:
    """The built-in catalogue with each operator table laid over it, in order;
    ``FaultTableError`` names the file and line of the first problem."""
    catalogue = faults.BUILTIN
    for vendor, path in specs:
        entries = tables.load(vendor, path, catalogue.tables.get(vendor, {}))
        catalogue = catalogue.overlay(vendor, entries)
        log.info("fault table %s: %d codes for %s", path, len(entries), vendor)
    return catalogue


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="accel-exporter",
        description=(
            "Prometheus exporter for NVIDIA, AMD, Intel oneAPI and Gaudi, Huawei Ascend and "
            "Google TPU accelerators and the CPU, "
            "in one vendor-neutral metric vocabulary. Backends are polled in the "
            "background, each with its own timeout; /metrics serves the last rendering."
        ),
        epilog=(
            "examples:\n"
            "  accel-exporter                                  # every hardware backend on :9835\n"
            "  accel-exporter --backends nvidia --poll-interval 2s\n"
            "  accel-exporter --sim-devices nvidia:8,amd:4 --once   # simulated devices only\n"
            "  accel-exporter --web.config.file web.yml        # TLS and basic auth\n"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"accel-exporter {__version__}")
    w = p.add_argument_group("web")
    w.add_argument(
        "--web.listen-address",
        dest="listen_address",
        default=f":{DEFAULT_PORT}",
        metavar="ADDR",
        help="address to listen on, HOST:PORT or :PORT for all interfaces (default %(default)s)",
    )
    w.add_argument(
        "--web.telemetry-path",
        dest="telemetry_path",
        default="/metrics",
        metavar="PATH",
        help="path under which metrics are served; not /healthz, which the exporter "
        "serves itself (default %(default)s)",
    )
    w.add_argument(
        "--web.config.file",
        dest="web_config",
        type=Path,
        metavar="FILE",
        help="exporter-toolkit web config: tls_server_config, basic_auth_users (bcrypt), "
        "http_server_config.headers",
    )
    b = p.add_argument_group("backends")
    b.add_argument(
        "--backends",
        type=_backend_list,
        metavar="LIST",
        help=f"comma-separated backends to poll, from: {', '.join(backends.REGISTRY)} "
        "(default: every hardware backend; a backend without its library or driver "
        "reports accel_exporter_backend_up 0)",
    )
    b.add_argument(
        "--poll-interval",
        type=_duration,
        default=5.0,
        metavar="DURATION",
        help="how often each backend is polled (default 5s)",
    )
    b.add_argument(
        "--poll-timeout",
        type=_duration,
        metavar="DURATION",
        help="how long one backend poll may take before the backend is reported down "
        "(default: the poll interval, at most 10s)",
    )
    b.add_argument(
        "--path.sysfs",
        dest="sysfs",
        type=Path,
        default=Path("/sys"),
        metavar="DIR",
        help="sysfs mountpoint (default %(default)s)",
    )
    b.add_argument(
        "--path.procfs",
        dest="procfs",
        type=Path,
        default=Path("/proc"),
        metavar="DIR",
        help="procfs mountpoint (default %(default)s)",
    )
    b.add_argument(
        "--path.pod-logs",
        dest="pod_logs",
        type=Path,
        default=Path("/var/log"),
        metavar="DIR",
        help="the directory that holds the kubelet's pods/ and containers/ log "
        "directories, whose names map a process's pod UID and container ID to names "
        "for accel_pod_* (default %(default)s)",
    )
    b.add_argument(
        "--path.kmsg",
        dest="kmsg_path",
        default="/dev/kmsg",
        metavar="FILE",
        help="the kernel log the nvidia backend reads NVLink Xid payloads from (Xid 74 "
        "and 144-150 are graded by their register fields); needs CAP_SYSLOG and the "
        "host's /dev/kmsg, and without it these Xids keep their catalogue class; an "
        "empty value turns it off (default %(default)s)",
    )
    b.add_argument(
        "--path.nvml-hold",
        dest="nvml_hold_dir",
        default=str(DEFAULT_HOLD_DIR),
        metavar="DIR",
        help="where the node agent asks the nvidia backend to let go of NVML while it "
        "resets GPUs (nvidia-smi refuses a GPU any NVML client holds): the backend is "
        "down for the reset and discovers again after; the host directory the agent "
        "mounts too; an empty value turns it off (default %(default)s)",
    )
    b.add_argument(
        "--oneapi.include-cpu",
        dest="oneapi_include_cpu",
        action="store_true",
        help="the oneapi backend also publishes a CPU that an OpenCL runtime lists "
        "(by default only GPUs and accelerators: the cpu backend exports the CPU)",
    )
    b.add_argument(
        "--ascend.dcmi-library",
        dest="ascend_dcmi_library",
        default="",
        metavar="PATH",
        help="the ascend backend's libdcmi.so (default: the loader path, then the NPU "
        "driver's install directories; npu-smi is used where DCMI cannot be loaded)",
    )
    b.add_argument(
        "--tpu.runtime-address",
        dest="tpu_runtime_address",
        default=BackendOptions.tpu_runtime_address,
        metavar="HOST:PORT",
        help="libtpu's runtime metrics service, read by the tpu backend; a loopback "
        "address (default %(default)s)",
    )
    b.add_argument(
        "--fault-table",
        dest="fault_tables",
        action="append",
        default=[],
        type=_fault_table,
        metavar="VENDOR=FILE",
        help="load an operator's copy of a vendor's fault table at start, over the "
        "built-in one (repeatable): nvidia=FILE is NVIDIA's Xid catalog exported as CSV "
        "(Code and Resolution Bucket (Immediate Action) columns), ascend=FILE is "
        "MindCluster's faultCode.json; e.g. --fault-table nvidia=/etc/accel/xid-catalog.csv",
    )
    k = p.add_argument_group("kubernetes")
    k.add_argument(
        "--kubelet.pod-resources-socket",
        dest="kubelet_socket",
        type=Path,
        default=BackendOptions.kubelet_socket,
        metavar="PATH",
        help="the kubelet's PodResources API socket, read by the kubelet backend for "
        "accel_device_pod_info (default %(default)s)",
    )
    k.add_argument(
        "--dra.resource-slices",
        dest="dra_resource_slices",
        action="store_true",
        help="match devices that Dynamic Resource Allocation gave to pods by the uuid and "
        "PCI attributes in this node's ResourceSlices, read from the API server (needs "
        "list on resourceslices; off: by the DRA drivers' device names, see "
        "docs/exporter/pods.md)",
    )
    k.add_argument(
        "--dra.node-name",
        dest="dra_node_name",
        default=os.environ.get("NODE_NAME", ""),
        metavar="NAME",
        help="this node's name, whose ResourceSlices --dra.resource-slices reads "
        "(default: $NODE_NAME, set from spec.nodeName by the downward API)",
    )
    k.add_argument(
        "--dra.kubeconfig",
        dest="dra_kubeconfig",
        default="",
        metavar="PATH",
        help="a kubeconfig for --dra.resource-slices (default: the in-cluster service "
        "account, else $KUBECONFIG or ~/.kube/config)",
    )
    k.add_argument(
        "--pod-labels",
        action="store_true",
        help="also put namespace and pod labels on each device's gauges (series churn "
        "as pods come and go; see docs/exporter/pods.md)",
    )
    s = p.add_argument_group("simulation")
    s.add_argument(
        "--sim-devices",
        type=_sim_devices,
        metavar="LIST",
        help="simulated devices as VENDOR:COUNT,..., vendors nvidia, amd, oneapi, gaudi, "
        "ascend, tpu (e.g. nvidia:8,amd:4 or gaudi:8,ascend:8,tpu:4); without --backends, "
        "the sim backend alone",
    )
    s.add_argument(
        "--sim-script",
        type=Path,
        metavar="FILE",
        help="YAML timeline of simulated faults (Xid, lost device, ECC, hang); see docs/exporter",
    )
    s.add_argument(
        "--sim-seed",
        type=int,
        default=0,
        metavar="N",
        help="seed of the simulated load (default %(default)s)",
    )
    s.add_argument(
        "--sim-partitions",
        action="store_true",
        help="the last simulated NVIDIA GPU runs MIG (2 instances) and the last AMD GPU "
        "is split in two (DPX), as child devices",
    )
    s.add_argument(
        "--sim-pods",
        type=int,
        default=0,
        metavar="N",
        help="N simulated pods hold the sim devices, for accel_device_pod_info "
        "(default %(default)s)",
    )
    s.add_argument(
        "--sim-claims",
        action="store_true",
        help="with --sim-pods: every other pod gets its NVIDIA or AMD devices through a "
        "ResourceClaim, named as the vendors' DRA drivers name them (the claim label of "
        "accel_device_pod_info)",
    )
    s.add_argument(
        "--sim-sharing",
        action="store_true",
        help="with --sim-pods: pods time-slice and share a GPU through MPS, one pod holds "
        "a GPU idle, and the NVIDIA and AMD devices list their processes, so that "
        "accel_pod_utilization_ratio shows each pod's use",
    )
    o = p.add_argument_group("output")
    logs.add_arguments(o)
    o.add_argument(
        "--once",
        action="store_true",
        help="poll every backend once, print the exposition to stdout and exit",
    )
    return p


def parse_args(argv: Sequence[str] | None) -> tuple[argparse.Namespace, WebConfig | None]:
    """Parses and validates everything that can be checked before starting."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.backends is None:
        # Simulated devices alone: probing every hardware backend beside them only
        # prints a "backend is down" line for each vendor this host lacks (issue 29).
        args.backends = ["sim"] if args.sim_devices else backends.default_backends()
    if "sim" in args.backends and not args.sim_devices:
        parser.error("the sim backend needs --sim-devices, e.g. --sim-devices nvidia:8")
    if args.sim_devices and "sim" not in args.backends:
        parser.error("--sim-devices is given but 'sim' is not in --backends")
    if args.sim_script is not None and not args.sim_devices:
        parser.error("--sim-script needs --sim-devices")
    if (args.sim_partitions or args.sim_pods) and not args.sim_devices:
        parser.error("--sim-partitions and --sim-pods need --sim-devices")
    if (args.sim_claims or args.sim_sharing) and not args.sim_pods:
        parser.error("--sim-claims and --sim-sharing need --sim-pods, e.g. --sim-pods 4")
    if args.sim_pods < 0:
        parser.error(f"--sim-pods must be 0 or more, got {args.sim_pods}")
    if args.dra_resource_slices and not args.dra_node_name:
        parser.error(
            "--dra.resource-slices needs this node's name: set NODE_NAME from spec.nodeName "
            "(downward API) or pass --dra.node-name"
        )
    path_problem = check_telemetry_path(args.telemetry_path)
    if path_problem is not None:
        parser.error(f"--web.telemetry-path {path_problem}")
    try:
        split_listen_address(args.listen_address)
    except ValueError as e:
        parser.error(f"--web.listen-address: {e}")
    if args.poll_timeout is None:
        args.poll_timeout = min(args.poll_interval, 10.0)
    web_config = None
    if args.web_config is not None:
        try:
            web_config = load_web_config(args.web_config)
        except WebConfigError as e:
            parser.error(f"--web.config.file: {e}")
    return args, web_config


def make_backends(args: argparse.Namespace) -> list[Backend]:
    options = BackendOptions(
        sysfs=args.sysfs,
        procfs=args.procfs,
        sim_devices=args.sim_devices or (),
        sim_script=args.sim_script,
        sim_seed=args.sim_seed,
        kubelet_socket=args.kubelet_socket,
        dra_resource_slices=args.dra_resource_slices,
        dra_node_name=args.dra_node_name,
        dra_kubeconfig=args.dra_kubeconfig,
        sim_partitions=args.sim_partitions,
        sim_pods=args.sim_pods,
        sim_claims=args.sim_claims,
        sim_sharing=args.sim_sharing,
        sim_host=socket.gethostname(),
        oneapi_include_cpu=args.oneapi_include_cpu,
        ascend_dcmi_library=args.ascend_dcmi_library,
        tpu_runtime_address=args.tpu_runtime_address,
        kmsg_path=Path(args.kmsg_path) if args.kmsg_path else None,
        nvml_hold_dir=Path(args.nvml_hold_dir) if args.nvml_hold_dir else None,
    )
    return [backends.create(name, options) for name in args.backends]


async def _once(poller: Poller) -> bytes:
    try:
        return (await poller.poll_once()).text
    finally:
        await poller.stop()


async def _serve(poller: Poller, args: argparse.Namespace, web_config: WebConfig | None) -> int:
    host, port = split_listen_address(args.listen_address)
    raise_fd_limit()
    server = ExporterServer(poller, args.telemetry_path, web_config, fd_headroom_limits())
    ssl_context = web_config.ssl_context if web_config is not None else None
    try:
        listener = await Listener.start(server, host, port, ssl_context=ssl_context)
    except ListenError as e:
        log.error("%s", e)
        return 1
    async with listener:
        scheme = "https" if ssl_context is not None else "http"
        log.info(
            "listening on %s://%s:%d%s, backends %s, poll every %gs",
            scheme,
            host or "0.0.0.0",
            port,
            args.telemetry_path,
            ",".join(args.backends),
            args.poll_interval,
        )
        # The first poll runs in the background too: /healthz answers at once, and a
        # scrape that comes before the first poll has ended waits for it (at most
        # the poll timeout), so that no scrape sees an exporter with no devices.
        poll_task = asyncio.create_task(poller.start())
        await listener.wait()
        log.info("shutting down")
        poll_task.cancel()
        await asyncio.gather(poll_task, return_exceptions=True)
        await poller.stop()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args, web_config = parse_args(argv)
    logs.setup(args.log_level, args.log_format)
    try:
        poller_backends = make_backends(args)
    except SimScriptError as e:
        print(f"accel-exporter: error: --sim-script: {e}", file=sys.stderr)
        return 2
    try:
        catalogue = load_fault_tables(args.fault_tables)
    except tables.FaultTableError as e:
        print(f"accel-exporter: error: --fault-table: {e}", file=sys.stderr)
        return 2
    poller = Poller(
        poller_backends,
        interval=args.poll_interval,
        timeout=args.poll_timeout,
        pod_labels=args.pod_labels,
        procmap=ProcMap(procfs=args.procfs, pod_logs=args.pod_logs),
        catalogue=catalogue,
    )
    # A backend thread running pure-Python code (the sim, sysfs parsing) holds the
    # GIL; a shorter switch interval than the default 5 ms lets the event loop
    # answer a scrape meanwhile.
    sys.setswitchinterval(0.001)
    if args.once:
        text = asyncio.run(_once(poller))
        sys.stdout.buffer.write(text)
        rc = 0
    else:
        rc = asyncio.run(_serve(poller, args, web_config))
    sys.stdout.flush()
    sys.stderr.flush()
    if any(t.is_alive() and not t.daemon for t in threading.enumerate()[1:]):
        # A vendor call is still hung in a poll thread; Python would wait for it
        # forever at exit, so leave without joining it.
        os._exit(rc)
    return rc


if __name__ == "__main__":
    sys.exit(main())
