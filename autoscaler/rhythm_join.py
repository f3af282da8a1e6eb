"""Each device pod's largest utilization, joined by the rhythm learner itself from
two answers, with the join kept while the fleet's devices and pods stay.

Why: the learner asks every cycle for the largest utilization of every pod that
is no gang member (``POD_QUERY``: ``max by (namespace, pod) (accel_device_pod_info
* on (node, device) group_left () max_over_time(accel_utilization_ratio[1m]))``).
At 16,384 devices in 2,048 one-node pods (``scenarios/llama3-single.yaml``) that
join cost about 3.7 ms a cycle, most of it sorting both sides' keys to match
them, although which device belongs to which pod changes only when a pod comes
or goes. Where the source hands answers back as label code columns
(``ColumnarSource``), the learner asks for the two sides apart (each device's
``max_over_time(accel_utilization_ratio[1m])``, and the device pods outside any
gang) and matches them here; the match is kept while both sides come back with
the same label codes in the same order, so a steady fleet pays a comparison of
the code columns and a gather, about 1.9 ms with the two queries (the device
windows are then the rules' too: the evaluator keeps them for the cycle).

It answers exactly what ``POD_QUERY`` answers (``tests/autoscaler/test_rhythm_join.py``
holds them equal): a device pod's value is the largest of its devices' info value
times their utilization, NaN only where all are (PromQL's ``max``); a device
without a utilization series does not count; and where two utilization series
share a node and device (which Prometheus refuses to match) there is no answer at
all, as the query's error would give none.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from autoscaler.promql.evaluator import Columns
from autoscaler.promql.symbols import F64, I64, Symbols
from autoscaler.promql.vectors import combine

# Each device's utilization over the last minute, by (node, device).
DEVICE_UTIL_QUERY = "max_over_time(accel_utilization_ratio[1m])"
DEVICE_UTIL_LABELS = ("node", "device")
# The devices of every pod that is no gang member, by device and by pod.
POD_DEVICES_QUERY = "accel_device_pod_info unless on (namespace, pod) accel_gang_info"
POD_DEVICES_LABELS = ("node", "device", "namespace", "pod")
# Every pod's age that is no gang member: the rules' own term (``stalled-job``,
# ``hung-collective``), which the evaluator then hands them.
POD_AGE_TERM = "accel_job_age_seconds unless on (namespace, pod) accel_gang_info"


@dataclass
class _Match:
    """Which utilization row each matched device pod row takes, grouped by pod."""

    info_rows: I64
    util_rows: I64
    starts: I64  # where each pod's run of rows starts
    namespace: I64  # each pod's codes
    pod: I64
    refused: bool  # two utilization series of one device: no answer


@dataclass
class DeviceJoin:
    """The kept match and the label codes it was made from."""

    symbols: Symbols | None = None
    codes: tuple[I64, ...] = ()
    match: _Match | None = None
    made: int = field(default=0)
    """How many times a match was made (not kept): for the tests."""

    def per_pod(self, util: Columns, info: Columns) -> tuple[I64, I64, F64]:
        """Each pod's (namespace codes, pod codes, largest utilization), one row
        per pod; no rows where either side is empty or the devices' series clash."""
        none = np.zeros(0, dtype=np.int64)
        if not len(util.values) or not len(info.values):
            return none, none, np.zeros(0)
        codes = (*util.codes, *info.codes)
        match = self.match
        if match is None or not _kept(self.symbols, self.codes, util.symbols, codes):
            match = self.match = _match(util.codes, info.codes)
            self.symbols, self.codes = util.symbols, codes
            self.made += 1
        if match.refused or not match.starts.size:
            return none, none, np.zeros(0)
        with np.errstate(all="ignore"):
            product = info.values[match.info_rows] * util.values[match.util_rows]
        values: F64 = np.fmax.reduceat(product, match.starts)
        return match.namespace, match.pod, values


@dataclass
class JobGroups:
    """``min by (namespace, pod) (X)`` over an answer's code columns, the grouping
    kept while the same codes come back in the same order: the pods' ages
    (``POD_AGE_TERM``: one row per pod as the cluster state is written, but
    nothing here counts on it) cost a comparison and a reduction, not a sort."""

    symbols: Symbols | None = None
    codes: tuple[I64, ...] = ()
    order: I64 = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    starts: I64 = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    made: int = 0

    def least(self, found: Columns) -> tuple[I64, I64, F64]:
        """Each job's (namespace codes, name codes, least value): NaN only where
        all of its values are (PromQL's ``min``)."""
        if not len(found.values):
            none = np.zeros(0, dtype=np.int64)
            return none, none, np.zeros(0)
        codes = found.codes
        if not _kept(self.symbols, self.codes, found.symbols, codes):
            self.order, self.starts = _grouped(combine(list(codes), len(found.values)))
            self.symbols, self.codes = found.symbols, codes
            self.made += 1
        first = self.order[self.starts]
        values: F64 = np.fmin.reduceat(found.values[self.order], self.starts)
        return codes[0][first], codes[1][first], values


def _kept(
    symbols: Symbols | None, codes: tuple[I64, ...], now: Symbols, found: tuple[I64, ...]
) -> bool:
    """Whether an answer's code columns (``found``, decoded by ``now``) are those a
    kept grouping or match was made from: the same symbols, codes and order."""
    return (
        symbols is now
        and len(codes) == len(found)
        and all(np.array_equal(a, b) for a, b in zip(codes, found, strict=True))
    )


def _grouped(key: I64) -> tuple[I64, I64]:
    """``(order, starts)``: the rows in key order (stable) and where each key's run
    of rows starts in it."""
    order = np.argsort(key, kind="stable")
    ordered = key[order]
    if not ordered.size:
        return order.astype(np.int64), np.zeros(0, dtype=np.int64)
    starts = np.flatnonzero(np.concatenate([[True], ordered[1:] != ordered[:-1]]))
    return order.astype(np.int64), starts.astype(np.int64)


def _match(util: tuple[I64, ...], info: tuple[I64, ...]) -> _Match:
    """``* on (node, device) group_left ()`` with the utilization as the "one"
    side, then the rows grouped by ``(namespace, pod)``."""
    nu, ni = len(util[0]), len(info[0])
    columns = [np.concatenate([util[k], info[k]]) for k in range(len(DEVICE_UTIL_LABELS))]
    key = combine(columns, nu + ni)
    util_key, info_key = key[:nu], key[nu:]
    order = np.argsort(util_key, kind="stable")
    ordered = util_key[order]
    none = np.zeros(0, dtype=np.int64)
    if bool((ordered[1:] == ordered[:-1]).any()):
        return _Match(none, none, none, none, none, refused=True)
    at = np.minimum(np.searchsorted(ordered, info_key), nu - 1)
    info_rows = np.flatnonzero(ordered[at] == info_key)
    util_rows = order[at[info_rows]]
    namespace, pod = info[2][info_rows], info[3][info_rows]
    by_job, starts = _grouped(combine([namespace, pod], info_rows.size))
    first = by_job[starts]
    return _Match(
        info_rows[by_job],
        util_rows[by_job],
        starts.astype(np.int64),
        namespace[first],
        pod[first],
        refused=False,
    )


__all__ = [
    "DEVICE_UTIL_LABELS",
    "DEVICE_UTIL_QUERY",
    "POD_AGE_TERM",
    "POD_DEVICES_LABELS",
    "POD_DEVICES_QUERY",
    "DeviceJoin",
    "JobGroups",
]
