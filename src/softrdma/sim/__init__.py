"""softrdma.sim: a deterministic network of transport endpoints.

Endpoints (``Node``) own QPs and memory; ``Link``s between them lose,
duplicate, reorder, delay and corrupt packets with seeded randomness; a
virtual clock orders everything.  Packets travel as real RoCEv2 UDP
payloads (ICRC computed over the IPv4 header the receiver sees, with an
incrementing IP ID as rxe sends), so corruption is caught by the same ICRC
check a device makes.  No sockets, threads or wall-clock time: a run is a
pure function of its seed.
"""

from .network import Link, LinkStats, Node, Simulator, connect_qps, gid_of

__all__ = ["Simulator", "Node", "Link", "LinkStats", "connect_qps", "gid_of"]
