"""The fleet simulator (``accel-autoscaler simulate``): the production controller,
engine, rules and actions against an in-memory cluster in simulated time, and the
same fleet without them, to measure what the rules are worth.

- ``scenario``: the scenario YAML and its validation;
- ``kube``: the in-memory Kubernetes API (the ``Kube`` protocol);
- ``fleet``: nodes, devices, jobs, faults, and Kubernetes' own controllers;
- ``scheduler``: the placement hook and ``first-fit``;
- ``telemetry``: the series a scrape would see, into the evaluator's store;
- ``run``: the two runs, ``summary.json``, the table; ``plots``: the PNGs.
"""

from __future__ import annotations

import argparse


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("scenario", metavar="SCENARIO.yaml", help="scenario file (see scenarios/)")
    p.add_argument(
        "--rules",
        action="append",
        metavar="PATH",
        help="rule file or directory (repeatable; default rules/)",
    )
    p.add_argument(
        "--out",
        default="simulate-out",
        metavar="DIR",
        help="where summary.json and the plots go (default %(default)s)",
    )
    p.add_argument("--seed", type=int, metavar="N", help="overrides the scenario's seed")
    p.add_argument(
        "--baseline",
        choices=("none", "skip"),
        default="none",
        help="the comparison run: none = no remediation, static pools (default); "
        "skip = run the rules only",
    )
    p.add_argument("--no-plots", action="store_true", help="write summary.json only")


__all__ = ["add_arguments"]
