"""The demo's subscriber: connects to a publisher, checks that messages
0..COUNT-1 arrive once each, in order and byte-exact, prints its message
rate once a second, and leaves after the last one.

    subscriber.py ADDR PORT --count COUNT --size SIZE
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import payload                                   # noqa: E402
from msgr.messenger import Messenger             # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("addr")
    p.add_argument("port", type=int)
    p.add_argument("--count", type=int, default=10000)
    p.add_argument("--size", type=int, default=4096)
    p.add_argument("--chunk", type=int, default=8192)
    p.add_argument("--credits", type=int, default=32)
    p.add_argument("--report-every", type=int, default=0, help="also print a line every N messages")
    p.add_argument("--stall-after", type=int, default=0,
                   help="stop reading after N messages (a hung peer, for tests)")
    a = p.parse_args(argv)

    st = {"n": 0, "bad": None, "t0": None, "last": 0.0, "at_last": 0}
    done = threading.Event()
    stall = threading.Event()

    def on_message(conn, seq, data):
        now = time.monotonic()
        if st["t0"] is None:
            st["t0"] = st["last"] = now
        n = st["n"]
        if seq != n or data != payload.make(n, a.size):
            st["bad"] = f"message {n}: got seq {seq}, number {payload.number(data)}, {len(data)} bytes"
            done.set()
            return
        st["n"] = n + 1
        if a.report_every and st["n"] % a.report_every == 0:
            print(f"got {st['n']}", flush=True)
        if now - st["last"] >= 1.0:
            rate = (st["n"] - st["at_last"]) / (now - st["last"])
            print(f"received {st['n']}: {rate:.0f} msg/s, {rate * a.size / 2**20:.1f} MiB/s", flush=True)
            st["last"], st["at_last"] = now, st["n"]
        if st["n"] == a.count:
            done.set()
        if a.stall_after and st["n"] == a.stall_after:
            print("stalled", flush=True)
            stall.wait()

    def on_close(conn, why):
        st["bad"] = st["bad"] or f"connection closed after {st['n']} messages ({why})"
        done.set()

    m = Messenger(chunk_size=a.chunk, credits=a.credits, max_conns=1, on_message=on_message, on_close=on_close)
    try:
        m.connect(a.addr, a.port)
        print("connected", flush=True)
        done.wait()
        if st["bad"] and st["n"] < a.count:
            print(f"FAILED: {st['bad']}", flush=True)
            return 1
        dt = time.monotonic() - (st["t0"] or time.monotonic())
        print(f"done: {st['n']} messages in order, byte-exact, no duplicates; "
              f"{st['n'] / max(dt, 1e-9):.0f} msg/s", flush=True)
    finally:
        m.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
