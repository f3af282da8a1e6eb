"""The exporter keeps its own cached writer (``accel_common/exposition.py``:
rendered once per poll, off the event loop, gzip cached), while the controller and
the node agent render through ``prometheus-client`` (issue 28). These tests hold
the two to the same bytes for the same families, apart from the two things the
text format leaves to the writer:

- the order of the label pairs in a sample (the exporter keeps the catalogue's,
  ``device``, ``vendor``, ``uuid`` first; client_python sorts them by name);
- the spelling of a value (the exporter writes ``61203283968`` and
  ``1796123456.789``, client_python ``6.1203283968e+10`` and
  ``1.796123456789e+09``): each is its writer's spelling of one float64, and both
  read back to the same bits.

HELP and TYPE lines, names, label escaping, family order and sample order are
compared byte for byte. A family without samples is left out by both (the
client's own registry writes its HELP and TYPE alone; ``SnapshotCollector``
leaves it out, as the exporter does).
"""

from __future__ import annotations

import math
import re
import struct
from collections.abc import Iterable, Iterator

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import Metric as Family
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.utils import floatToGoString

from accel_common.exposition import Exposition, format_value
from accel_common.ownmetrics import Metric, SnapshotCollector, family, registry_of, render
from exporter.backends.base import BackendOptions
from exporter.backends.sim import SimBackend, parse_sim_devices
from exporter.poller import Poller
from tests.support.exposition import stable
from tests.support.paths import GOLDEN_DIR

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$")
_PAIR = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="(?:[^"\\]|\\.)*"')


def _bits(value: float) -> bytes:
    return b"NaN" if math.isnan(value) else struct.pack("<d", value)


def _go(value: float) -> str:
    """client_python's spelling of a value (Go's, within the text format)."""
    return str(floatToGoString(value))  # type: ignore[no-untyped-call]


def canonical(text: str, spelling: str) -> str:
    """``text`` with each sample's label pairs in name order and its value in one
    spelling (``repr`` of the float), after checking that the value was written in
    ``spelling``'s own form ("exporter" or "client")."""
    out: list[str] = []
    for line in text.splitlines():
        if line.startswith("#"):
            out.append(line)
            continue
        m = _SAMPLE.match(line)
        assert m, f"not a sample line: {line!r}"
        name, inside, token = m.group(1), m.group(2) or "", m.group(3)
        pairs = [p.group(0) for p in _PAIR.finditer(inside)]
        assert ",".join(pairs) == inside, f"unexpected text between labels: {line!r}"
        value = float(token)
        own = format_value(value) if spelling == "exporter" else _go(value)
        assert token == own, f"{spelling} spelt {value!r} as {token!r}, not {own!r}"
        pairs.sort(key=lambda p: p.split("=", 1)[0])
        labels = "{" + ",".join(pairs) + "}" if pairs else ""
        spelt = "NaN" if math.isnan(value) else repr(value)
        out.append(f"{name}{labels} {spelt}")
    return "\n".join(out) + "\n" if out else ""


class _Families:
    """A collector that yields families it was given."""

    def __init__(self, families: Iterable[Family]) -> None:
        self.families = list(families)

    def collect(self) -> Iterator[Family]:
        yield from self.families


def client_text(families: Iterable[Family]) -> str:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families(families))
    return generate_latest(registry).decode()


def assert_compatible(exporter_text: str, client: str) -> None:
    mine, theirs = canonical(exporter_text, "exporter"), canonical(client, "client")
    assert mine == theirs
    # Same values to the bit, not only to the printed digits.
    for a, b in zip(mine.splitlines(), theirs.splitlines(), strict=True):
        if not a.startswith("#"):
            assert _bits(float(a.rsplit(" ", 1)[1])) == _bits(float(b.rsplit(" ", 1)[1]))


async def _sim_text() -> str:
    """Two polls of simulated devices of three vendors, partitioned, with pods."""
    now = [0.0]
    options = BackendOptions(
        sim_devices=parse_sim_devices("nvidia:2,amd:2,oneapi:2"), sim_partitions=True, sim_pods=3
    )
    poller = Poller([SimBackend(options, clock=lambda: now[0])], 1, 5, clock=lambda: 1.7e9)
    await poller.poll_once()
    now[0] = 10.0  # a second poll: counters and energy have moved
    return (await poller.poll_once()).text.decode()


async def test_a_live_exposition_is_what_prometheus_client_writes_for_its_families() -> None:
    """The sim backend's exposition, read into families by client_python's own
    parser and written out again by its own writer."""
    text = stable(await _sim_text())
    families = list(text_string_to_metric_families(text))
    assert len(families) > 20
    assert_compatible(text, client_text(families))


# The golden files that hold a whole exposition (the topology ones hold an excerpt
# of sample lines).
WHOLE = sorted(p.name for p in GOLDEN_DIR.glob("*.prom") if p.read_text().startswith("# HELP"))


def test_the_golden_expositions_are_there() -> None:
    assert len(WHOLE) >= 12, WHOLE


@pytest.mark.parametrize("golden", WHOLE)
def test_every_backends_golden_exposition_is_compatible(golden: str) -> None:
    """Each backend's golden file (held equal to the renderer by its own test)."""
    # Two files stand a placeholder for the poll duration, which no clock fixes.
    text = (GOLDEN_DIR / golden).read_text().replace(" <duration>", " 0.003125")
    assert_compatible(text, client_text(text_string_to_metric_families(text)))


# Families built both ways from the same data: hostile label values and HELP,
# every kind of value, labels declared out of name order.
HELP = 'Odd help: a back\\slash, a "quote" and a\nnewline.'
VALUES: tuple[float, ...] = (
    0,
    1,
    -1,
    0.5,
    0.1,
    -0.0,
    1e-300,
    5e-324,
    0.012345678,
    86400.125,
    1796123456.789,
    2.0**53 - 1,
    2.0**53 + 2,
    1e22,
    math.inf,
    -math.inf,
    math.nan,
)
LABEL_VALUES = ("plain", 'q"uote', "back\\slash", "new\nline", "ünï ✓", "", "{a=b,}")
GAUGE = Metric("test_odd_values", "gauge", HELP, ("zone", "device", "alpha"))
COUNTER = Metric("test_odd_events_total", "counter", "Events.\\n is not a newline", ("kind",))


def _rows() -> list[tuple[tuple[str, str, str], float]]:
    return [
        ((LABEL_VALUES[i % len(LABEL_VALUES)], f"d{i}", LABEL_VALUES[-1 - i % 3]), v)
        for i, v in enumerate(VALUES)
    ]


def _exposition() -> str:
    out = Exposition()
    for m in (GAUGE, COUNTER):
        out.family(m.name, m.type, m.help)
    out.family("test_never_sampled", "gauge", "A family with no sample.")
    for values, v in _rows():
        out.add(GAUGE.name, list(zip(GAUGE.labels, values, strict=True)), v)
    for i, kind in enumerate(LABEL_VALUES):
        out.add(COUNTER.name, [("kind", kind)], float(i * 10**6 + 1))
    return out.text()


def test_the_same_families_give_the_same_bytes_both_ways() -> None:
    gauge = family(GAUGE, _rows())
    counter = family(COUNTER, [((k,), float(i * 10**6 + 1)) for i, k in enumerate(LABEL_VALUES)])
    assert_compatible(_exposition(), client_text([gauge, counter]))


def test_where_neither_choice_arises_the_bytes_are_identical() -> None:
    """Labels given in name order and values both writers spell alike: no
    normalisation at all."""
    m = Metric("test_identical", "gauge", HELP, ("a", "b"))
    rows = [(("x\\y", 'q"'), 0.5), (("n\nl", ""), 0.012345678), (("z", "z"), math.inf)]
    ours = Exposition()
    ours.family(m.name, m.type, m.help)
    for values, v in rows:
        ours.add(m.name, list(zip(m.labels, values, strict=True)), v)
    assert ours.text() == client_text([family(m, rows)])


def test_a_family_without_samples_is_left_out_by_both() -> None:
    m = Metric("test_empty", "gauge", "Nothing yet.")
    ours = Exposition()
    ours.family(m.name, m.type, m.help)
    collector = SnapshotCollector([m], lambda: None, lambda _: [(m, [])])
    assert ours.text() == render(registry_of(collector)).decode() == ""
    # client_python's own registry would write the header alone: the collector's
    # choice, not the format's.
    assert client_text([family(m)]) == "# HELP test_empty Nothing yet.\n# TYPE test_empty gauge\n"
