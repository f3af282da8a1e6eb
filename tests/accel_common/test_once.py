"""``accel_common.logs.Once``: the one "log this problem once" bookkeeping, held by
each owner that reports problems a cluster repeats every cycle. Its keys are kept
up to a bound, then forgotten all at once; the three owners (unreadable pod
annotations in ``clusterstate``, unreadable remediation entries in
``actions/ops/ownership``, forbidden DRA lists in ``kube/dra``) each log a
repeated problem once, and again when it changes."""

from __future__ import annotations

import logging
import threading

import pytest

from accel_common.logs import Once
from autoscaler.actions.ops import ownership
from tests.support.kubeobjs import node


def test_a_key_is_first_once_and_again_only_after_it_changes() -> None:
    once = Once()
    assert once.first(("ml", "p1", "timeout", "abc"))
    assert not once.first(("ml", "p1", "timeout", "abc"))
    assert once.first(("ml", "p1", "timeout", "def"))  # the value changed
    assert len(once) == 2
    once.clear()
    assert once.first(("ml", "p1", "timeout", "abc"))


def test_past_its_bound_it_forgets_everything_rather_than_grow() -> None:
    once = Once(limit=3)
    assert [once.first(k) for k in "abc"] == [True, True, True]
    assert len(once) == 3
    assert once.first("d")  # the fourth key: all forgotten, then d remembered
    assert len(once) == 1
    assert once.first("a")  # forgotten: said again
    assert not once.first("d")


def test_a_bound_below_one_is_refused_with_what_to_write() -> None:
    with pytest.raises(ValueError, match="limit must be at least 1, got 0"):
        Once(limit=0)


def test_threads_meeting_one_key_log_it_once() -> None:
    once = Once()
    firsts: list[bool] = []
    start = threading.Barrier(8)

    def meet() -> None:
        start.wait()
        firsts.extend(once.first(("node", i % 4)) for i in range(1000))

    threads = [threading.Thread(target=meet) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert firsts.count(True) == 4 and len(firsts) == 8000


def test_an_unreadable_remediation_entry_is_logged_once_per_node_and_problem(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ownership, "_REPORTED", Once())
    bad = node("n1")
    bad["metadata"]["annotations"] = {ownership.ANNOTATION: "{not json"}
    other = node("n2")
    other["metadata"]["annotations"] = {ownership.ANNOTATION: "{not json"}
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            assert ownership.entries(bad) == {}
            assert ownership.entries(other) == {}
    said = [r.getMessage() for r in caplog.records if "treated as unknown" in r.getMessage()]
    assert len(said) == 2, said
    assert "n1" in said[0] and "n2" in said[1]
