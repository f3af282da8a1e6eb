"""Coverage-guided fuzzing of the byte-level parsers with atheris (libFuzzer).

Hypothesis draws from what its strategies describe; libFuzzer mutates bytes and
keeps those that reach new code, which finds the corners of a binary table or a
line format that no strategy names. The targets are the parsers that take bytes
from outside: AMD's ``gpu_metrics`` table, the OpenMetrics and Prometheus text
formats, and the Alertmanager webhook body (decoded as the handler decodes it,
then validated).

Run as ``python -m tests.fuzz.atheris_targets TARGET [libFuzzer flags] CORPUS...``;
``test_fuzz_atheris`` does, bounded, and ``make fuzz`` does for minutes. atheris
runs until it finds a crash or a bound stops it, so the caller always passes
``-atheris_runs`` or ``-max_total_time``. An exception other than the parser's own
error is a crash: libFuzzer prints the traceback, writes the input as
``crash-<sha1>`` under ``-artifact_prefix`` and exits non-zero.
"""

from __future__ import annotations

import contextlib
import math
import sys
from collections.abc import Callable

import atheris  # type: ignore[import-untyped]  # ships no type information

# Only the parsers are instrumented: instrumenting all of autoscaler.promql (the
# evaluator comes with its package) costs seconds at every start and adds no
# coverage the targets can reach.
with atheris.instrument_imports(
    include=[
        "exporter.backends.amd.gpu_metrics",
        "autoscaler.promql.openmetrics",
        "autoscaler.promql.textformat",
        "autoscaler.promql.store",
        "autoscaler.sources.alertmanager",
        "accel_common.jsonread",
    ]
):
    from accel_common import jsonread
    from autoscaler.promql.openmetrics import OpenMetricsError, parse_into
    from autoscaler.promql.store import ExpositionError, SeriesStore
    from autoscaler.sources.alertmanager import MAX_BODY, AlertReceiver, PayloadError
    from exporter.backends.amd.gpu_metrics import (
        GpuMetricsError,
        parse_gpu_metrics,
        residency_throttle,
        xgmi_rates,
    )


def gpu_metrics(data: bytes) -> None:
    try:
        m = parse_gpu_metrics(data)
    except GpuMetricsError:
        return
    xgmi_rates(m, m)
    residency_throttle(m, m)


def openmetrics(data: bytes) -> None:
    text = data.decode("utf-8", "replace")
    with contextlib.suppress(OpenMetricsError):
        parse_into(text, SeriesStore(retention=math.inf))
    with contextlib.suppress(ExpositionError):
        SeriesStore().ingest_text(text, 1000.0, {"node": "n1"}, target="t")


def webhook(data: bytes) -> None:
    try:
        payload = jsonread.loads(data, max_bytes=MAX_BODY)
        AlertReceiver(limit=50).ingest(payload, 1.8e9)
    except (jsonread.JSONBodyError, PayloadError):
        pass


TARGETS: dict[str, Callable[[bytes], None]] = {
    "gpu_metrics": gpu_metrics,
    "openmetrics": openmetrics,
    "webhook": webhook,
}


def main(argv: list[str]) -> None:
    if len(argv) < 2 or argv[1] not in TARGETS:
        sys.exit(f"usage: {argv[0]} {{{','.join(TARGETS)}}} [libFuzzer flags] CORPUS...")
    target = TARGETS[argv[1]]
    atheris.Setup([argv[0], *argv[2:]], target)
    atheris.Fuzz()


if __name__ == "__main__":
    main(sys.argv)
