"""Where softrdmad runs: its CPU list (``softrdmad --cpu LIST``) and the
spin budget of its loop that only a daemon with a core to itself gets.

softrdmad is the NIC.  On a host with a real RDMA NIC the latency-minded
operator steers the NIC's interrupts to some cores (``/proc/irq/N/
smp_affinity``) and runs the applications on the others (``taskset -c``);
here ``--cpu`` is the interrupt affinity -- the daemon's loop is pinned with
``sched_setaffinity`` -- and the applications are placed with ``taskset``
as before.  Measured on two cores (docs/PERFORMANCE.md, "Placement"): a
daemon and busy-polling applications that share a core hand every message
over through a ``sched_yield`` of whoever holds it; apart, they do not.

The CPU list has taskset's syntax (util-linux ``cpulist_parse``):
``N``, ``N-M``, ``N-M:STRIDE``, comma-separated.

The spin budget: after its last work the loop goes on polling without
giving the core away (``sched_yield``) for ``spin_us``.  That pays only
when nothing else waits for the daemon's core: on a shared core the
process that must act next waits for the spin to end (measured: the
latency grows by the budget).  So it applies only when the daemon is
pinned (``--cpu``) to CPUs that are not every online CPU -- an operator who
pins it has set a core aside for it.
"""

from __future__ import annotations

import os

#: the default spin budget of a pinned daemon, in microseconds
#: (docs/PERFORMANCE.md: 50 us took ~1.5 us off a 13 us round trip, pinned)
DEFAULT_SPIN_US = 50
ONLINE_PATH = "/sys/devices/system/cpu/online"


class CpuListError(ValueError):
    """A CPU list that cannot be used; the message is one line."""


def parse_cpu_list(text: str) -> frozenset[int]:
    """The CPUs of a taskset-style list (``0,2-3,8-15:2``)."""
    cpus: set[int] = set()
    if not text or not text.strip():
        raise CpuListError("empty CPU list")
    for item in text.split(","):
        item = item.strip()
        rng, colon, stride_s = item.partition(":")
        lo_s, dash, hi_s = rng.partition("-")
        try:
            lo = _cpu_number(lo_s)
            hi = _cpu_number(hi_s) if dash else lo
            stride = _cpu_number(stride_s) if colon else 1
        except ValueError:
            raise CpuListError(f"failed to parse CPU list: {text!r} (at {item!r})") from None
        if (colon and not dash) or hi < lo or stride < 1:
            raise CpuListError(f"failed to parse CPU list: {text!r} (at {item!r})")
        cpus.update(range(lo, hi + 1, stride))
    return frozenset(cpus)


def _cpu_number(s: str) -> int:
    if not s.isdigit():                     # no sign, no spaces, no hex: taskset's strtoul with checks
        raise ValueError(s)
    return int(s, 10)


def format_cpu_list(cpus) -> str:
    """The compact form (``0-3,6``) the kernel uses in /proc and /sys."""
    out, run = [], []
    for c in sorted(cpus):
        if run and c == run[-1] + 1:
            run.append(c)
            continue
        if run:
            out.append(str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}")
        run = [c]
    if run:
        out.append(str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}")
    return ",".join(out)


def online_cpus(path: str = ONLINE_PATH) -> frozenset[int]:
    """The online CPUs (the kernel's list; every CPU ``os.cpu_count`` sees
    where there is no sysfs)."""
    try:
        with open(path) as f:
            return parse_cpu_list(f.read().strip())
    except (OSError, CpuListError):
        return frozenset(range(os.cpu_count() or 1))


def check_cpus(cpus: frozenset[int], online: frozenset[int] | None = None,
               allowed: frozenset[int] | None = None) -> None:
    """CpuListError unless every CPU of ``cpus`` is online and allowed to
    this process (its cgroup's cpuset, an outer taskset)."""
    online = online_cpus() if online is None else online
    off = sorted(cpus - online)
    if off:
        raise CpuListError(f"CPU{'s' if len(off) > 1 else ''} {format_cpu_list(off)} "
                           f"{'are' if len(off) > 1 else 'is'} not online (online: {format_cpu_list(online)})")
    allowed = frozenset(os.sched_getaffinity(0)) if allowed is None else allowed
    out = sorted(cpus - allowed)
    if out:
        raise CpuListError(f"CPU{'s' if len(out) > 1 else ''} {format_cpu_list(out)} "
                           f"{'are' if len(out) > 1 else 'is'} not allowed to this process "
                           f"(allowed: {format_cpu_list(allowed)})")


def pin(cpus: frozenset[int]) -> None:
    """Pin this process (and the threads it starts later) to ``cpus``;
    CpuListError with the kernel's reason if it refuses."""
    try:
        os.sched_setaffinity(0, cpus)
    except OSError as e:
        raise CpuListError(f"cannot run on CPUs {format_cpu_list(cpus)}: {e.strerror}") from None


def spin_budget_s(pinned: frozenset[int] | None, spin_us: int, online: frozenset[int] | None = None) -> float:
    """Seconds the loop polls without yielding after its last work: the
    budget if the daemon has CPUs to itself (pinned, and not to every
    online CPU), else 0 -- on a shared core it yields on every empty pass."""
    if not pinned or spin_us <= 0:
        return 0.0
    online = online_cpus() if online is None else online
    if online <= pinned:                    # "pinned" to every CPU: it shares them all
        return 0.0
    return spin_us / 1e6


def should_yield(now: float, last_busy: float, budget_s: float) -> bool:
    """An empty pass of the loop gives the core away once the budget since
    the last work is spent (at once with no budget)."""
    return now - last_busy >= budget_s


__all__ = ["CpuListError", "DEFAULT_SPIN_US", "check_cpus", "format_cpu_list", "online_cpus", "parse_cpu_list",
           "pin", "should_yield", "spin_budget_s"]
