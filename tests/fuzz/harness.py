"""The property every fuzz target checks, and the bounds it runs under.

Every reader of outside input must answer any input with a valid result or with its
own clear error (the error type the reader documents, with a message), within a
time and memory bound; anything else escaping is a bug, and so is running over the
bound. ``check`` is that property, once, for one generated case:

* **Time**: CPU seconds through ``ITIMER_PROF`` (``SIGPROF``), so that the bound
  interrupts a hang inside pure Python and leaves ``SIGALRM`` to pytest-timeout; CPU
  time rather than wall time because two cores are shared by everything on the
  machine, and a reader that is merely waiting for its turn is not slow. Wall time
  is checked afterwards against a looser bound, for a reader that sleeps or waits.
  ``Overrun`` is a ``BaseException`` so that a reader's own ``except Exception``
  cannot swallow it and report the overrun as a problem with the input.
* **Memory**: the address-space limit (``RLIMIT_AS``) is lowered to what the
  process has mapped now plus the bound, for the duration of the call, and restored
  after; an allocation past it is a ``MemoryError`` here instead of a machine
  brought down by an alias bomb. A soft limit can be raised again up to the hard
  limit, so restoring needs no privilege.

``COUNTS`` records how many cases each target ran; the conftest prints it at the end
of the session (the figures the issue's closing note asks for).

The budgets (cases per target) scale with the hypothesis profile: ``ci`` for
``make test`` (fixed and derandomized, so a failure reproduces), ``long`` for
``make fuzz``; ``ACCEL_FUZZ_PROFILE`` picks one.
"""

from __future__ import annotations

import dataclasses
import math
import os
import resource
import signal
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any, TypeVar

from hypothesis import HealthCheck, Phase, settings

T = TypeVar("T")

PROFILE = os.environ.get("ACCEL_FUZZ_PROFILE", "ci")
# Cases per target are budget × SCALE; `make fuzz` runs the long profile.
SCALE = int(os.environ.get("ACCEL_FUZZ_SCALE", "10" if PROFILE == "long" else "1"))
# The bounds per case: the acceptance allows 10 s and 1 GiB for a whole
# command; one reader call on a fuzz case gets half the time.
SECONDS = float(os.environ.get("ACCEL_FUZZ_SECONDS", "5"))
WALL_SECONDS = 4 * SECONDS
MEMORY_MIB = int(os.environ.get("ACCEL_FUZZ_MIB", "1024"))
# The pytest-timeout of one fuzz test (a whole hypothesis run of one target).
TEST_TIMEOUT = 150 * SCALE

COUNTS: Counter[str] = Counter()

# Shrinking a failure to its smallest form can take minutes; `make test` reports the
# failing case as found (with its reproduce blob), `make fuzz` and
# ACCEL_FUZZ_SHRINK=1 shrink it.
_NO_SHRINK = tuple(p for p in Phase if p is not Phase.shrink)
_CI_PHASES = tuple(Phase) if os.environ.get("ACCEL_FUZZ_SHRINK") == "1" else _NO_SHRINK

settings.register_profile(
    "ci",
    derandomize=True,
    phases=_CI_PHASES,
    database=None,
    deadline=None,  # the bounds above interrupt; a deadline only measures afterwards
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "long",
    derandomize=False,
    database=None,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile(PROFILE)


def budget(cases: int) -> settings:
    """The settings of one target: ``cases`` examples in ``ci``, SCALE times that in
    ``long``."""
    return settings(max_examples=cases * SCALE)


class Overrun(BaseException):
    """A case ran past the time bound."""


class Escaped(AssertionError):
    """An exception other than the reader's own error came out of it."""


# Set when the bound fired during the current case: a reader that catches
# BaseException (the rule watcher does, for a native parser's panic) swallows the
# Overrun, and the case must fail all the same.
_fired: list[bool] = [False]


def _on_overrun(signum: int, frame: FrameType | None) -> None:
    _fired[0] = True
    raise Overrun(f"over {SECONDS:g} s of CPU time")


def _mapped_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[0]) * resource.getpagesize()


@contextmanager
def bounded(target: str) -> Iterator[None]:
    """Runs the body within SECONDS of CPU time and MEMORY_MIB more address space."""
    old_handler = signal.signal(signal.SIGPROF, _on_overrun)
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = _mapped_bytes() + MEMORY_MIB * 1024 * 1024
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    _fired[0] = False
    signal.setitimer(signal.ITIMER_PROF, SECONDS)
    start = time.monotonic()
    try:
        yield
    except MemoryError as e:
        raise AssertionError(f"{target}: over {MEMORY_MIB} MiB of memory") from e
    except Overrun as e:
        raise AssertionError(f"{target}: {e}") from e
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
        signal.signal(signal.SIGPROF, old_handler)
    if _fired[0]:
        raise AssertionError(f"{target}: over {SECONDS:g} s of CPU time (the reader caught it)")
    wall = time.monotonic() - start
    if wall > WALL_SECONDS:
        raise AssertionError(f"{target}: took {wall:.1f} s of wall time (bound {WALL_SECONDS:g} s)")


def nonfinite(value: Any, allow: Collection[str] = (), at: str = "") -> list[str]:
    """Where a valid result holds NaN or an infinity (a ``1e400s`` read as forever):
    the paths of such floats in nested dataclasses, lists and dicts. ``allow`` names
    fields where infinity is documented (a sim ``hang`` of forever)."""
    out: list[str] = []
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            if f.name not in allow:
                out += nonfinite(getattr(value, f.name), allow, f"{at}.{f.name}")
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            out += nonfinite(item, allow, f"{at}[{i}]")
    elif isinstance(value, dict):
        for k, item in value.items():
            out += nonfinite(item, allow, f"{at}[{k!r}]")
    elif isinstance(value, float) and not math.isfinite(value):
        out.append(f"{at or 'the value'} = {value}")
    return out


def check(
    target: str,
    call: Callable[[], T],
    errors: tuple[type[BaseException], ...],
    *,
    names: str | None = None,
) -> T | BaseException:
    """The property for one case: ``call()`` returns, or raises one of ``errors``
    with a message (naming ``names``, the file, when given), within the bounds.
    Returns the result or the error; any other exception fails the case."""
    COUNTS[target] += 1
    with bounded(target):
        try:
            return call()
        except errors as e:
            message = str(e)
            assert message.strip(), f"{target}: {type(e).__name__} with an empty message"
            if names is not None:
                assert names in message, f"{target}: the error does not name {names}: {message}"
            return e
        except (Overrun, MemoryError):
            raise
        except Exception as e:
            raise Escaped(f"{target}: {type(e).__name__} escaped: {e}"[:2000]) from e


__all__ = [
    "COUNTS",
    "MEMORY_MIB",
    "PROFILE",
    "SCALE",
    "SECONDS",
    "TEST_TIMEOUT",
    "Escaped",
    "Overrun",
    "bounded",
    "budget",
    "check",
    "nonfinite",
]
