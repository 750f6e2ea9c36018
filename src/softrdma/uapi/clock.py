"""The device's free-running clock (the "HCA core clock"), one definition
for the library and the daemon.

A hardware device stamps completions with a free-running counter that ticks
at ``hca_core_clock`` kHz (ibv_query_device_ex; mlx5 reports its
device_frequency_khz) and lets software read it (ibv_query_rt_values_ex,
IBV_VALUES_MASK_RAW_CLOCK: mlx5 returns the raw cycles in
``raw_clock.tv_nsec`` with ``tv_sec`` 0).  softrdma's counter is derived
from the host's CLOCK_MONOTONIC_RAW, which every process on the host reads
alike, so a value the daemon stamps into a CQE and a value the library
reads are on the same time line without any shared state.

The rate is not 1 GHz on purpose: a counter in ns would hide a missing
cycles-to-ns conversion.  156250 kHz is a ConnectX-4 Lx's core clock
(6.4 ns a tick).  The counter is 63 bits wide (``TIMESTAMP_MASK``, mlx5's
completion_timestamp_mask), so it wraps after ~1870 years.
"""

from __future__ import annotations

import time

#: ticks per millisecond of the free-running counter (hca_core_clock)
HCA_CORE_CLOCK_KHZ = 156250
#: the counter's valid bits (completion_timestamp_mask)
TIMESTAMP_MASK = (1 << 63) - 1

_CLOCK = time.CLOCK_MONOTONIC_RAW


def hca_core_clock_khz() -> int:
    """ibv_device_attr_ex.hca_core_clock: the counter's rate in kHz."""
    return HCA_CORE_CLOCK_KHZ


def read_free_running() -> int:
    """The counter now, in ticks (ibv_query_rt_values_ex's raw clock)."""
    return (time.clock_gettime_ns(_CLOCK) * HCA_CORE_CLOCK_KHZ // 1_000_000) & TIMESTAMP_MASK


def free_running_to_ns(ticks: int) -> int:
    """Ticks of the counter as nanoseconds of CLOCK_MONOTONIC_RAW (the
    inverse of ``ns_to_free_running``: rounded up, so that converting back
    gives the same ticks)."""
    return -(-(ticks & TIMESTAMP_MASK) * 1_000_000 // HCA_CORE_CLOCK_KHZ)


def ns_to_free_running(ns: int) -> int:
    """Nanoseconds of CLOCK_MONOTONIC_RAW as ticks of the counter."""
    return (ns * HCA_CORE_CLOCK_KHZ // 1_000_000) & TIMESTAMP_MASK


def read_real_time_ns() -> int:
    """The wall clock in ns since the epoch (IBV_WC_EX_WITH_COMPLETION_
    TIMESTAMP_WALLCLOCK's time line, ibv_query_rt_values_ex's real time)."""
    return time.clock_gettime_ns(time.CLOCK_REALTIME)
