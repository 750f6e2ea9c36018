"""LID assignment (opensm's osm_lid_mgr.c), sans-IO: decides LIDs, the sweep programs them.

Order and rules as opensm's:

1. the SM's own port first, then every end port in opensm's port-GUID order
   (``Subnet.end_ports``);
2. a port keeps the LID of its guid2lid record if that range is free (and,
   with an LMC, aligned to 2^LMC and at least 2^LMC wide);
3. else it keeps the LID its PortInfo reports, if valid and free;
4. else it gets the lowest free LID range (aligned to 2^LMC; opensm's free
   range list never goes back, so the LIDs skipped to align a range stay
   unused: on a fresh LMC-2 subnet the SM port gets 4..7, a switch after it 8,
   the next CA 12..15).

So a fresh subnet numbers the SM port 1 and then the ports in GUID-key
order, and a re-sweep keeps every LID.  Each decision is written back to
the guid2lid records, in processing order (opensm's file order follows the
insertion order; records of absent ports are kept, after the present ones).
Switch port 0 gets one LID whatever the LMC, unless ``lmc_esp0`` is set and
the switch has an enhanced port 0 (SwitchInfo.EnhancedPort0); opensm's
default is lmc_esp0 FALSE, and neither ibsim's nor softrdma's switches have
an enhanced port 0.
"""

from __future__ import annotations

from ..wire.smp import SWITCH_INFO
from .guid2lid import Guid2Lid
from .subnet import Node, Physp, Subnet

LID_UCAST_END = 0xBFFF


def sp0_lmc_capable(node: Node, lmc_esp0: bool) -> bool:
    """osm_switch_sp0_is_lmc_capable: lmc_esp0 set and SwitchInfo.EnhancedPort0."""
    return bool(lmc_esp0 and node.switch_info and SWITCH_INFO.get(node.switch_info, "EnhancedPort0"))


def assign_lids(subnet: Subnet, g2l: Guid2Lid, lmc: int = 0, lmc_esp0: bool = False) -> list[Physp]:
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
        return 1 if p.node.is_switch and not sp0_lmc_capable(p.node, lmc_esp0) else 1 << lmc

    def free(lo: int, n: int, p: Physp) -> bool:
        return 0 < lo and lo + n - 1 <= LID_UCAST_END and all(used.get(lid, p) is p for lid in range(lo, lo + n))

    # guid2lid records of present ports are honoured first, so a port that comes
    # early in the order cannot take a LID remembered for a later one
    def valid(rec, n: int) -> bool:
        # lid_mgr_init_sweep drops a record not aligned to, or narrower than, the LMC range
        return bool(rec) and (n == 1 or (rec[0] % n == 0 and rec[1] - rec[0] + 1 >= n))

    for p in order:
        rec = g2l.get(p.guid)
        if valid(rec, nlids(p)) and free(rec[0], nlids(p), p):
            for lid in range(rec[0], rec[0] + nlids(p)):
                used[lid] = p
    next_free = 1
    for p in order:
        n = nlids(p)
        rec = g2l.get(p.guid)
        if valid(rec, n) and all(used.get(lid) is p for lid in range(rec[0], rec[0] + n)):
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
        plmc = n.bit_length() - 1
        if lid != p.lid or p.lmc != plmc:
            changed.append(p)
        p.lid = lid
        p.lmc = plmc
        g2l.set(p.guid, lid, lid + n - 1)
    # opensm rebuilds the table at every master sweep: a restored file comes out in the
    # same order as a fresh one (checked with two opensm runs on one cache)
    present = {p.guid for p in order}
    g2l.map = {**{p.guid: g2l.map[p.guid] for p in order},
               **{g: v for g, v in g2l.map.items() if g not in present}}
    return changed
