"""``accel-node-agent``: the privileged per-node agent (its own DaemonSet, beside the exporter).

Every bad input (a flag, the layouts file) is found before anything starts and
reported as one line with exit status 2, so a crash-looping DaemonSet shows the
reason in its last log line. Everything after that (the API server, NVML, the
kubelet) is retried, never fatal: see ``nodeagent.agent``.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from accel_common import logs
from accel_common.durations import parse_duration
from accel_common.listen import Listener, ListenError, split_listen_address
from accel_common.names import (
    PARTITION_APPLIED_LABEL,
    PARTITION_LAYOUT_LABEL,
    PARTITION_STATE_ANNOTATION,
)
from accel_common.nvmlhold import DEFAULT_DIR as DEFAULT_HOLD_DIR
from exporter.backends.base import BackendOptions
from exporter.backends.kubelet import KubeletBackend
from exporter.model import PodAssignment
from nodeagent import layouts
from nodeagent.agent import Agent, NodeAPI, metrics_app
from nodeagent.loop import TASKS
from nodeagent.partition import RETRY_SECONDS, PartitionTask
from nodeagent.tasks import AgentContext, Task

log = logging.getLogger("accel_node_agent")

DEFAULT_LISTEN = "127.0.0.1:9837"

DESCRIPTION = f"""\
The node agent of accel-fleet: one per node (deploy/base/agent.yaml), privileged,
doing on the node what the controller asks through the Node object:

  * partition layouts: the node's label {PARTITION_LAYOUT_LABEL} names a
    layout of the layouts file (--layouts); the agent applies it (MIG through NVML,
    AMD compute/memory partitions through amdgpu sysfs) once no pod holds a device,
    and answers in the annotation {PARTITION_STATE_ANNOTATION} and the label
    {PARTITION_APPLIED_LABEL};
  * GPU resets and reboots asked for in the node's reset/reboot annotations.

It reads its Node every --interval, and never exits for an API, NVML or kubelet
failure: it logs, backs off and retries. docs/agent.md describes the channel.
"""

EPILOG = """\
examples:
  accel-node-agent --node-name "$NODE_NAME"                  # in the DaemonSet
  accel-node-agent --node-name gpu-7 --kubeconfig ~/.kube/config --once
  accel-node-agent --check-layouts --layouts my-layouts.yaml # validate and exit
"""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def _duration(text: str) -> float:
    try:
        seconds = parse_duration(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"duration must be positive, got {text!r}")
    return seconds


_duration.__name__ = "duration"


def parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="accel-node-agent",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--node-name",
        default=os.environ.get("NODE_NAME", ""),
        help="this node's name in Kubernetes (default: $NODE_NAME, which the DaemonSet "
        "sets from spec.nodeName)",
    )
    p.add_argument(
        "--kubeconfig",
        default="",
        help="a kubeconfig file; default: the pod's service account in a cluster, "
        "else $KUBECONFIG or ~/.kube/config",
    )
    p.add_argument(
        "--interval",
        type=_duration,
        default=30.0,
        help="how often to read the Node and act on it (default 30s)",
    )
    p.add_argument(
        "--max-backoff",
        type=_duration,
        default=300.0,
        help="the longest wait between tries while the API server fails (default 5m)",
    )
    p.add_argument(
        "--layouts",
        type=Path,
        default=None,
        help="the partition layouts file (default: the one shipped in the package, "
        "nodeagent/layouts.yaml)",
    )
    p.add_argument(
        "--check-layouts",
        action="store_true",
        help="validate the layouts file, print its layouts and exit (1 on problems)",
    )
    p.add_argument(
        "--layout-retry",
        type=_duration,
        default=RETRY_SECONDS,
        help="how long a failed layout waits before the agent tries it again (default 5m)",
    )
    p.add_argument(
        "--listen",
        default=DEFAULT_LISTEN,
        help=f"where /metrics and /healthz are served (default {DEFAULT_LISTEN}; "
        "'none' serves nothing)",
    )
    _host_flags(p)
    p.add_argument("--once", action="store_true", help="one round, then exit (0 when it succeeded)")
    logs.add_arguments(p)
    return p


def _host_flags(p: argparse.ArgumentParser) -> None:
    """Where the host's files and the kubelet are, and whether NVML is loaded."""
    p.add_argument(
        "--path.sysfs",
        dest="sysfs",
        type=Path,
        default=Path("/sys"),
        help="the host's sysfs (default /sys): amdgpu partition files",
    )
    p.add_argument(
        "--path.procfs",
        dest="procfs",
        type=Path,
        default=Path("/proc"),
        help="the host's procfs (default /proc): the boot id, and the processes that "
        "hold a GPU's device file before an NVIDIA reset",
    )
    p.add_argument(
        "--kubelet-socket",
        type=Path,
        default=BackendOptions().kubelet_socket,
        help="the kubelet's PodResources socket, to see which pods hold devices "
        f"(default {BackendOptions().kubelet_socket})",
    )
    p.add_argument(
        "--path.nvml-hold",
        dest="nvml_hold_dir",
        default=str(DEFAULT_HOLD_DIR),
        metavar="DIR",
        help="where the agent asks the exporter to let go of NVML before an NVIDIA reset "
        "(nvidia-smi refuses a GPU any NVML client holds): the host directory the "
        "exporter's --path.nvml-hold names; an empty value asks no exporter "
        f"(default {DEFAULT_HOLD_DIR})",
    )
    p.add_argument(
        "--nvml-release-wait",
        type=_duration,
        default=30.0,
        metavar="DURATION",
        help="how long the agent waits for the exporter to say it let go of NVML before "
        "it resets anyway; above the exporter's poll interval (default 30s)",
    )
    p.add_argument(
        "--no-nvml",
        action="store_true",
        help="do not load NVML (nodes without NVIDIA GPUs need not say so: a missing "
        "library is one log line)",
    )


def load_nvml() -> Any | None:
    """``pynvml``, initialized; None (with one log line) when it or the driver is missing."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception as e:  # ImportError, NVMLError_LibraryNotFound, DriverNotLoaded
        log.info(
            "NVML not loaded (%s: %s): NVIDIA layouts and resets unavailable", type(e).__name__, e
        )
        return None
    return pynvml


def load_amdsmi() -> Any | None:
    """``amdsmi``, initialized; None when ROCm is not there (AMD layouts need only sysfs)."""
    from exporter.backends.amd.smi import load_amdsmi as import_amdsmi

    module, reason = import_amdsmi()
    if module is None:
        log.info("AMD SMI not loaded (%s): AMD resets unavailable", reason)
        return None
    try:
        module.amdsmi_init()
    except Exception as e:
        log.info("AMD SMI did not initialize (%s): AMD resets unavailable", e)
        return None
    return module


def boot_id_reader(procfs: Path) -> Any:
    def boot_id() -> str:
        try:
            return (procfs / "sys/kernel/random/boot_id").read_text().strip()
        except OSError:
            return ""

    return boot_id


def host_reboot() -> None:
    """Reboots the host through its init (the pod runs with hostPID and privileged)."""
    os.sync()
    subprocess.run(
        ["nsenter", "-t", "1", "-m", "-u", "-i", "-n", "-p", "--", "systemctl", "reboot"],
        check=True,
        timeout=60,
    )


def nvidia_reset(nvml: Any | None) -> Any | None:
    if nvml is None:
        return None
    from nodeagent.reset import NvidiaSmi  # RESET's nvidia-smi --gpu-reset runner

    return NvidiaSmi()


def check_layouts(path: Path | None) -> int:
    try:
        found = layouts.load(path)
    except layouts.LayoutsError as e:
        print(e, file=sys.stderr)
        return 1
    try:
        for name, layout in sorted(found.items()):
            print(f"{name}: {layout.model} ({layout.vendor}) {layout.describe()}")
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader stopped reading (``| head``): it has what it wanted, and the file
        # is still valid. Python would flush stdout again at exit and print a
        # traceback; pointing stdout at /dev/null leaves that flush nowhere to fail
        # (Python's signal module documentation, "Note on SIGPIPE").
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    logs.setup(args.log_level, args.log_format)
    if args.check_layouts:
        return check_layouts(args.layouts)
    prog = "accel-node-agent"
    try:
        known = layouts.load(args.layouts)
    except layouts.LayoutsError as e:
        print(f"{prog}: error: the layouts file has problems:\n{e}", file=sys.stderr)
        return 2
    if not args.node_name:
        print(f"{prog}: error: no node name: pass --node-name or set $NODE_NAME", file=sys.stderr)
        return 2
    listen: tuple[str | None, int] | None = None
    if args.listen != "none":
        try:
            listen = split_listen_address(args.listen)
        except ValueError as e:
            print(f"{prog}: error: --listen: {e}", file=sys.stderr)
            return 2
    try:
        api = NodeAPI.from_config(args.kubeconfig)
    except Exception as e:
        print(f"{prog}: error: no Kubernetes configuration: {e}", file=sys.stderr)
        return 2
    kubelet = KubeletBackend(BackendOptions(kubelet_socket=args.kubelet_socket))

    def holders() -> list[PodAssignment]:
        return kubelet.whole_pods()  # a partial answer is no proof a device is free

    nvml = None if args.no_nvml else load_nvml()
    ctx = AgentContext(
        node_name=args.node_name,
        nvml=nvml,
        amdsmi=load_amdsmi(),
        sysfs_root=args.sysfs,
        holders=holders,
        clock=time.time,
        boot_id=boot_id_reader(args.procfs),
        reboot=host_reboot,
        nvidia_reset=nvidia_reset(nvml),
        nvml_hold_dir=Path(args.nvml_hold_dir) if args.nvml_hold_dir else None,
        nvml_release_wait=args.nvml_release_wait,
        procfs=args.procfs,
    )
    tasks: list[Task] = [PartitionTask(known, retry_seconds=args.layout_retry), *TASKS]
    agent = Agent(api, ctx, tasks, interval=args.interval, max_backoff=args.max_backoff)
    try:
        return asyncio.run(_serve(agent, listen, args.once))
    finally:
        kubelet.close()
        api.close()


async def _serve(agent: Agent, listen: tuple[str | None, int] | None, once: bool) -> int:
    stop = asyncio.Event()
    if listen is None or once:
        return 0 if await agent.run(stop, once=once) else 1
    try:
        listener = await Listener.start(metrics_app(agent.metrics), *listen, stop=stop)
    except ListenError as e:
        log.error("%s", e)
        return 1
    async with listener:
        log.info(
            "agent for node %s; metrics on %s:%d",
            agent.ctx.node_name,
            listen[0] or "",
            listener.bound_port,
        )
        await agent.run(stop)
    return 0


if __name__ == "__main__":
    sys.exit(main())
