"""Command-line pieces that ``run``, ``place`` and ``extender`` share: argparse
types for durations and files, and the metric-source flags, so that one set of
source flags means the same in all three and ``--help`` says so once."""

from __future__ import annotations

import argparse
import inspect
import re
from pathlib import Path

from accel_common.durations import parse_duration
from accel_common.secrets import SecretError, read_basic_auth, read_token
from autoscaler.commands.limitflags import count
from autoscaler.kube.client import ClientKube, KubeConfigError
from autoscaler.kube.protocol import Closable, Kube
from autoscaler.sources.build import SourceOptions
from autoscaler.sources.prometheus import DEFAULT_BODY_SIZE_LIMIT as PROMETHEUS_BODY_LIMIT
from autoscaler.sources.scrape import DEFAULT_BODY_SIZE_LIMIT, DEFAULT_SAMPLE_LIMIT


def duration(text: str) -> float:
    """A positive Prometheus-style duration (``30s``, ``5m``, ``1h30m``) in seconds."""
    try:
        seconds = parse_duration(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from e
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"duration must be positive, got {text!r}")
    return seconds


# Prometheus's units.Base2Bytes: KB and KiB are both 1024 bytes.
_SIZE = re.compile(r"\s*([0-9]+)\s*([KMGT]i?B|B)?\s*", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_MAX_SIZE = 1 << 40


def byte_size(text: str) -> int:
    """A positive size in bytes: ``1048576``, ``512KiB``, ``64MiB``, ``1GB`` (base 2, as
    Prometheus reads ``body_size_limit``), at most 1 TiB."""
    m = _SIZE.fullmatch(text)
    if m is None or len(m.group(1)) > 15:
        raise argparse.ArgumentTypeError(f"not a size {text!r} (e.g. 64MiB, 512KiB, 1048576)")
    size = int(m.group(1)) * _UNITS[(m.group(2) or "")[:1].lower()]
    if not 0 < size <= _MAX_SIZE:
        raise argparse.ArgumentTypeError(f"size must be above 0 and at most 1TiB, got {text!r}")
    return size


# argparse names the type in its messages ("invalid size value").
byte_size.__name__ = "size"


def existing_file(text: str) -> Path:
    path = Path(text)
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"no such file {text!r}")
    return path


# argparse names the type in its messages ("invalid duration value").
existing_file.__name__ = "file"


def token_file(text: str) -> Path:
    """A file holding a bearer token. Checked when the flags are parsed, so that an
    empty or whitespace-only token (a Secret made from an unset variable) stops the
    command at start, with exit status 2 and the flag and file named, instead of
    letting ``Authorization: Bearer `` through or sending it."""
    path = existing_file(text)
    try:
        read_token(path)
    except SecretError as e:
        raise argparse.ArgumentTypeError(str(e)) from e
    return path


def basic_auth_file(text: str) -> Path:
    """A file holding one line ``user:password``, both parts non-empty; checked when
    the flags are parsed, as ``token_file`` is."""
    path = existing_file(text)
    try:
        read_basic_auth(path)
    except SecretError as e:
        raise argparse.ArgumentTypeError(str(e)) from e
    return path


def add_source_arguments(p: argparse.ArgumentParser, *, what: str = "rule results") -> None:
    """``--source`` and the flags of the ``prometheus`` and ``scrape`` sources."""
    p.add_argument(
        "--source",
        choices=("prometheus", "scrape"),
        default="prometheus",
        help=f"where {what} come from (default %(default)s)",
    )
    prom = p.add_argument_group("prometheus source")
    prom.add_argument(
        "--prometheus.url",
        dest="prometheus_url",
        metavar="URL",
        help="Prometheus base URL, e.g. http://prometheus:9090; a password in it is never logged",
    )
    prom.add_argument(
        "--prometheus.bearer-token-file",
        dest="prometheus_token_file",
        type=token_file,
        metavar="FILE",
        help="bearer token sent to Prometheus; an empty file is refused",
    )
    prom.add_argument(
        "--prometheus.basic-auth-file",
        dest="prometheus_basic_auth_file",
        type=basic_auth_file,
        metavar="FILE",
        help="one line: user:password, both non-empty",
    )
    prom.add_argument(
        "--prometheus.ca-file", dest="prometheus_ca_file", type=existing_file, metavar="FILE"
    )
    prom.add_argument(
        "--prometheus.timeout",
        dest="prometheus_timeout",
        type=duration,
        default=10.0,
        metavar="DURATION",
        help="per query (default 10s)",
    )
    prom.add_argument(
        "--prometheus.body-size-limit",
        dest="prometheus_body_size_limit",
        type=byte_size,
        default=PROMETHEUS_BODY_LIMIT,
        metavar="SIZE",
        help="an answer larger than this is unknown for its rule (default 64MiB)",
    )
    prom.add_argument(
        "--source.health-query",
        dest="health_query",
        default="count(accel_up)",
        metavar="EXPR",
        help="an empty or failed answer marks the source down and every rule unknown "
        "(default %(default)s)",
    )
    scrape = p.add_argument_group("scrape source")
    scrape.add_argument(
        "--targets",
        metavar="LIST",
        help="exporters to scrape, NODE=URL,... e.g. node-a=http://10.0.0.5:9835/metrics",
    )
    scrape.add_argument(
        "--scrape.timeout", dest="scrape_timeout", type=duration, default=10.0, metavar="DURATION"
    )
    scrape.add_argument(
        "--scrape.body-size-limit",
        dest="scrape_body_size_limit",
        type=byte_size,
        default=DEFAULT_BODY_SIZE_LIMIT,
        metavar="SIZE",
        help="uncompressed body size at which a target's scrape fails, as Prometheus's "
        "body_size_limit (default 64MiB)",
    )
    scrape.add_argument(
        "--scrape.sample-limit",
        dest="scrape_sample_limit",
        type=count,
        default=DEFAULT_SAMPLE_LIMIT,
        metavar="N",
        help="a target exposing more samples is refused whole, as Prometheus's "
        "sample_limit (default %(default)s)",
    )


def source_options(args: argparse.Namespace) -> SourceOptions:
    """What ``add_source_arguments``'s flags say, for ``sources.build_source``."""
    return SourceOptions(
        kind=args.source,
        prometheus_url=args.prometheus_url,
        prometheus_timeout=args.prometheus_timeout,
        prometheus_token_file=args.prometheus_token_file,
        prometheus_basic_auth_file=args.prometheus_basic_auth_file,
        prometheus_ca_file=args.prometheus_ca_file,
        prometheus_body_size_limit=args.prometheus_body_size_limit,
        health_query=args.health_query,
        targets=args.targets,
        scrape_timeout=args.scrape_timeout,
        scrape_body_size_limit=args.scrape_body_size_limit,
        scrape_sample_limit=args.scrape_sample_limit,
    )


class InputError(ValueError):
    """A file given on the command line is unusable; the message names it."""


def add_placement_source_arguments(p: argparse.ArgumentParser) -> None:
    """``run``'s source flags, plus what placement adds (``place``, ``extender``)."""
    add_source_arguments(p, what="device metrics")
    p.add_argument(
        "--kubeconfig",
        type=existing_file,
        metavar="FILE",
        help="read nodes (labels, taints, annotations) from this cluster",
    )
    p.add_argument(
        "--weight",
        action="append",
        default=[],
        metavar="NAME=W",
        help="a score term's weight (topology, load, locality, runtime, fragmentation); repeatable",
    )


async def open_kube(path: Path) -> Kube:
    """``ClientKube`` from a kubeconfig (``place`` and ``extender`` read nodes and
    annotate pods with it)."""
    try:
        return ClientKube.from_config(str(path))
    except KubeConfigError as e:
        raise InputError(f"--kubeconfig {path}: {e}") from e


async def close_kube(kube: Kube) -> None:
    """Close ``kube``'s connections, if it holds any (``Closable``)."""
    if isinstance(kube, Closable):
        result = kube.close()
        if inspect.isawaitable(result):
            await result


__all__ = [
    "InputError",
    "add_placement_source_arguments",
    "add_source_arguments",
    "basic_auth_file",
    "byte_size",
    "close_kube",
    "count",
    "duration",
    "existing_file",
    "open_kube",
    "source_options",
    "token_file",
]
