"""A query result as Prometheus's HTTP API writes it, for ``accel-autoscaler
query`` (``commands/query.py``: one expression, one series file, one instant).

The output is the ``data`` object of Prometheus's ``/api/v1/query``, byte for
byte where the numbers agree: ``{"resultType": ..., "result": ...}`` with values
as ``[time, "value"]``. A value is written like Go's
``strconv.FormatFloat(v, 'f', -1, 64)`` (shortest digits; ``'e'`` below 1e-6 and
from 1e21 on, as ``jsonutil.MarshalValue`` does; ``NaN``, ``+Inf``, ``-Inf``) and a
time like ``jsonutil.MarshalTimestamp`` (seconds, then exactly three decimals when
there is a fraction). A scalar is the exception, as in Prometheus 2.42: Go's
``encoding/json`` writes its time as a plain float and its value always in
``'f'`` format. So a rule's author can run the same file through ``promtool tsdb
create-blocks-from openmetrics`` and Prometheus, and diff the two answers.

Series come sorted by labels, except where the expression orders them
(``ordered``): then the evaluator's order is Prometheus's order (``sort``,
``sort_desc``, ``topk``, ``bottomk``, see ``goorder``) and sorting by labels
would undo exactly what was asked for.
"""

from __future__ import annotations

import json
import math
from decimal import Decimal

import promql_parser

from autoscaler.promql.guard import parse
from autoscaler.types import Labels, Matrix, Sample, Scalar, Vector

_ORDERING_FUNCTIONS = frozenset({"sort", "sort_desc"})
_ORDERING_AGGREGATIONS = frozenset({"topk", "bottomk"})


def _shortest_f(v: float) -> str:
    """Go's ``strconv.FormatFloat(v, 'f', -1, 64)``: shortest digits, no exponent."""
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    text = format(Decimal(repr(v)), "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text


def format_value(v: float) -> str:
    """A vector or matrix sample value as Prometheus's JSON writes it
    (``jsonutil.MarshalValue``): shortest ``'f'``, or ``'e'`` below 1e-6 and from
    1e21 on."""
    magnitude = abs(v)
    if math.isfinite(v) and magnitude != 0 and (magnitude < 1e-6 or magnitude >= 1e21):
        sign, digits, exponent = Decimal(repr(v)).as_tuple()
        assert isinstance(exponent, int)
        significant = "".join(map(str, digits)).rstrip("0") or "0"
        power = exponent + len(digits) - 1
        mantissa = significant[0] + ("." + significant[1:] if len(significant) > 1 else "")
        return f"{'-' if sign else ''}{mantissa}e{'+' if power >= 0 else '-'}{abs(power):02d}"
    return _shortest_f(v)


def format_timestamp(t: float) -> str:
    """A sample time (seconds, millisecond precision) as Prometheus's JSON writes it."""
    ms = round(t * 1000)
    sign = "-" if ms < 0 else ""
    ms = abs(ms)
    whole, fraction = divmod(ms, 1000)
    if fraction:
        return f"{sign}{whole}.{fraction:03d}"
    return f"{sign}{whole}"


def _metric(labels: Labels) -> str:
    return json.dumps(dict(labels), separators=(",", ":"), ensure_ascii=False)


def _point(t: float, v: float) -> str:
    return f'[{format_timestamp(t)},"{format_value(v)}"]'


def ordered(expr: str) -> bool:
    """Whether the answer to ``expr`` is in an order that it asked for: its
    outermost operation is ``sort``, ``sort_desc``, ``topk`` or ``bottomk``, or
    an operation with a number that keeps the order of its vector side (as
    ``topk(3, x) > 0`` does in Prometheus). ``expr`` must parse."""
    return _orders(parse(expr))


def _orders(node: object) -> bool:
    while isinstance(node, promql_parser.ParenExpr):
        node = node.expr
    if isinstance(node, promql_parser.Call):
        return str(node.func.name) in _ORDERING_FUNCTIONS
    if isinstance(node, promql_parser.AggregateExpr):
        return str(node.op) in _ORDERING_AGGREGATIONS
    if isinstance(node, promql_parser.UnaryExpr):
        return _orders(node.expr)
    if isinstance(node, promql_parser.BinaryExpr):
        if isinstance(node.rhs, promql_parser.NumberLiteral):
            return _orders(node.lhs)
        if isinstance(node.lhs, promql_parser.NumberLiteral):
            return _orders(node.rhs)
    return False


def result_json(result: Vector | Scalar | Matrix, keep_order: bool = False) -> str:
    """The ``data`` object of ``/api/v1/query`` for a result; series sorted by
    labels unless ``keep_order`` (the expression ordered them: ``ordered``)."""
    if isinstance(result, Scalar):
        # A scalar goes through Go's encoding/json: the time is a plain float and
        # the value is always 'f'-formatted.
        t = _shortest_f(round(result.timestamp * 1000) / 1000)
        return f'{{"resultType":"scalar","result":[{t},"{_shortest_f(result.value)}"]}}'
    if isinstance(result, Vector):
        items = [
            f'{{"metric":{_metric(s.labels)},"value":{_point(s.timestamp, s.value)}}}'
            for s in (result.samples if keep_order else sorted(result.samples, key=_by_labels))
        ]
        return '{"resultType":"vector","result":[' + ",".join(items) + "]}"
    items = [
        f'{{"metric":{_metric(s.labels)},"values":['
        + ",".join(_point(t, v) for t, v in s.points)
        + "]}"
        for s in sorted(result.series, key=lambda s: s.labels)
    ]
    return '{"resultType":"matrix","result":[' + ",".join(items) + "]}"


def _by_labels(sample: Sample) -> Labels:
    return sample.labels
