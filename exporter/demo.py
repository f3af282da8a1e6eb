"""``make demo``: the exporter on this host, with its real backends plus a simulated
8-GPU NVIDIA and 4-GPU AMD node that plays a fault timeline, whose pods hold devices
through device plugins and ResourceClaims and share GPUs, and where to look.

The demo ends in an exporter in the foreground that runs until Ctrl-C, so its
first line says so. ``make demo`` runs the fleet simulator first (20 to 50 s), so
it calls ``python -m exporter.demo --check`` before that: a port already taken is
reported at once, not after the simulation and a banner inviting the user to it.
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Sequence
from importlib import resources

from accel_common.listen import split_listen_address
from exporter import backends, cli

DEFAULT_ADDRESS = "127.0.0.1:9835"
# Pods of the simulated node: enough that some hold devices through ResourceClaims.
DEMO_PODS = 4


def fault_script() -> str:
    """The demo's fault timeline, shipped in the package."""
    return str(resources.files("exporter") / "data" / "demo-faults.yaml")


def address() -> str:
    return os.environ.get("DEMO_ADDRESS", DEFAULT_ADDRESS)


def port_problem(where: str) -> str | None:
    """Why the exporter could not listen on ``where`` (``HOST:PORT``), or None. The
    probe binds as aiohttp does (``SO_REUSEADDR``, so a port left in TIME_WAIT by an
    earlier run is free) and closes at once."""
    try:
        host, port = split_listen_address(where)
    except ValueError as e:
        return str(e)
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as e:
        return f"cannot resolve {host!r}: {e.strerror or e}"
    family, kind, proto, _, sockaddr = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(sockaddr)
        except OSError as e:
            return f"cannot listen on {where}: {e.strerror or e}"
    return None


def check(announce: bool = True) -> int:
    """``--check``: exit 2 with what to do when the demo's port is not free; else,
    with ``announce``, say what the demo will do and leave running."""
    where = address()
    problem = port_problem(where)
    if problem is None:
        if announce:
            print(
                f"accel-exporter demo: {where} is free. The fleet simulator runs first "
                "(20-50 s), then the exporter serves there in the foreground until Ctrl-C.",
                flush=True,
            )
        return 0
    print(
        f"accel-exporter demo: error: {problem}. Stop what listens there, or pick "
        f"another address: DEMO_ADDRESS=127.0.0.1:9836 make demo",
        file=sys.stderr,
    )
    return 2


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args == ["--check"]:
        return check()
    if args:
        print("usage: python -m exporter.demo [--check]", file=sys.stderr)
        return 2
    # Again here: something may have taken the port while the simulator ran.
    if check(announce=False) != 0:
        return 2
    where = address()
    script = fault_script()
    real = backends.default_backends()
    base = f"http://{where}"
    print(
        f"""
accel-exporter demo: serving {base} in the foreground. Ctrl-C to stop.
  real backends : {", ".join(real)} (a missing driver shows accel_exporter_backend_up 0)
  simulated     : nvidia:8 (H100), amd:4 (MI300X), faults from {script}
                  pods sim/train-*, sim/infer-* (MPS), sim/notebook-0 (idle); some
                  through ResourceClaims; the last GPU of each vendor partitioned

Where to look:
  {base}/metrics      the exposition Prometheus scrapes
  {base}/healthz      liveness, and each backend up or down
  {base}/             landing page

Try (in another terminal):
  curl -s {base}/metrics | grep -E '^accel_(up|fault_events_total)'
  curl -s {base}/metrics | grep 'severity="fatal"'     # nvidia3's Xid 79 at 30s
  curl -s {base}/metrics | grep accel_exporter_backend_up
  curl -s {base}/metrics | grep 'accel_device_pod_info.*claim='  # devices from DRA claims
  curl -s {base}/metrics | grep accel_pod_utilization_ratio    # each pod's use

Timeline: 30s nvidia3 Xid 79 and lost; 45s nvidia6 Xid 13 (info);
          60s amd1 uncorrectable RAS + 2 ECC; 75s nvidia5 pinned at 100%/91C; 120s nvidia3 back.
The exporter runs until Ctrl-C; nothing else is left running (the simulator's
table and plots are in demo-out/).
""",
        flush=True,
    )
    return cli.main(exporter_args(where, real))


def exporter_args(where: str, real: Sequence[str]) -> list[str]:
    """The demo exporter's flags: ``real`` hardware backends beside the simulated
    node, whose pods hold devices through device plugins and ResourceClaims, share
    GPUs (time-slicing, MPS) and list their processes, so that the DRA ``claim`` and
    the per-pod use (``accel_pod_utilization_ratio``) show without a cluster."""
    return [
        "--web.listen-address",
        where,
        "--backends",
        ",".join([*real, "sim"]),
        "--sim-devices",
        "nvidia:8,amd:4",
        "--sim-script",
        str(fault_script()),
        "--sim-partitions",
        "--sim-pods",
        str(DEMO_PODS),
        "--sim-claims",
        "--sim-sharing",
        "--poll-interval",
        "2s",
    ]


if __name__ == "__main__":
    sys.exit(main())
