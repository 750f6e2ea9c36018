#!/usr/bin/env python3
"""RC soak through the lossy simulator: packets, virtual time, wall time,
retransmissions and the byte-exact verdict.

    python3 benchmarks/soak.py                         # 1,000,000 packets, 10 % loss/reorder, 5 % dup
    python3 benchmarks/soak.py --packets 200000 --loss 0.2 --seed 7

The same run as tests/test_transport_soak.py (which takes its packet count
from SOFTRDMA_SOAK_PACKETS); see tests/sim_helpers.py ``soak`` for what is
checked.  Exit status 1 if any check failed.
"""

from __future__ import annotations

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "src"))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))

from sim_helpers import soak  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--packets", type=int, default=1_000_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--loss", type=float, default=0.10)
    ap.add_argument("--reorder", type=float, default=0.10)
    ap.add_argument("--dup", type=float, default=0.05)
    ap.add_argument("--corrupt", type=float, default=0.0)
    ap.add_argument("--mtu", type=int, default=1024, choices=[256, 512, 1024, 2048, 4096])
    ap.add_argument("--quiet", action="store_true", help="no progress lines")
    args = ap.parse_args()
    mtu_enum = {256: 1, 512: 2, 1024: 3, 2048: 4, 4096: 5}[args.mtu]
    step = [max(args.packets // 10, 1)]

    def progress(n, res):
        if not args.quiet and n >= step[0]:
            print(f"  {n:>10,} packets, {res.batches} batches", file=sys.stderr, flush=True)
            step[0] += max(args.packets // 10, 1)

    res = soak(args.packets, seed=args.seed, loss=args.loss, reorder=args.reorder, dup=args.dup,
               corrupt=args.corrupt, mtu_enum=mtu_enum, progress=progress, stop_on_failure=False)
    print(f"packets          {res.packets:,}")
    print(f"virtual time     {res.virtual_time:.3f} s")
    print(f"wall time        {res.wall_time:.1f} s ({res.packets / max(res.wall_time, 1e-9):,.0f} packets/s)")
    print(f"retransmissions  {res.retransmissions:,}")
    print(f"lost/dup/reord   {res.lost:,} / {res.duplicated:,} / {res.reordered:,}")
    print(f"batches/ops      {res.batches:,} / {res.ops:,} ({res.bytes_checked:,} payload bytes checked)")
    print(f"retry_exc        {res.retry_exc}")
    print(f"byte-exact       {'yes' if res.byte_exact else 'NO'}")
    if not res.byte_exact:
        print(res.failure)
    return 0 if res.byte_exact else 1


if __name__ == "__main__":
    sys.exit(main())
