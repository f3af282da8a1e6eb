"""``accel-autoscaler place POD.yaml``: where would this pod go, and why.

The extender answers kube-scheduler with a number per node; a person asking "why
did my 4-GPU job land there" needs the device set and every term behind that
number. This command scores one pod spec against the live fleet state (from
Prometheus or straight from the exporters) and prints the ranked candidates with
each term, then every rejected node with its reason.

Nodes come from the cluster (``--kubeconfig``) or, offline, from ``--nodes FILE``
(a NodeList or a list of Node objects, JSON or YAML, as ``kubectl get nodes -o
yaml`` writes it); without either, every node the metrics know is a candidate,
with no labels or taints.

With ``--source scrape`` the answer comes from one scrape, which has no history: a
device whose fatal-fault counter is above 0 cannot be dated, so it is not offered,
and a warning on stderr names it (``placement/fleet.py``). A device faulted in the
last 10 minutes is refused by both sources alike; ``--source prometheus``, which
has the history, also offers a device whose fault is older.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from autoscaler.commands.flags import (
    InputError,
    add_placement_source_arguments,
    close_kube,
    existing_file,
    open_kube,
    source_options,
)
from autoscaler.placement.fleet import FleetUnavailable, read_fleet
from autoscaler.placement.score import (
    Obj,
    PodRequest,
    PodRequestError,
    Ranking,
    Weights,
    natural_key,
    parse_weights,
    pod_request,
    score,
)
from autoscaler.sources.build import build_source

log = logging.getLogger("accel_autoscaler.placement.place")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("pod", type=Path, metavar="POD.yaml", help="a Pod (or its JSON) to place")
    p.add_argument(
        "--nodes",
        type=existing_file,
        metavar="FILE",
        help="nodes for offline use: a NodeList or a list of Nodes, JSON or YAML",
    )
    p.add_argument("--output", choices=("text", "json"), default="text")
    add_placement_source_arguments(p)


def read_yaml(path: Path, what: str) -> Any:
    try:
        return yaml.safe_load(path.read_text())
    except OSError as e:
        raise InputError(f"{path}: cannot read the {what}: {e.strerror or e}") from e
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        raise InputError(f"{where}: the {what} is not valid YAML or JSON: {e}") from e


def read_pod(path: Path) -> Obj:
    pod = read_yaml(path, "pod")
    if not isinstance(pod, dict) or pod.get("kind", "Pod") != "Pod":
        raise InputError(f"{path}: expected one Pod (kind: Pod), got {type(pod).__name__}")
    return pod


def read_nodes(path: Path) -> list[Obj]:
    raw = read_yaml(path, "node list")
    items = raw.get("items") if isinstance(raw, dict) else raw
    if not isinstance(items, list) or not all(
        isinstance(n, dict) and (n.get("metadata") or {}).get("name") for n in items
    ):
        raise InputError(f"{path}: expected a NodeList or a list of Nodes, each with metadata.name")
    return items


def _fmt_seconds(s: float | None) -> str:
    if s is None:
        return "-"
    for unit, size in (("d", 86400.0), ("h", 3600.0), ("m", 60.0)):
        if s >= size:
            return f"{s / size:.1f}{unit}"
    return f"{s:.1f}s"


def render_text(req: PodRequest, ranking: Ranking) -> str:
    vendors = ",".join(sorted(req.vendors)) or "any"
    head = (
        f"pod {req.key}: {req.count} devices (vendors {vendors}"
        + (f", models {','.join(req.models)}" if req.models else "")
        + (f", {req.flops:.3g} FLOPs at {req.precision}" if req.flops else "")
        + (
            ", data at " + ",".join(f"{k}={v}" for k, v in req.data_location)
            if req.data_location
            else ""
        )
        + f", priority {req.priority})"
    )
    lines = [head, ""]
    if ranking.candidates:
        cols = ("#", "node", "total", "topology", "load", "locality", "runtime", "frag", "est")
        rows = [cols]
        for i, c in enumerate(ranking.candidates, 1):
            t = c.terms
            rows.append(
                (
                    str(i),
                    c.node,
                    f"{c.total:.3f}",
                    f"{t.topology:.2f}",
                    f"{t.load:.2f}",
                    f"{t.locality:.2f}",
                    f"{t.runtime:.2f}",
                    f"{t.fragmentation:.2f}",
                    _fmt_seconds(c.est_seconds),
                )
            )
        widths = [max(len(r[i]) for r in rows) for i in range(len(cols))]
        for r in rows:
            lines.append("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip())
        lines.append("")
        for i, c in enumerate(ranking.candidates, 1):
            note = f"  ({'; '.join(c.notes)})" if c.notes else ""
            lines.append(
                f"{i}. {c.node}: devices {','.join(c.devices)} "
                f"(pairwise distance {c.distance:g}){note}"
            )
    else:
        lines.append("no node can take this pod now")
    if ranking.rejected:
        lines.append("")
        lines.append("rejected:")
        for rej in sorted(ranking.rejected, key=lambda x: natural_key(x.node)):
            lines.append(f"  {rej.node}: {rej.reason}")
    return "\n".join(lines) + "\n"


def render_json(req: PodRequest, ranking: Ranking) -> str:
    out = {
        "pod": req.key,
        "devices": req.count,
        "candidates": [
            {
                "node": c.node,
                "devices": list(c.devices),
                "total": round(c.total, 6),
                "terms": {k: round(v, 6) for k, v in vars(c.terms).items()},
                "pairwiseDistance": c.distance,
                "estimatedSeconds": c.est_seconds,
                "notes": list(c.notes),
            }
            for c in ranking.candidates
        ],
        "rejected": [
            {"node": r.node, "reason": r.reason, "resolvable": r.resolvable}
            for r in ranking.rejected
        ],
    }
    return json.dumps(out, indent=2) + "\n"


async def place(args: argparse.Namespace) -> tuple[PodRequest, Ranking]:
    weights: Weights = parse_weights(args.weight)
    req = pod_request(read_pod(args.pod))
    nodes: list[Obj | str] | None = None
    if args.nodes is not None:
        nodes = list(read_nodes(args.nodes))
    elif args.kubeconfig is not None:
        kube = await open_kube(args.kubeconfig)
        try:
            nodes = list(await kube.list_nodes())
        finally:
            await close_kube(kube)
    source = build_source(source_options(args))
    try:
        fleet = await read_fleet(source, time.time())
    finally:
        await source.close()
    if nodes is None:
        nodes = [str(n) for n in sorted(fleet.nodes, key=natural_key)]
    return req, score(req, nodes, fleet, weights)


def main(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
    try:
        req, ranking = asyncio.run(place(args))
    except (InputError, PodRequestError, ValueError, FleetUnavailable) as e:
        where = f"{args.pod}: " if isinstance(e, PodRequestError) else ""
        print(f"accel-autoscaler place: error: {where}{e}", file=sys.stderr)
        return 2
    render = render_json if args.output == "json" else render_text
    sys.stdout.write(render(req, ranking))
    return 0 if ranking.candidates else 1
