"""A real Prometheus over samples a test wrote, for tests that compare answers.

Why: "same data, same expression, same answer" is only proven against Prometheus
itself. The samples go through the path a rule's author would use: one
OpenMetrics file, backfilled with ``promtool tsdb create-blocks-from openmetrics``
and served by Debian's Prometheus 2.42 (``tests/support/procs.py`` starts and
always stops it), and the same file is loaded into a ``SeriesStore`` with the
bounded reader that ``accel-autoscaler query --series`` uses.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from tests.support.procs import prometheus_tsdb, require


@contextlib.contextmanager
def serve(samples: Path, tmp: Path, args: Sequence[str] = ()) -> Iterator[str]:
    """Prometheus serving the OpenMetrics file ``samples`` (``args`` added to its
    command line); yields its URL."""
    data = tmp / "data"
    proc = subprocess.run(
        [require("promtool"), "tsdb", "create-blocks-from", "openmetrics", str(samples), str(data)],
        capture_output=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr.decode()
    with prometheus_tsdb(tmp, data, args) as url:
        yield url


def ask(url: str, expr: str, t: float, raw: bool = False) -> dict[str, Any]:
    """The whole body of ``/api/v1/query`` (an error body too). ``raw`` keeps the
    numbers as the text Prometheus wrote (``parse_float=str``)."""
    query = urllib.parse.urlencode({"query": expr, "time": repr(t)})
    try:
        with urllib.request.urlopen(f"{url}/api/v1/query?{query}", timeout=30) as resp:
            text = resp.read()
    except urllib.error.HTTPError as e:
        text = e.read()
    body: dict[str, Any] = (
        json.loads(text, parse_float=str, parse_int=str) if raw else json.loads(text)
    )
    return body
