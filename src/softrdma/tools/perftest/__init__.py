"""perftest for softrdma: ib_send_bw, ib_write_bw, ib_read_bw, ib_atomic_bw,
ib_send_lat, ib_write_lat, ib_read_lat, ib_atomic_lat.

Compatible with linux-rdma/perftest (docs/formats/perftest.md has what was
taken from its source and what differs): the options, defaults and error
messages (params.py), the TCP exchange with a real perftest peer byte for
byte (comm.py), the verbs resources and QP attributes (resources.py), the
measurement loops (run_bw.py, run_lat.py), the printed report and the
``--out_json`` file (report.py); flows.py is each program's ``main()``.

Modules and what they own:

=============  ==============================================================
params.py      option table, usage(), parser(), force_dependecies()
comm.py        the out-of-band exchange over TCP (versions, MTU, keys, reports)
rdma_cm.py     -R/-z: the same exchange over an rdma_cm QP; -R's test QP by rdma_cm
resources.py   device, link/MTU checks, MR/CQ/QP/SRQ, GID choice, WR templates
timing.py      clock, the -D state machine, the idle policy of the loops
run_bw.py      run_iter_bw / _server / _bi / _infinitely, warm-up
run_lat.py     run_iter_lat_write / run_iter_lat / run_iter_lat_send
report.py      header block, address lines, BW and latency tables, JSON
progress.py    the stderr progress line of long runs
flows.py       the eight programs' main()
=============  ==============================================================

Where softrdma's build of perftest differs from a Mellanox build: there is
one posting path (``ibv_post_send``; the header shows ``ibv_wr* API : OFF``
as perftest does when built without the ``ibv_wr_*`` API), ``-R`` on one RC
QP only (rdma_cm.py), no multicast, raw Ethernet,
GPU memory, ODP, null MR or hardware rate limiter (each fails with a clear
message), and the clock is ``perf_counter_ns`` (see report.py).
"""

from __future__ import annotations

import os
import sys

from . import flows, params as P, progress

TOOLS = {
    "ib_send_bw": (P.SEND, P.BW), "ib_write_bw": (P.WRITE, P.BW), "ib_read_bw": (P.READ, P.BW),
    "ib_atomic_bw": (P.ATOMIC, P.BW), "ib_send_lat": (P.SEND, P.LAT), "ib_write_lat": (P.WRITE, P.LAT),
    "ib_read_lat": (P.READ, P.LAT), "ib_atomic_lat": (P.ATOMIC, P.LAT),
}


def main(argv: list[str] | None = None, prog: str = "ib_write_bw") -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    name = os.path.basename(prog)
    if name not in TOOLS:
        sys.stderr.write(f"softrdma perftest: unknown test {name!r} (one of {', '.join(sorted(TOOLS))})\n")
        return 1
    verb, tst = TOOLS[name]
    p = P.parse(argv, prog, verb, tst)
    if isinstance(p, int):
        sys.stdout.flush()
        return p
    if p.unsupported:
        sys.stdout.flush()
        for why in p.unsupported:
            sys.stderr.write(f"{name}: {why}\n")
        return 1
    if p.test_type == P.DURATION or p.test_method in (P.RUN_ALL, P.RUN_INFINITELY):
        progress.start()
    t = flows.Test(p)
    try:
        rc = flows.FLOWS[(verb, tst)](t)
    except flows.Failed as e:
        rc = e.code
    except KeyboardInterrupt:
        progress.PROGRESS.clear()
        t.res.abandon()
        t.comm.close()
        raise
    finally:
        progress.PROGRESS.clear()
        sys.stdout.flush()
    if rc:
        t.res.abandon()
        t.comm.close()
    return rc
