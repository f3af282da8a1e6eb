"""Hot reload of rule files: pick up edits without restarting the controller, and
never trade working rules for broken ones.

A controller that restarts to read new rules loses its pending timers and, if the
new file is bad, comes back with no rules at all. So the watcher re-stats the
files (``check``, every second and every cycle in the controller) or reloads them
on SIGHUP (``reload``), and a new rule set takes effect only when it loads
cleanly; otherwise the last good one stays in force, every problem is logged, and
``reload_success`` turns False (exported as a metric, as Prometheus does with
``prometheus_config_last_reload_successful``). Only the very first load may fail
loudly: with no good rules to fall back on, the controller refuses to start.

A rule file is input, and input can be hostile: nested thousands deep, an alias
bomb, a number with thousands of digits. The readers below bound all of that, but
a reload must survive what they miss too, so *any* exception while loading
(``RecursionError``, ``MemoryError``, whatever a parser library raises) is a
failed reload like a ``RuleSetError``: ``reload_success`` False, one log line,
the last good rules kept, and the next change of the files tried again.

Loading reads and parses files, which can take a while; the controller must go on
answering ``/healthz`` and the webhook meanwhile. So the work is split: ``attempt``
reads and loads (no shared state touched, safe in a worker thread), ``apply``
makes the result current (on the event loop). ``refresh`` runs the pair with the
load in a worker thread, one at a time: a request that arrives while a load runs
is queued behind it, never run beside it. ``check`` and ``reload`` run the pair
synchronously, for callers without an event loop.

Stat, not inotify: it works the same for a ConfigMap mounted into a pod (whose
files change by an atomic symlink swap that inotify watchers often miss), and
costs a few system calls per look.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from autoscaler.ruleset.errors import Problem, RuleSetError, whole_file
from autoscaler.ruleset.loader import load_ruleset, rule_files
from autoscaler.ruleset.model import RuleSet

log = logging.getLogger("accel_autoscaler.rules")

# What the watcher compares between checks: each rule file with its identity, size
# and modification time, plus the paths that were missing (so that a file
# appearing is a change too).
Fingerprint = tuple[tuple[str, int, int, int, int], ...]


def fingerprint(paths: Sequence[str | Path]) -> Fingerprint:
    """The files' identities now. Never raises: a directory that cannot be listed
    is an entry of its own (the load then says why)."""
    try:
        files, problems = rule_files(paths)
    except (OSError, ValueError) as e:  # a name too long, a NUL byte
        why = e.strerror if isinstance(e, OSError) else str(e)
        return tuple(sorted((f"{p}: {why}", -1, -1, -1, -1) for p in map(str, paths)))
    entries: list[tuple[str, int, int, int, int]] = []
    for f in files:
        try:
            st = os.stat(f)
        except OSError:
            entries.append((f, -1, -1, -1, -1))
            continue
        entries.append((f, st.st_ino, st.st_dev, st.st_size, st.st_mtime_ns))
    entries.extend((p.position.file, -1, -1, -1, -1) for p in problems)
    return tuple(sorted(entries))


def unexpected_problem(paths: Sequence[str | Path], e: BaseException) -> Problem:
    """A load that raised something other than ``RuleSetError``, as a problem: the
    readers' limits should have caught the file, so say what broke and what to do."""
    where = str(paths[0]) if len(paths) == 1 else ", ".join(map(str, paths))
    detail = str(e) or "no detail"
    if isinstance(e, RecursionError):
        why = "it is nested too deeply to read (RecursionError)"
    elif isinstance(e, MemoryError):
        why = "reading it ran out of memory (MemoryError)"
    else:
        why = f"reading it failed: {type(e).__name__}: {detail}"
    return Problem(
        whole_file(where), f"the rules cannot be loaded: {why}; simplify the file and save it again"
    )


@dataclass(frozen=True)
class Attempt:
    """One look at the rule files: why it was made, what the files were, and the
    rule set they gave or the problems that stopped them."""

    why: str
    fingerprint: Fingerprint
    ruleset: RuleSet | None
    problems: tuple[Problem, ...] = ()
    # Set when the load raised something other than RuleSetError.
    unexpected: bool = False


class RuleWatcher:
    """The rule set in force, reloaded when its files change.

    ``current`` is the last rule set that loaded cleanly; ``reload_success`` says
    whether the latest attempt did; ``last_problems`` lists what was wrong with it
    (empty after a success); ``loaded_at`` is when ``current`` took effect and
    ``checked_at`` when the files were last looked at, by ``clock``.
    """

    def __init__(
        self,
        paths: Sequence[str | Path],
        source: str = "prometheus",
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.paths = tuple(paths)
        self.source = source
        self.clock = clock
        self._fingerprint = fingerprint(self.paths)
        # Raises RuleSetError: with no good rules to keep, there is nothing to run.
        try:
            self.current: RuleSet = load_ruleset(self.paths, source=source)
        except (RuleSetError, KeyboardInterrupt, SystemExit):
            raise
        except BaseException as e:  # what the readers' limits missed: a clean refusal too
            raise RuleSetError([unexpected_problem(self.paths, e)]) from e
        self.reload_success = True
        self.last_problems: list[Problem] = []
        self.loaded_at = self.checked_at = clock()
        # The load running in a worker thread, if one is, and what was asked for
        # while it ran (None: nothing; False: a check; True: a forced reload).
        self._running: asyncio.Task[bool] | None = None
        self._queued: bool | None = None
        log.info("loaded %d rules from %s", len(self.current.rules), ", ".join(self.current.files))

    @property
    def busy(self) -> bool:
        """Whether a load is running in a worker thread now."""
        return self._running is not None and not self._running.done()

    def attempt(self, force: bool) -> Attempt | None:
        """Looks at the files and, if they changed since the last look (or
        ``force``), loads them. None when there was nothing to load. Never raises
        and touches no state, so it may run in a worker thread; ``apply`` makes
        the result count."""
        now = fingerprint(self.paths)
        if not force and now == self._fingerprint:
            return None
        why = "reload requested" if force else "rule files changed"
        try:
            return Attempt(why, now, load_ruleset(self.paths, source=self.source))
        except RuleSetError as e:
            return Attempt(why, now, None, tuple(e.problems))
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as e:  # a native parser's panic is a BaseException
            log.debug("the rules could not be loaded", exc_info=True)
            return Attempt(why, now, None, (unexpected_problem(self.paths, e),), unexpected=True)

    def apply(self, attempt: Attempt | None) -> bool:
        """Makes an attempt's outcome current; True when a new rule set took
        effect. The files it saw are remembered either way, so a bad file is not
        loaded again until it changes (or a reload is forced)."""
        self.checked_at = self.clock()
        if attempt is None:
            return False
        self._fingerprint = attempt.fingerprint
        if attempt.ruleset is None:
            self.reload_success = False
            self.last_problems = list(attempt.problems)
            if attempt.unexpected:
                log.error(
                    "%s, but %s; keeping the %d rules in force",
                    attempt.why,
                    "; ".join(str(p) for p in attempt.problems),
                    len(self.current.rules),
                )
                return False
            log.error(
                "%s, but the new rules have %d problem(s); keeping the %d rules in force",
                attempt.why,
                len(attempt.problems),
                len(self.current.rules),
            )
            for problem in attempt.problems:
                log.error("%s", problem)
            return False
        self.reload_success = True
        self.last_problems = []
        if attempt.ruleset == self.current:
            log.info("%s; the rules are unchanged", attempt.why)
            return False
        self.current = attempt.ruleset
        self.loaded_at = self.clock()
        log.info("%s; %d rules now in force", attempt.why, len(attempt.ruleset.rules))
        return True

    def check(self) -> bool:
        """Reloads if a rule file changed (content, size, a file added or removed)
        since the last look. True when a new rule set took effect."""
        return self.apply(self.attempt(force=False))

    def reload(self) -> bool:
        """Reloads whether or not anything changed (SIGHUP). True when a new rule set
        took effect; a bad one keeps the current rules (see ``reload_success``)."""
        return self.apply(self.attempt(force=True))

    async def refresh(self, *, force: bool = False) -> bool:
        """``check`` (or, with ``force``, ``reload``) with the load in a worker
        thread, so the event loop keeps serving while a file is read. Never two
        loads at once: while one runs, the request is queued behind it and this
        waits for both (a caller that must not wait looks at ``busy`` first).
        True when a new rule set took effect."""
        if self.busy:
            self._queued = bool(self._queued) or force
        else:
            self._queued = None
            self._running = asyncio.create_task(self._refresh(force))
        assert self._running is not None
        # Shielded: a caller cancelled while a load runs (shutdown) leaves the
        # task to finish, so that ``busy`` stays true until the thread is done.
        return await asyncio.shield(self._running)

    async def _refresh(self, force: bool) -> bool:
        changed = False
        while True:
            attempt = await asyncio.to_thread(self.attempt, force)
            changed = self.apply(attempt) or changed
            if self._queued is None:
                return changed
            force, self._queued = self._queued, None


__all__ = ["Attempt", "Fingerprint", "RuleWatcher", "fingerprint", "unexpected_problem"]
