"""LID assignment (opensm's osm_lid_mgr.c), sans-IO: decides LIDs, the sweep programs them.

Order and rules as opensm on an LMC-0 subnet:

1. the SM's own port first, then every end port in opensm's port-GUID order
   (``Subnet.end_ports``);
2. a port keeps the LID of its guid2lid record if that range is free;
3. else it keeps the LID its PortInfo reports, if valid and free;
4. else it gets the lowest free LID range (aligned to 2^LMC).

So a fresh subnet numbers the SM port 1 and then the ports in GUID-key
order, and a re-sweep keeps every LID.  Each decision is written back to
the guid2lid records, in processing order (opensm's file order follows the
insertion order; records of absent ports are kept, after the present ones).
Switch port 0 gets one LID whatever the LMC (no enhanced port 0 here).
"""

from __future__ import annotations

from .guid2lid import Guid2Lid
from .subnet import Physp, Subnet

LID_UCAST_END = 0xBFFF


def assign_lids(subnet: Subnet, g2l: Guid2Lid, lmc: int = 0) -> list[Physp]:
    """Give every end port a LID; return the ports whose LID changed (need PortInfo Set)."""
    used: dict[int, Physp] = {}
    changed = []
    subnet.lmc = lmc
    order = subnet.end_ports()
    sm = subnet.ports.get(subnet.sm_port_guid)
    if sm is not None:
        order.remove(sm)
        order.insert(0, sm)

    def nlids(p: Physp) -> int:
        return 1 if p.node.is_switch else 1 << lmc

    def free(lo: int, n: int, p: Physp) -> bool:
        return 0 < lo and lo + n - 1 <= LID_UCAST_END and all(used.get(lid, p) is p for lid in range(lo, lo + n))

    # guid2lid records of present ports are honoured first, so a port that comes
    # early in the order cannot take a LID remembered for a later one
    for p in order:
        rec = g2l.get(p.guid)
        if rec and free(rec[0], nlids(p), p):
            for lid in range(rec[0], rec[0] + nlids(p)):
                used[lid] = p
    next_free = 1
    for p in order:
        n = nlids(p)
        rec = g2l.get(p.guid)
        if rec and all(used.get(lid) is p for lid in range(rec[0], rec[0] + n)):
            lid = rec[0]
        elif p.lid and p.lid % n == 0 and free(p.lid, n, p):
            lid = p.lid
        else:
            lid = next_free
            while not free(lid, n, p) or lid % n:
                lid += 1
            next_free = lid
        for x in range(lid, lid + n):
            used[x] = p
        if lid != p.lid or (not p.node.is_switch and p.lmc != lmc):
            changed.append(p)
        p.lid = lid
        p.lmc = 0 if p.node.is_switch else lmc
        g2l.set(p.guid, lid, lid + n - 1)
    # opensm rebuilds the table at every master sweep: a restored file comes out in the
    # same order as a fresh one (checked with two opensm runs on one cache)
    present = {p.guid for p in order}
    g2l.map = {**{p.guid: g2l.map[p.guid] for p in order},
               **{g: v for g, v in g2l.map.items() if g not in present}}
    return changed
