"""The built-in evaluator's in-memory time series store: the ``SeriesStore``.

Why it exists: the ``scrape`` source and the simulator keep the series the rules
read in memory, with no Prometheus. The store maps series to handles (refs),
routes samples to the family of their metric name (``family.py``: the columnar
ring buffer that makes a cycle over 80,000 series cheap), interns label values
once (``symbols.py``) and keeps the retention: a full pass trims every family and
drops series with no samples left at least every quarter of the retention.

A metric the readers ask for over a shorter window than the longest keeps only
that (``kept_by_name``, set by ``StoreSource.retain`` from each expression's
windows, ``support.retention_by_name``): the rules read six hours of fault
counters but five minutes of link throughput, and a fleet's largest families are
the ones read over the shortest windows. A read that reaches before what a family
kept raises ``HistoryNotKept`` (``family.py``) rather than answer from part of the
window: a query no one declared is *unknown*, never a guess.

Prometheus semantics kept here
------------------------------
* Samples for one series must arrive in time order: an older or equal timestamp is
  ignored (Prometheus rejects them as out of order or duplicate).
* A stale marker (``family.STALE_NAN_BITS``) is stored as a sample: an instant
  selector whose latest sample is one returns nothing, range selectors skip it.
* ``ingest_text`` is one scrape: the target's labels are attached (a scraped label
  of the same name is renamed ``exported_<name>``, ``honor_labels: false``), and a
  series that the target exposed in its previous scrape but not in this one gets a
  stale marker at this scrape's time. A failed scrape marks all of the target's
  series stale (``end_target``), as Prometheus does. ``ingest_samples`` is the
  same scrape for a caller that holds its rows as data, without the text.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from autoscaler.promql.family import Family
from autoscaler.promql.matchers import Matcher, MatchType
from autoscaler.promql.symbols import F64, I64, Symbols
from autoscaler.promql.textformat import (
    LineError,
    parse_series,
    parse_timestamp_ms,
    parse_value,
    split_series,
    split_value,
)
from autoscaler.types import Labels

_MIN = np.iinfo(np.int64).min
_MAX_PLANS = 256
"""Writes whose refs ``SeriesStore._groups`` remembers (a scrape writes a few
dozen arrays of refs, the same each time)."""
_Group = tuple[Family, "I64 | None", I64, "I64 | slice"]
"""A write's family, its positions in the refs (None: all), rows, and rows as
``Family.as_slice`` gives them."""
_FOREVER = 1 << 62
MAX_FUTURE_MS = 10 * 60_000
"""How far after its scrape time a scraped sample's own timestamp may lie."""


def seconds_to_ms(t: float) -> int:
    """A timestamp in seconds as integer milliseconds (nearest)."""
    return math.floor(t * 1000.0 + 0.5)


class ExpositionError(ValueError):
    """A scrape body that does not parse; the message names the line."""


@dataclass
class _Target:
    extra: dict[str, str]
    cache: dict[str, int] = field(default_factory=dict)
    """A series' text in a body -> its ref (``ingest_text``)."""
    samples: dict[tuple[str, tuple[tuple[str, str], ...]], int] = field(default_factory=dict)
    """A series' name and label pairs -> its ref (``ingest_samples``)."""
    previous: set[int] = field(default_factory=set)


class SeriesStore:
    """Series in memory for the retention the rules need; see the module docstring.

    Timestamps in the API are unix seconds (floats) and are kept as milliseconds.
    """

    def __init__(self, retention: float = 3600.0) -> None:
        self.retention = retention
        self.kept_by_name: dict[str, float] = {}
        """Seconds of history kept of a metric name, where the readers need less
        of it than ``retention`` (which the names not listed keep)."""
        self.lead = 0.0
        """Seconds by which samples may be stamped after the time their readers
        ask (the simulator's pipeline writes a scrape before the evaluation that
        reads the one before): every retention keeps that much more."""
        self.symbols = Symbols()
        self.families: dict[str, Family] = {}
        self._family_list: list[Family] = []
        self._ref_family: I64 = np.zeros(0, dtype=np.int64)
        self._ref_row: I64 = np.zeros(0, dtype=np.int64)
        self._nrefs = 0
        self._targets: dict[str, _Target] = {}
        self._max_t: int = _MIN
        self._last_full_trim: int = _MIN
        self.generation = 0
        """Changes when series are dropped or renumbered (callers' caches start
        over); a write changes ``writes`` and its families' ``version`` instead."""
        self.writes = 0
        """Counts the writes (for caches of what reads every family)."""
        self._plans: dict[tuple[int, int, int], tuple[I64, int, list[_Group]]] = {}
        """What ``_groups`` found for the refs of recent writes."""

    # -- series -----------------------------------------------------------------

    @property
    def retention_ms(self) -> int:
        """The retention and the lead in milliseconds (``math.inf`` keeps
        everything)."""
        return _ms(self.retention + self.lead)

    def kept_ms(self, name: str) -> int:
        """What the family ``name`` keeps, in milliseconds: its own retention
        where it has a shorter one, and the lead."""
        kept = min(self.kept_by_name.get(name, self.retention), self.retention)
        return _ms(kept + self.lead)

    @property
    def series_count(self) -> int:
        return sum(f.n for f in self._family_list)

    @property
    def sample_count(self) -> int:
        return sum(int(f.count[: f.n].sum()) for f in self._family_list)

    def footprint(self) -> dict[str, int]:
        """What the samples cost: ``samples`` stored, ``series``, ``slots`` (the
        value places of the rows in use: 4 bytes each in a family whose values are
        all exactly float32, else 8), ``bytes`` of those and of the timelines rows
        are on (an int64 time per slot, shared by the rows scraped together), and
        ``allocated`` bytes of the value and time arrays with their spare room
        (never written rows cost no memory until used). ``bytes / samples`` is
        the figure Prometheus quotes as about 1.3 for its compressed chunks."""
        fams = self._family_list
        slots = sum(f.n * f.cap for f in fams)
        return {
            "samples": self.sample_count,
            "series": self.series_count,
            "slots": slots,
            "bytes": sum(f.n * f.cap * f.vals.itemsize + f.lines.in_use() for f in fams),
            "allocated": sum(int(f.vals.nbytes + f.lines.times.nbytes) for f in fams),
        }

    @property
    def newest(self) -> float | None:
        """The newest sample's time in seconds, or None if nothing was stored."""
        return None if self._max_t == _MIN else self._max_t / 1000.0

    def ref(self, labels: Mapping[str, str]) -> int:
        """A handle for one series, for fast ``append`` calls.

        ``labels`` must include a non-empty ``__name__``; labels with empty values
        are dropped, as Prometheus does. A handle stays valid until the series has
        no samples left in the retention and is dropped (``append`` then raises
        KeyError and a new handle must be taken).
        """
        return self._ref_of(_canonical(labels))

    def refs(self, label_sets: Iterable[Mapping[str, str]]) -> I64:
        return np.fromiter((self.ref(ls) for ls in label_sets), dtype=np.int64)

    def _ref_of(self, labels: Labels) -> int:
        name = labels_name(labels)
        fam = self.families.get(name)
        if fam is None:
            fam = Family(name, self.symbols.intern(name), self.symbols)
            fam.position = len(self._family_list)
            self.families[name] = fam
            self._family_list.append(fam)
        known = fam.index.get(labels)
        if known is not None:
            return known
        ref = self._nrefs
        if ref == len(self._ref_family):
            size = max(1024, 2 * ref)
            self._ref_family = np.resize(self._ref_family, size)
            self._ref_row = np.resize(self._ref_row, size)
        row = fam.add_row(labels, ref)
        self._ref_family[ref] = fam.position
        self._ref_row[ref] = row
        self._nrefs += 1
        return ref

    # -- writing ----------------------------------------------------------------

    def add(self, labels: Mapping[str, str], t: float, v: float) -> bool:
        """Appends one sample; False if the series already has one at or after t."""
        t_ms = seconds_to_ms(t)
        self._maintain(t_ms)
        return self._store(np.array([self.ref(labels)]), t_ms, np.array([v])) == 1

    def add_stale(self, labels: Mapping[str, str], t: float) -> bool:
        """Appends a stale marker: the series ends at t (Prometheus staleness)."""
        t_ms = seconds_to_ms(t)
        self._maintain(t_ms)
        return self._store(np.array([self.ref(labels)]), t_ms, None) == 1

    def append(self, refs: npt.ArrayLike, t: float, values: npt.ArrayLike) -> int:
        """Appends one sample per ref at time t (vectorised); returns how many were
        stored. Duplicate refs keep their first value."""
        v = np.asarray(values, dtype=np.float64)
        return self.append_ms(np.asarray(refs, dtype=np.int64), seconds_to_ms(t), v)

    def append_stale(self, refs: npt.ArrayLike, t: float) -> int:
        """Appends stale markers for the refs at time t."""
        return self.append_ms(np.asarray(refs, dtype=np.int64), seconds_to_ms(t), None)

    def append_ms(self, refs: I64, t: int, values: F64 | None) -> int:
        """``append`` with the time in integer milliseconds; values None appends
        stale markers."""
        self._maintain(t)
        return self._store(refs, t, values)

    def _maintain(self, t: int) -> None:
        """Every quarter of the retention, trims every family and drops the series
        left with no samples. Runs before refs are resolved, never in between."""
        if self._last_full_trim == _MIN:
            self._last_full_trim = t
        elif t - self._last_full_trim >= self.retention_ms // 4:
            newest = max(t, self._max_t)
            self._drop_before_ms(max(newest - self.retention_ms, _MIN + 1), newest)
            self._last_full_trim = t

    def _cutoff(self, fam: Family, newest: int) -> int:
        """What ``fam`` keeps when the newest sample is at ``newest``: samples
        before the returned time may go. A family that keeps less than the
        retention refuses reads before what it kept (``Family.short``)."""
        kept = self.kept_ms(fam.name)
        fam.short = kept < self.retention_ms
        return max(newest - kept, _MIN + 1)

    def _store(self, refs: I64, t: int, values: F64 | None) -> int:
        if refs.size == 0:
            return 0
        if values is not None and values.shape != refs.shape:
            raise ValueError(f"{refs.size} refs but {values.size} values")
        groups = self._groups(refs)
        if t > self._max_t:
            self._max_t = t
        stored = 0
        for fam, part, r, at in groups:
            vals = values if values is None or part is None else values[part]
            stored += fam.append(r, t, vals, self._cutoff(fam, self._max_t), at)
        self.writes += 1
        return stored

    def _groups(self, refs: I64) -> list[_Group]:
        """The families ``refs`` write, each with its positions in ``refs`` (None:
        all of them), its distinct rows, and those rows as ``as_slice`` gives
        them. A scrape writes the same refs every time: what was found for them is
        kept until the series are renumbered (``generation``)."""
        key = (refs.size, int(refs[0]), int(refs[-1]))
        kept = self._plans.get(key)
        if kept is not None and kept[1] == self.generation and np.array_equal(kept[0], refs):
            return kept[2]
        if refs.min() < 0 or refs.max() >= self._nrefs:
            raise KeyError("unknown series ref")
        fam_ids = self._ref_family[refs]
        if fam_ids.min() < 0:
            raise KeyError(
                "series ref was dropped after its samples left the retention: take a new one"
            )
        rows = self._ref_row[refs]
        f0 = int(fam_ids[0])
        parts: list[tuple[int, I64 | None]]
        if (fam_ids == f0).all():
            parts = [(f0, None)]
        else:
            order = np.argsort(fam_ids, kind="stable")
            bounds = np.flatnonzero(np.diff(fam_ids[order])) + 1
            parts = [(int(fam_ids[part[0]]), part) for part in np.split(order, bounds)]
        groups: list[_Group] = []
        for fid, part in parts:
            fam = self._family_list[fid]
            r = rows if part is None else rows[part]
            # Evenly spaced increasing rows (a scrape of every row, or of every
            # k-th) are distinct already; others are checked: duplicates keep
            # their first value.
            at = fam.as_slice(r)
            if not isinstance(at, slice):
                seen = np.zeros(fam.n, dtype=np.bool_)
                seen[r] = True
                if int(seen.sum()) != r.size:
                    _, first = np.unique(r, return_index=True)
                    first.sort()
                    part = first if part is None else part[first]
                    r = at = r[first]
            groups.append((fam, part, r, at))
        if len(self._plans) >= _MAX_PLANS:
            self._plans.clear()
        self._plans[key] = (refs.copy(), self.generation, groups)
        return groups

    def drop_before(self, t: float) -> None:
        """Forgets samples older than t, and the series left with none."""
        self._drop_before_ms(seconds_to_ms(t))

    def _drop_before_ms(self, cutoff: int, newest: int | None = None) -> None:
        """Forgets samples before ``cutoff``; with ``newest`` (the retention's
        pass), also those each family's own retention no longer keeps."""
        dropped = False
        for fam in self._family_list:
            fam.trim(cutoff if newest is None else max(cutoff, self._cutoff(fam, newest)))
            removed, kept = fam.drop_empty_rows(cutoff)
            if removed.size:
                dropped = True
                self._ref_family[removed] = -1
                self._ref_row[removed] = -1
                self._ref_row[kept] = np.arange(kept.size)
        if dropped:
            empty = [f for f in self._family_list if f.n == 0]
            if empty:
                self._renumber(empty)
            for target in self._targets.values():
                target.cache.clear()
                target.samples.clear()
                target.previous = {r for r in target.previous if int(self._ref_family[r]) >= 0}
        self.generation += 1

    def _renumber(self, empty: list[Family]) -> None:
        for fam in empty:
            del self.families[fam.name]
        self._family_list = [f for f in self._family_list if f.n > 0]
        for i, fam in enumerate(self._family_list):
            fam.position = i
            self._ref_family[fam.refs[: fam.n]] = i

    # -- scrapes ----------------------------------------------------------------

    def _scrape_state(
        self, extra_labels: Mapping[str, str] | None, target: str | None
    ) -> tuple[dict[str, str], _Target | None]:
        """A scrape's target labels (empty values dropped) and its target's state
        (None without a target): new when the target's labels changed, keeping
        the series it exposed last, which are marked stale if not seen again."""
        extra = {k: v for k, v in (extra_labels or {}).items() if v != ""}
        if target is None:
            return extra, None
        state = self._targets.get(target)
        if state is None or state.extra != extra:
            previous = state.previous if state is not None else set()
            state = _Target(extra, previous=previous)
            self._targets[target] = state
        return extra, state

    def ingest_text(
        self,
        exposition: str,
        t: float,
        extra_labels: Mapping[str, str] | None = None,
        target: str | None = None,
    ) -> int:
        """Stores one scrape in the Prometheus text format, taken at time t.

        ``extra_labels`` are the target's labels (``node``, ``instance``...).
        With a ``target`` key, series the target exposed in its previous scrape
        and not in this one get a stale marker at t. Samples with their own
        timestamp keep it and are not tracked for staleness (as in Prometheus).
        A body that does not parse stores nothing, marks the target's series stale
        (Prometheus treats it as a failed scrape) and raises ExpositionError.
        A scrape (``target`` given) whose sample carries a timestamp more than
        MAX_FUTURE_MS after t fails the same way.
        Returns the number of samples stored.
        """
        t_ms = seconds_to_ms(t)
        self._maintain(t_ms)
        extra, state = self._scrape_state(extra_labels, target)
        cache = state.cache if state is not None else {}
        current: dict[int, float] = {}
        timed: list[tuple[int, int, float]] = []
        try:
            for lineno, raw in enumerate(exposition.splitlines(), start=1):
                line = raw.strip()
                if not line or line[0] == "#":
                    continue
                try:
                    series, rest = split_series(line)
                    value_text, ts_text = split_value(rest)
                    ref = cache.get(series)
                    if ref is None:
                        name, pairs = parse_series(series)
                        ref = self._ref_of(_target_labels(name, pairs, extra))
                        cache[series] = ref
                    value = parse_value(value_text)
                    if ts_text is None:
                        current.setdefault(ref, value)
                    else:
                        ts = parse_timestamp_ms(ts_text)
                        if target is not None and ts > t_ms + MAX_FUTURE_MS:
                            # One target's clock (or a hostile body) must not move
                            # the store's newest time: the trim that follows would
                            # drop every other target's history.
                            raise LineError(
                                f"the sample's timestamp {ts} ms is more than "
                                f"{MAX_FUTURE_MS // 60_000}m after the scrape time"
                            )
                        timed.append((ref, ts, value))
                except LineError as e:
                    raise ExpositionError(f"line {lineno}: {e}") from None
        except ExpositionError:
            if target is not None:
                self.end_target(target, t)
            raise
        return self._scraped(state, current, timed, t_ms)

    def ingest_samples(
        self,
        samples: Iterable[tuple[str, Sequence[tuple[str, str]], float]],
        t: float,
        extra_labels: Mapping[str, str] | None = None,
        target: str | None = None,
    ) -> int:
        """``ingest_text`` of samples already parsed: ``(name, label pairs, value)``
        in the order a body would list them, with the same labels, values,
        duplicates (the first counts) and stale markers, without writing and
        parsing the text. For a caller that holds its rows as data (the cluster
        state, the rhythm learner's figures): 3,000 rows a cycle cost more to
        render and parse than the rules that read them. A value that is not a
        float64 (an integer past its range) fails the scrape as ``ingest_text``
        does, naming the series."""
        t_ms = seconds_to_ms(t)
        self._maintain(t_ms)
        extra, state = self._scrape_state(extra_labels, target)
        cache = state.samples if state is not None else {}
        current: dict[int, float] = {}
        for name, pairs, value in samples:
            key = (name, tuple(pairs))
            ref = cache.get(key)
            if ref is None:
                ref = self._ref_of(_target_labels(name, list(pairs), extra))
                cache[key] = ref
            try:
                v = float(value)
            except OverflowError:
                if target is not None:
                    self.end_target(target, t)
                raise ExpositionError(
                    f"{name}{dict(pairs)}: sample value {value} is out of the float64 range"
                ) from None
            # The text format spells every NaN "NaN", which parses as the one
            # quiet NaN: a payload (a stale marker's) does not survive a scrape.
            current.setdefault(ref, v if v == v else math.nan)
        return self._scraped(state, current, [], t_ms)

    def _scraped(
        self,
        state: _Target | None,
        current: dict[int, float],
        timed: list[tuple[int, int, float]],
        t_ms: int,
    ) -> int:
        """Stores one parsed scrape at ``t_ms`` and marks stale the target's series
        that it no longer has."""
        refs = np.fromiter(current.keys(), dtype=np.int64, count=len(current))
        vals = np.fromiter(current.values(), dtype=np.float64, count=len(current))
        stored = self._store(refs, t_ms, vals)
        for ref, ts, value in timed:
            stored += self._store(np.array([ref]), ts, np.array([value]))
        if state is not None:
            gone = state.previous.difference(current)
            live = [r for r in gone if int(self._ref_family[r]) >= 0]
            if live:
                self._store(np.array(sorted(live), dtype=np.int64), t_ms, None)
            state.previous = set(current)
        return stored

    def end_target(self, target: str, t: float) -> None:
        """The target's scrape failed or it went away: all its series end at t."""
        state = self._targets.get(target)
        if state is None:
            return
        live = [r for r in state.previous if int(self._ref_family[r]) >= 0]
        if live:
            self.append_ms(np.array(sorted(live), dtype=np.int64), seconds_to_ms(t), None)
        state.previous = set()

    # -- reading ----------------------------------------------------------------

    def select(self, matchers: Sequence[Matcher]) -> list[tuple[Family, I64]]:
        """The families and rows whose labels satisfy every matcher."""
        name_matchers = [m for m in matchers if m.name == "__name__"]
        others = [m for m in matchers if m.name != "__name__"]
        exact = next((m for m in name_matchers if m.type is MatchType.EQ), None)
        if exact is not None:
            fam = self.families.get(exact.value)
            candidates = [fam] if fam is not None else []
        else:
            candidates = list(self._family_list)
        out: list[tuple[Family, I64]] = []
        for fam in candidates:
            if fam.n == 0 or not all(m.matches(fam.name) for m in name_matchers):
                continue
            rows = fam.select(others)
            if rows.size:
                out.append((fam, rows))
        return out


def _ms(seconds: float) -> int:
    """A retention in milliseconds, ``math.inf`` (and past) as keeping everything."""
    if math.isinf(seconds):
        return _FOREVER
    return min(seconds_to_ms(seconds), _FOREVER)


def labels_name(labels: Labels) -> str:
    for k, v in labels:
        if k == "__name__":
            return v
    raise ValueError("a series needs a __name__ label")


def _canonical(labels: Mapping[str, str]) -> Labels:
    out = tuple(sorted((k, v) for k, v in labels.items() if v != ""))
    if not any(k == "__name__" for k, _ in out):
        raise ValueError(f"a series needs a non-empty __name__ label: {dict(labels)}")
    return out


def _target_labels(name: str, pairs: list[tuple[str, str]], extra: Mapping[str, str]) -> Labels:
    merged: dict[str, str] = {}
    for k, v in pairs:
        if k in extra or k == "__name__":
            exported = "exported_" + k
            while exported in extra or exported in merged:
                exported = "exported_" + exported
            merged[exported] = v
        else:
            merged[k] = v
    merged.update(extra)
    merged["__name__"] = name
    return tuple(sorted((k, v) for k, v in merged.items() if v != ""))
