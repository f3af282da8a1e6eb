"""``accel_common/ownmetrics.py``: catalogue entries that break the conventions are
refused when declared, with the entry and the fix in the message; the collector
renders one snapshot per scrape, families in catalogue order, empty ones left
out, and refuses a metric its catalogue does not hold."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from accel_common.ownmetrics import (
    CatalogueError,
    Families,
    Metric,
    SnapshotCollector,
    check_catalogue,
    family,
    registry_of,
    render,
    render_snapshot,
)

UP = Metric("test_up", "gauge", "Whether it is up.")
EVENTS = Metric("test_events_total", "counter", "Events by kind.", ("kind",))


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        (("test_events", "counter", "Events.", ()), "a counter's name ends in _total"),
        (("test-up", "gauge", "Up.", ()), "the name must match"),
        (("test_up", "gauge", " ", ()), "HELP is empty"),
        (("test_up", "gauge", "Up.", ("bad-label",)), "label 'bad-label' must match"),
        (("test_up", "gauge", "Up.", ("__name__",)), "without a leading __"),
        (("test_up", "gauge", "Up.", ("a", "a")), "name one label twice"),
        (("test_up_created", "gauge", "Up.", ()), "may not end in _created"),
        (("test_up", "histogram", "Up.", ()), "is not counter or gauge"),
    ],
)
def test_a_bad_entry_is_refused_with_what_to_write(
    entry: tuple[str, str, str, tuple[str, ...]], message: str
) -> None:
    name, type_, help_, labels = entry
    with pytest.raises(CatalogueError, match=f"metric '{name}': .*{message}"):
        Metric(name, type_, help_, labels)  # type: ignore[arg-type]


def test_a_name_declared_twice_is_refused() -> None:
    with pytest.raises(CatalogueError, match="'test_up' is declared twice"):
        check_catalogue((UP, EVENTS, Metric("test_up", "gauge", "Again.")))


def test_label_values_must_match_the_labels() -> None:
    with pytest.raises(CatalogueError, match=r"1 label values \['a'\] for 0 labels"):
        family(UP, [(("a",), 1.0)])


def test_one_read_per_scrape_catalogue_order_and_empty_families_left_out() -> None:
    reads: list[int] = []

    def read() -> int:
        reads.append(1)
        return len(reads)

    def samples(n: int) -> Families:
        # Given out of catalogue order; UP only on odd scrapes.
        return [(EVENTS, [(("x",), float(n))]), (UP, [((), 1.0)] if n % 2 else [])]

    registry = registry_of(SnapshotCollector([UP, EVENTS], read, samples))
    assert reads == []  # registering describes from the catalogue alone
    first = render(registry).decode()
    assert first.index("test_up") < first.index("test_events_total")
    second = render(registry).decode()
    assert "test_up" not in second
    assert 'test_events_total{kind="x"} 2.0' in second
    assert len(reads) == 2


def test_a_metric_outside_the_catalogue_is_refused() -> None:
    stray = Metric("test_stray", "gauge", "Not declared.")
    with pytest.raises(CatalogueError, match="'test_stray' is not in this collector's catalogue"):
        render_snapshot([UP], None, lambda _: [(stray, [((), 1.0)])])


def test_a_same_named_but_different_entry_is_refused() -> None:
    other = Metric("test_up", "gauge", "Another HELP.")
    with pytest.raises(CatalogueError, match="not in this collector's catalogue"):
        render_snapshot([UP], None, lambda _: [(other, [((), 1.0)])])


def test_the_text_reads_back_as_declared() -> None:
    text = render_snapshot(
        [UP, EVENTS], None, lambda _: [(UP, [((), 0.0)]), (EVENTS, [(("a\nb",), 3)])]
    )
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    assert fams["test_up"].type == "gauge" and fams["test_up"].documentation == UP.help
    assert fams["test_events"].type == "counter"
    assert [(s.labels, s.value) for s in fams["test_events"].samples] == [({"kind": "a\nb"}, 3.0)]
