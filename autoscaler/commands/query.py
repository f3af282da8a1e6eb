"""``accel-autoscaler query``: one expression, one series file, one instant, with
the built-in evaluator; the answer is the ``data`` object of Prometheus's
``/api/v1/query`` (``promql/query.py``), so that a rule's author can diff it with
Prometheus's own answer for the same file.

Exit status: 0 with a result, 2 for a usage problem (bad time, unreadable or
malformed file, an expression that does not parse or is outside the subset),
1 for an evaluation error. The file is outside input: it is read up to
``--series.size-limit`` and parsed by the bounded reader in ``promql/openmetrics.py``.
"""

from __future__ import annotations

import argparse
import math
import sys

from autoscaler.commands.flags import byte_size
from autoscaler.promql.errors import EvalError, ExprError
from autoscaler.promql.evaluator import Evaluator
from autoscaler.promql.openmetrics import FILE_LIMIT, OpenMetricsError, load
from autoscaler.promql.query import ordered, result_json

_PROG = "accel-autoscaler query"


def add_arguments(q: argparse.ArgumentParser) -> None:
    q.add_argument("expr", metavar="EXPR")
    q.add_argument(
        "--series",
        required=True,
        metavar="FILE",
        help="OpenMetrics samples with timestamps (what promtool tsdb create-blocks-from "
        "openmetrics reads)",
    )
    q.add_argument("--time", required=True, metavar="T", help="evaluation time: unix seconds")
    q.add_argument(
        "--series.size-limit",
        dest="series_size_limit",
        type=byte_size,
        default=FILE_LIMIT,
        metavar="SIZE",
        help="a larger series file is refused (default 256MiB)",
    )


def main(args: argparse.Namespace) -> int:
    return query(args.expr, args.series, args.time, size_limit=args.series_size_limit)


def _fail(message: str, status: int) -> int:
    print(f"{_PROG}: error: {message}", file=sys.stderr)
    return status


def query(expr: str, series_file: str, time: str, size_limit: int = FILE_LIMIT) -> int:
    try:
        t = float(time)
        if not math.isfinite(t):
            raise ValueError
    except ValueError:
        return _fail(f"--time must be unix seconds, got {time!r}", 2)
    try:
        store = load(series_file, limit=size_limit)
    except OSError as e:
        return _fail(f"cannot read {series_file}: {e.strerror or e}", 2)
    except OpenMetricsError as e:
        return _fail(str(e), 2)
    evaluator = Evaluator(store)
    try:
        evaluator.check(expr)
    except ExprError as e:
        return _fail(str(e), 2)
    try:
        result = evaluator.instant(expr, t)
    except EvalError as e:
        return _fail(str(e), 1)
    # Sorting by labels would undo what sort, sort_desc, topk and bottomk asked for.
    print(result_json(result, keep_order=ordered(expr)))
    return 0
