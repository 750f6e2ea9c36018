"""LID assignment (opensm's osm_lid_mgr.c), sans-IO: decides LIDs, the sweep programs them.

Order and rules as opensm's:

1. the guid2lid records (restored from the file) that are illegal or overlap
   an earlier one are dropped (lid_mgr_validate_db); so is the record of a
   present port that is not aligned to, or narrower than, its 2^LMC range;
   the others hold their LIDs, present port or not;
2. free LID ranges are what no record holds and no record-less port keeps:
   such a port keeps the range its PortInfo reports (LID, and 2^LMC of the
   new LMC) if aligned and no record holds any of it (lid_mgr_init_sweep);
3. the SM's own port first, then every end port in opensm's port-GUID order
   (``Subnet.end_ports``): a port with a record takes its LID; else it keeps
   its PortInfo LID if aligned and no record holds the range; else it takes
   the first aligned block of the first free range that holds one.  The LIDs
   skipped to align a block stay unused in that sweep: on a fresh LMC-2 subnet
   the SM port gets 4..7, a switch after it 8, the next CA 12..15.  On an
   LMC-0 subnet going to LMC 2 the CA ports that happen to sit on a LID
   divisible by 4 keep it, and the others get ranges above every LID in use.

So a fresh subnet numbers the SM port 1 and then the ports in GUID-key
order, and a re-sweep keeps every LID.  Each decision is written to the
guid2lid records (``Guid2Lid`` keeps opensm's hash-table order, and whether
the file needs rewriting).
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
    """Give every end port a LID range; return the ports whose LID or LMC changed."""
    subnet.lmc = lmc
    lmc_n = 1 << lmc
    order = subnet.end_ports()
    sm = subnet.ports.get(subnet.sm_port_guid)
    if sm is not None:
        order.remove(sm)
        order.insert(0, sm)

    def nlids(p: Physp) -> int:
        return 1 if p.node.is_switch and not sp0_lmc_capable(p.node, lmc_esp0) else lmc_n

    # lid_mgr_validate_db: the records (in table order) that are legal and do not overlap
    used: set[int] = set()          # opensm's used_lids: LIDs the records hold
    for guid in g2l.guids():
        lo, hi = g2l.map[guid]
        ok = 0 < lo <= hi <= LID_UCAST_END and guid and (lo == hi or lo % lmc_n == 0)
        if ok and not any(lid in used for lid in range(lo, hi + 1)):
            used.update(range(lo, hi + 1))
        else:
            g2l.delete(guid)

    # lid_mgr_init_sweep: the LIDs the ports report (their PortInfo LID and LMC) ...
    discovered: dict[int, Physp] = {}
    for p in subnet.end_ports():
        lo, hi = _trim(p.lid), _trim(p.lid + (1 << p.lmc) - 1 if p.lid else 0)
        for lid in range(lo, hi + 1):
            if lid:
                discovered[lid] = p
        rec = g2l.get(p.guid)
        n = nlids(p)
        if rec is not None and n != 1 and (rec[0] % n or rec[1] - rec[0] + 1 < n):
            g2l.delete(p.guid)          # not aligned, or too narrow, for this LMC
            used.difference_update(range(rec[0], rec[1] + 1))
    # opensm's port_lid_tbl grows to every LID it is told about and never shrinks: its
    # top is the LFTs' top (an LMC-2 subnet going to LMC 0 keeps the old top)
    subnet.lid_top = max(subnet.lid_top, max(discovered, default=0))
    # ... and the free ranges: not held by a record, and not kept by a port that has
    # no record but reports an aligned range that no record holds
    free: list[list[int]] = []
    cur = None
    top = max(max(used, default=0), max(discovered, default=0))
    lid = 1
    while lid <= top:
        is_free = True
        if lid in used:
            is_free = False
        elif lid in discovered:
            p = discovered[lid]
            if g2l.get(p.guid) is None:
                n = nlids(p)
                dmin = p.lid
                dmax = dmin + n - 1 if n != 1 else dmin + (1 << p.lmc) - 1
                if n == 1 or dmin % n == 0:
                    is_free = any(x in used for x in range(dmin + 1, dmax + 1))
                    if not is_free and dmax > lid:
                        lid = dmax
        if is_free:
            if cur is not None:
                cur[1] = lid
            else:
                cur = [lid, lid]
        elif cur is not None:
            free.append(cur)
            cur = None
        lid += 1
    if cur is None:
        cur = [lid, lid]
    cur[1] = LID_UCAST_END
    free.append(cur)

    def find_free(n: int) -> int:
        # lid_mgr_find_free_lid_range: the first range that holds an aligned block; LIDs
        # skipped to align it are lost to this sweep
        for i, r in enumerate(free):
            lo = r[0]
            if n > 1 and lo % lmc_n:
                lo = (lo + lmc_n) & ~(lmc_n - 1)
            if lo + n - 1 <= r[1]:
                if lo + n - 1 == r[1]:
                    del free[i]
                else:
                    r[0] = lo + n
                return lo
        return 0            # "ERR 0307: OPENSM RAN OUT OF LIDS!!!": the port is left on LID 0

    # lid_mgr_get_port_lid, SM port first
    changed = []
    out_of_lids: list[Physp] = []
    for p in order:
        n = nlids(p)
        rec = g2l.get(p.guid)
        if rec is not None:
            lo = rec[0]
        elif p.lid and p.lid % n == 0 and not any(x in used for x in range(p.lid, p.lid + n)):
            lo = p.lid
        else:
            lo = find_free(n)
            if not lo:
                out_of_lids.append(p)
                g2l.set(p.guid, 0, 0)
                if p.lid:
                    changed.append(p)
                p.lid, p.lmc = 0, 0
                continue
        g2l.set(p.guid, lo, lo + n - 1)
        used.update(range(lo, lo + n))
        plmc = n.bit_length() - 1
        if lo != p.lid or p.lmc != plmc:
            changed.append(p)
        p.lid = lo
        p.lmc = plmc
    subnet.out_of_lids = out_of_lids
    return changed


def _trim(lid: int) -> int:
    return lid if 0 < lid <= LID_UCAST_END else 0
