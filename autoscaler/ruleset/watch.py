"""Hot reload of rule files: pick up edits without restarting the controller, and
never trade working rules for broken ones.

A controller that restarts to read new rules loses its pending timers and, if the
new file is bad, comes back with no rules at all. So the watcher re-stats the
files every cycle (``check``) or on SIGHUP (``reload``), and a new rule set takes
effect only when it loads cleanly; otherwise the last good one stays in force,
every problem is logged, and ``reload_success`` turns False (exported as a metric,
as Prometheus does with ``prometheus_config_last_reload_successful``). Only the very
first load may fail loudly: with no good rules to fall back on, the controller
refuses to start.

Stat, not inotify: it works the same for a ConfigMap mounted into a pod (whose
files change by an atomic symlink swap that inotify watchers often miss), costs a
few system calls per cycle, and needs no thread.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from autoscaler.ruleset.errors import Problem, RuleSetError
from autoscaler.ruleset.loader import load_ruleset, rule_files
from autoscaler.ruleset.model import RuleSet

log = logging.getLogger("accel_autoscaler.rules")

# What the watcher compares between checks: each rule file with its identity, size
# and modification time, plus the paths that were missing (so that a file
# appearing is a change too).
Fingerprint = tuple[tuple[str, int, int, int, int], ...]


def fingerprint(paths: Sequence[str | Path]) -> Fingerprint:
    files, problems = rule_files(paths)
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
        self.current: RuleSet = load_ruleset(self.paths, source=source)
        self.reload_success = True
        self.last_problems: list[Problem] = []
        self.loaded_at = self.checked_at = clock()
        log.info("loaded %d rules from %s", len(self.current.rules), ", ".join(self.current.files))

    def check(self) -> bool:
        """Reloads if a rule file changed (content, size, a file added or removed)
        since the last look. True when a new rule set took effect."""
        self.checked_at = self.clock()
        now = fingerprint(self.paths)
        if now == self._fingerprint:
            return False
        self._fingerprint = now
        return self._load("rule files changed")

    def reload(self) -> bool:
        """Reloads whether or not anything changed (SIGHUP). True when a new rule set
        took effect; a bad one keeps the current rules (see ``reload_success``)."""
        self.checked_at = self.clock()
        self._fingerprint = fingerprint(self.paths)
        return self._load("reload requested")

    def _load(self, why: str) -> bool:
        try:
            ruleset = load_ruleset(self.paths, source=self.source)
        except RuleSetError as e:
            self.reload_success = False
            self.last_problems = e.problems
            log.error(
                "%s, but the new rules have %d problem(s); keeping the %d rules in force",
                why,
                len(e.problems),
                len(self.current.rules),
            )
            for problem in e.problems:
                log.error("%s", problem)
            return False
        self.reload_success = True
        self.last_problems = []
        if ruleset == self.current:
            log.info("%s; the rules are unchanged", why)
            return False
        self.current = ruleset
        self.loaded_at = self.clock()
        log.info("%s; %d rules now in force", why, len(ruleset.rules))
        return True


__all__ = ["Fingerprint", "RuleWatcher", "fingerprint"]
