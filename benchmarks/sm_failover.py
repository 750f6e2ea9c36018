#!/usr/bin/env python3
"""Standby takeover: how long after the master SM dies does the standby
bring the subnet up again -- softrdma's SM against the real opensm as the
standby, same run, same polling settings (sminfo_polling_timeout,
polling_retry_number), on the real ibsim (ft2_64), alternating.

Each round: a master (softrdma's SM on host0002) reaches SUBNET UP; the
standby under test starts on host0064 and enters STANDBY; the master is
killed (SIGKILL); the time until the standby's log says SUBNET UP is the
takeover time.  opensm's polling timer sends an SMInfo Get every
sminfo_polling_timeout and takes over at the tick that finds more than
polling_retry_number polls unanswered: about (retries + 2) intervals after
the master's last answer.

    python3 benchmarks/sm_failover.py [--rounds 3] [--poll-ms 1000] [--retries 4]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))

from sm_helpers import IbsimFabric, wait_log  # noqa: E402


def one(kind: str, poll_ms: int, retries: int) -> float:
    with tempfile.TemporaryDirectory(prefix="smfail-") as d:
        tmp = Path(d)
        fab = IbsimFabric(tmp)
        try:
            conf = f"sminfo_polling_timeout {poll_ms}\n\npolling_retry_number {retries}\n"
            (tmp / "poll.conf").write_text(conf)
            master = fab.our_sm("master", None, "-s", "10")
            wait_log(master, "SUBNET UP", timeout=60)
            if kind == "softrdma":
                standby = fab.our_sm("standby", "host0064", "-s", "10")
            else:
                standby = fab.real_sm("standby", "host0064", "-F", str(tmp / "poll.conf"), "-s", "10")
            wait_log(standby, "Entering STANDBY state|SM port is down|STANDBY", timeout=60)
            time.sleep(poll_ms / 1000 * 1.5)          # a poll answered: the standby's count starts at 0
            t0 = time.monotonic()
            master.kill()
            master.wait()
            end = t0 + 120
            while time.monotonic() < end:
                text = standby.log.read_text(errors="replace")
                if re.search("SUBNET UP", text):
                    return time.monotonic() - t0
                time.sleep(0.02)
            raise RuntimeError(f"{kind}: no takeover in 120 s")
        finally:
            fab.close()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--poll-ms", type=int, default=1000)
    p.add_argument("--retries", type=int, default=4)
    a = p.parse_args()
    res: dict[str, list[float]] = {"opensm": [], "softrdma": []}
    for i in range(a.rounds):
        for kind in (("opensm", "softrdma") if i % 2 == 0 else ("softrdma", "opensm")):
            t = one(kind, a.poll_ms, a.retries)
            res[kind].append(t)
            print(f"round {i + 1} {kind:8}: takeover to SUBNET UP {t:.2f} s", flush=True)
    for kind, ts in res.items():
        print(f"{kind:8}: median {statistics.median(ts):.2f} s of " + ", ".join(f"{t:.2f}" for t in ts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
