"""An experiment, loaded by every Python process started with this
directory first on PYTHONPATH: softrdmad processes pin themselves to the
last CPU, every other process (the perftest applications) to the others --
the daemons and the applications never share a core.

    sudo python3 benchmarks/ab_env.py --one-daemon --b PYTHONPATH=benchmarks/pin_apart -- ib_write_lat -s 2

The supported form of the same placement is ``softrdmad --cpu LIST`` for
the daemon and ``taskset -c`` for the applications (``ab_env.py
--b-placed``, perftest_bench.py's placed latency runs); this file stays for
the figures docs/PERFORMANCE.md measured with it.
"""

import os
import sys

_cpus = sorted(os.sched_getaffinity(0))
if len(_cpus) > 1:
    os.sched_setaffinity(0, {_cpus[-1]} if "daemon" in sys.argv else set(_cpus[:-1]))
