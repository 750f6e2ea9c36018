"""Clocks, the -D state machine and the waiting policy of perftest's loops.

* ``now()`` is ``time.perf_counter_ns``: perftest's ``get_cycles()``.
* ``Duration`` is perftest's SIGALRM state machine (``catch_alarm``):
  START for ``margin`` seconds, SAMPLE for ``duration - 2 * margin`` (its
  start and end time stamps are the measurement, as ``tposted[0]`` and
  ``tcompleted[0]``), STOP_SAMPLE for ``margin``, then END.  The loops ask
  ``state()`` between posts instead of taking a signal: the transitions
  happen at the same times, and no handler interrupts a post half way.
* ``Idle`` is what a loop does when a poll found nothing.  perftest spins;
  here the "hardware" is softrdmad, a process that needs the CPU the spin
  would take (the test machine has two cores for both tools and the
  daemon), so a loop spins a little, then yields the CPU (sched_yield) on
  every empty poll, and naps after a long idle stretch.  A yield costs
  about a microsecond when nobody else wants the CPU, so latencies stay
  latencies.
"""

from __future__ import annotations

import os
import time

from . import params as P
from .report import cpu_stats

now = time.perf_counter_ns

_SPINS = 64                 # empty polls spent spinning before yielding
_YIELDS = 20000             # empty polls spent yielding before napping
_NAP_S = 50e-6


class Idle:
    """Call ``wait()`` after an empty poll and ``reset()`` after progress."""

    __slots__ = ("n",)

    def __init__(self):
        self.n = 0

    def reset(self) -> None:
        self.n = 0

    def wait(self) -> None:
        n = self.n = self.n + 1
        if n <= _SPINS:
            return
        if n <= _YIELDS:
            os.sched_yield()
        else:
            time.sleep(_NAP_S)


class Duration:
    """catch_alarm() as a clock-driven state machine."""

    def __init__(self, p: P.Params, run):
        self.p = p
        self.run = run
        self.state = P.START_STATE
        self.next_ns = 0

    def arm(self) -> None:
        """The first alarm (run_iter_* or the first receive on a server)."""
        p = self.p
        p.iters = 0
        self.state = P.START_STATE
        if p.margin > 0:
            self.next_ns = now() + p.margin * 1_000_000_000
        else:
            self._advance(now())

    def _advance(self, t: int) -> None:
        p, run = self.p, self.run
        if self.state == P.START_STATE:
            self.state = P.SAMPLE_STATE
            p.cpu_stats[0] = _cpu_stats()
            run.tposted[0] = t
            self.next_ns = t + (p.duration - 2 * p.margin) * 1_000_000_000
        elif self.state == P.SAMPLE_STATE:
            self.state = P.STOP_SAMPLE_STATE
            run.tcompleted[0] = t
            p.cpu_stats[1] = _cpu_stats()
            if p.margin > 0:
                self.next_ns = t + p.margin * 1_000_000_000
            else:
                self._advance(t)
        elif self.state == P.STOP_SAMPLE_STATE:
            self.state = P.END_STATE

    def poll(self) -> int:
        """The current state, moving on if its time is up."""
        if self.state != P.END_STATE:
            t = now()
            while self.state != P.END_STATE and t >= self.next_ns:
                self._advance(t)
        return self.state

    def remaining_s(self) -> float:
        return max(0.0, (self.next_ns - now()) / 1e9)


def _cpu_stats() -> tuple[int, int]:
    return cpu_stats()
