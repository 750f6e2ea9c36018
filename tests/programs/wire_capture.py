"""Capture what an interface hands the host (AF_PACKET, as tcpdump does),
UDP to port 4791 only, until stdin closes; then print one JSON line per
frame: {"ip": hex of the IP packet}.  Prints "ready" once capturing.

    wire_capture.py IFNAME
"""

from __future__ import annotations

import json
import select
import socket
import sys

ETH_P_ALL = 0x0003


def main() -> int:
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    s.bind((sys.argv[1], 0))
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    print("ready", flush=True)
    frames = []
    while True:
        r, _, _ = select.select([s, sys.stdin], [], [])
        if s in r:
            while True:
                try:
                    f = s.recv(70000, socket.MSG_DONTWAIT)
                except BlockingIOError:
                    break
                ip = f[14:]
                if f[12:14] == b"\x08\x00" and ip[9] == 17:
                    ihl = (ip[0] & 0xF) * 4
                    if int.from_bytes(ip[ihl + 2:ihl + 4], "big") == 4791:
                        frames.append(ip.hex())
        if sys.stdin in r and not sys.stdin.readline():
            break
    for ip in frames:
        print(json.dumps({"ip": ip}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
