"""uapi.clock: the free-running counter the library and daemon share."""

import time

from softrdma.uapi import clock


def test_rate_and_mask():
    assert clock.hca_core_clock_khz() == clock.HCA_CORE_CLOCK_KHZ > 0
    assert clock.TIMESTAMP_MASK == (1 << 63) - 1


def test_counter_advances_at_its_rate():
    t0, n0 = clock.read_free_running(), time.clock_gettime_ns(time.CLOCK_MONOTONIC_RAW)
    time.sleep(0.05)
    t1, n1 = clock.read_free_running(), time.clock_gettime_ns(time.CLOCK_MONOTONIC_RAW)
    elapsed_ticks = t1 - t0
    expect = (n1 - n0) * clock.hca_core_clock_khz() / 1e6
    assert abs(elapsed_ticks - expect) < expect * 0.05 + 1000


def test_conversion_round_trips():
    for t in (0, 1, 7, 156250, clock.read_free_running(), clock.TIMESTAMP_MASK // 2):
        assert clock.ns_to_free_running(clock.free_running_to_ns(t)) == t
    # one second of ticks is one second
    assert clock.free_running_to_ns(clock.hca_core_clock_khz() * 1000) == 1_000_000_000


def test_to_ns_is_monotonic_raw():
    ns = clock.free_running_to_ns(clock.read_free_running())
    assert abs(ns - time.clock_gettime_ns(time.CLOCK_MONOTONIC_RAW)) < 50_000_000


def test_real_time_is_wall_clock():
    assert abs(clock.read_real_time_ns() - time.time_ns()) < 50_000_000
