"""``accel-autoscaler extender``: its flags, and the wiring from them to a running
kube-scheduler extender (``placement/extender.py``): the source, the fleet cache,
the optional Kubernetes API for ``--annotate``, and the server until a signal."""

from __future__ import annotations

import argparse
import asyncio
import sys

from accel_common import logs
from accel_common.listen import split_listen_address
from accel_common.names import PREFERRED_DEVICES_ANNOTATION
from autoscaler.commands.flags import (
    InputError,
    add_placement_source_arguments,
    close_kube,
    duration,
    open_kube,
    source_options,
)
from autoscaler.placement.extender import Extender, FleetCache, serve
from autoscaler.placement.score import parse_weights
from autoscaler.sources.build import build_source


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--listen",
        default=":8888",
        metavar="ADDR",
        help="HOST:PORT or :PORT to serve filter and prioritize on (default %(default)s)",
    )
    p.add_argument(
        "--refresh-interval",
        dest="refresh_interval",
        type=duration,
        default=15.0,
        metavar="DURATION",
        help="how often the fleet state is read from the source (default 15s)",
    )
    p.add_argument(
        "--max-age",
        dest="max_age",
        type=duration,
        default=60.0,
        metavar="DURATION",
        help="older fleet state is not trusted: fail open (default 60s)",
    )
    p.add_argument(
        "--annotate",
        action="store_true",
        help=f"write the chosen devices into the pod annotation {PREFERRED_DEVICES_ANNOTATION} "
        "(needs --kubeconfig)",
    )
    logs.add_arguments(p)
    add_placement_source_arguments(p)


async def _run(args: argparse.Namespace) -> int:
    host, port = split_listen_address(args.listen)
    kube = await open_kube(args.kubeconfig) if args.kubeconfig is not None else None
    cache = FleetCache(
        build_source(source_options(args)),
        kube,
        interval=args.refresh_interval,
        max_age=args.max_age,
    )
    extender = Extender(cache, weights=parse_weights(args.weight), annotate=args.annotate)
    try:
        return await serve(extender, host, port)
    finally:
        if kube is not None:
            await close_kube(kube)


def main(args: argparse.Namespace) -> int:
    logs.setup(args.log_level, args.log_format)
    if args.annotate and args.kubeconfig is None:
        print("accel-autoscaler extender: error: --annotate needs --kubeconfig", file=sys.stderr)
        return 2
    try:
        parse_weights(args.weight)
        return asyncio.run(_run(args))
    except (ValueError, InputError, OSError) as e:
        print(f"accel-autoscaler extender: error: {e}", file=sys.stderr)
        return 2
