"""An IPoIB interface's neighbours and paths (the kernel's ipoib_neigh and
ipoib_path, with the part of the ARP/ND cache a TUN interface cannot keep).

``Neigh``: an IP address's IPoIB hardware address (learnt from ARP or
neighbour discovery), its state as ``ip neigh`` names them (INCOMPLETE
while a solicitation is out, REACHABLE once answered, FAILED after
``SOLICIT_TRIES`` unanswered, STALE once its path is flushed) and the
datagrams waiting for it (at most ``QUEUE_MAX``, as the kernel's
arp_queue; older ones are dropped and counted).

``Path``: a destination GID's SA PathRecord (DLID, SL, MTU, rate) and
the address vector built from it -- one per GID, shared by the
neighbours there (ipoib's path list); ``flush`` forgets every record
(the SM changed, our LID changed, a client reregister): the next datagram
asks the SA again.
"""

from __future__ import annotations

from ..transport.wr import AddressVector

QUEUE_MAX = 3                  # datagrams waiting per unresolved neighbour or path (IPOIB_MAX_PATH_REC_QUEUE)
SOLICIT_TRIES = 3              # ARP requests / neighbour solicitations before FAILED
SOLICIT_INTERVAL_S = 1.0
FAILED_HOLD_S = 3.0            # a FAILED entry is asked again after this
INCOMPLETE, REACHABLE, STALE, FAILED = "INCOMPLETE", "REACHABLE", "STALE", "FAILED"


class Path:
    __slots__ = ("gid", "av", "tid", "record", "queue", "valid", "recheck_at")

    def __init__(self, gid: bytes):
        self.gid = gid
        self.av: AddressVector | None = None
        self.tid: int | None = None           # the PathRecord query out
        self.record: dict | None = None
        self.queue: list = []                 # (hardware address, ethertype, datagram, from the TUN) waiting
        self.valid = False
        self.recheck_at = 0.0                 # (a mismatched SLID re-asks the SA no sooner)


class Neigh:
    __slots__ = ("ip", "hw", "state", "queue", "tries", "next_try", "family")

    def __init__(self, ip: bytes):
        self.ip = ip
        self.family = 4 if len(ip) == 4 else 6
        self.hw: bytes | None = None
        self.state = INCOMPLETE
        self.queue: list = []                 # datagrams waiting for the hardware address
        self.tries = 0
        self.next_try = 0.0


class NeighTable:
    """Neighbours by IP address (4 or 16 bytes) and paths by GID."""

    def __init__(self):
        self.neighs: dict[bytes, Neigh] = {}
        self.paths: dict[bytes, Path] = {}
        self.dropped = 0                      # datagrams dropped for an unresolved neighbour or path

    def neigh(self, ip: bytes) -> Neigh:
        n = self.neighs.get(ip)
        if n is None:
            n = self.neighs[ip] = Neigh(ip)
        return n

    def learn(self, ip: bytes, hw: bytes) -> Neigh:
        """``ip`` is at ``hw`` (an ARP or ND message said so)."""
        n = self.neigh(ip)
        n.hw = hw
        n.state = REACHABLE
        n.tries = 0
        return n

    def enqueue(self, queue: list, item) -> None:
        if len(queue) >= QUEUE_MAX:
            queue.pop(0)
            self.dropped += 1
        queue.append(item)

    def path(self, gid: bytes) -> Path:
        p = self.paths.get(gid)
        if p is None:
            p = self.paths[gid] = Path(gid)
        return p

    def flush_paths(self) -> None:
        """Every path asked again on its next use; the neighbours keep their addresses."""
        for p in self.paths.values():
            p.valid = False
            p.av = None
            p.record = None
            p.tid = None
        for n in self.neighs.values():
            if n.state == REACHABLE:
                n.state = STALE

    def clear(self) -> None:
        self.dropped += sum(len(n.queue) for n in self.neighs.values()) + sum(len(p.queue) for p in self.paths.values())
        self.neighs.clear()
        self.paths.clear()

    def rows(self) -> list[dict]:
        """``ip neigh``'s view: address, hardware address, state."""
        return [{"ip": n.ip, "hw": n.hw, "state": n.state} for n in self.neighs.values()]


__all__ = ["NeighTable", "Neigh", "Path", "INCOMPLETE", "REACHABLE", "STALE", "FAILED", "QUEUE_MAX",
           "SOLICIT_TRIES", "SOLICIT_INTERVAL_S", "FAILED_HOLD_S"]
