"""The demo's publisher: waits for N subscribers, then sends COUNT messages
of SIZE bytes to each of them, printing its message rate once a second.

    publisher.py ADDR PORT --subscribers N --count COUNT --size SIZE
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
    p.add_argument("--subscribers", type=int, default=1)
    p.add_argument("--count", type=int, default=10000, help="messages to publish (default 10000)")
    p.add_argument("--size", type=int, default=4096, help="message size in bytes (default 4096)")
    p.add_argument("--chunk", type=int, default=8192, help="chunk size of the pool (default 8192)")
    p.add_argument("--credits", type=int, default=32, help="receive credits per connection (default 32)")
    a = p.parse_args(argv)

    subs: list = []
    progress = {"i": 0}
    cv = threading.Condition()

    def connected(conn):
        with cv:
            subs.append(conn)
            print(f"subscriber {len(subs)} connected", flush=True)
            cv.notify_all()

    def closed(conn, why):
        with cv:
            if conn in subs:
                subs.remove(conn)
            print(f"subscriber left ({why}) while publishing message {progress['i']}; {len(subs)} left",
                  flush=True)
            cv.notify_all()

    m = Messenger(chunk_size=a.chunk, credits=a.credits, max_conns=max(a.subscribers, 1),
                  on_connect=connected, on_close=closed)
    try:
        m.listen(a.addr, a.port)
        print(f"listening on {a.addr} port {a.port}", flush=True)
        with cv:
            cv.wait_for(lambda: len(subs) >= a.subscribers)
            targets = list(subs)
        print(f"publishing {a.count} messages of {a.size} bytes to {len(targets)} subscribers", flush=True)
        t0 = last = time.monotonic()
        sent_at_last = 0
        for i in range(a.count):
            progress["i"] = i
            msg = payload.make(i, a.size)
            for conn in targets:
                if conn.state == "established":
                    try:
                        m.send(conn, msg)
                    except ConnectionError:
                        pass
            m.wait_backlog(4 * a.credits * len(targets))
            now = time.monotonic()
            if now - last >= 1.0:
                rate = (i + 1 - sent_at_last) / (now - last)
                print(f"published {i + 1}: {rate:.0f} msg/s, {rate * a.size / 2**20:.1f} MiB/s per subscriber",
                      flush=True)
                last, sent_at_last = now, i + 1
        progress["i"] = a.count
        m.wait_backlog(0)
        with cv:                                   # each subscriber leaves after the last message
            cv.wait_for(lambda: not subs, timeout=120)
        dt = time.monotonic() - t0
        print(f"done: {a.count} messages in {dt:.2f} s, {a.count / dt:.0f} msg/s; "
              f"{m.stats['frags_sent']} fragments sent", flush=True)
    finally:
        m.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
