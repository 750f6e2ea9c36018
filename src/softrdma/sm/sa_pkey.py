"""The SA's partition rules (opensm's osm_sa_path_record.c, osm_sa_pkey_record.c), sans-IO.

* ``path_pkey_sl``: a PathRecord's P_Key and SL -- the P_Key asked for if
  both ports share it, else the first P_Key they share (one of them a full
  member: two limited members have no path); the SL of that P_Key's
  partition (or of the QoS policy, see ``sm.qos_policy``).  None: no path.
* ``requester_shares``: the requester, the source and the destination must
  share a P_Key pairwise, or the pair has no path for this requester.
* ``pkey_table_records``: PKeyTableRecords (IBA 15.2.5.11; trusted
  requesters only) of the P_Key tables as the SM knows them: per end port
  (a switch: every port, port 0 first), every block it read, those the
  requester shares a P_Key with.
"""

from __future__ import annotations

from .pkey_mgr import entry as entry_of, find_common_pkey, has_pkey, share_pkey, share_this_pkey
from .subnet import Physp, Subnet

PR_COMP_PKEY = 1 << 13
PR_COMP_SL = 1 << 15
PR_COMP_RAW = 1 << 6
PKTR_COMP_LID, PKTR_COMP_BLOCK, PKTR_COMP_PORT = 1, 2, 4
PKEY_TABLE_RECORD_SIZE = 72          # LID, BlockNum, PortNum, reserved[3], P_KeyTable[64]
NO_PKEYS = 0xFFFF                    # before any table is known: every path in the default partition


def _tbl(subnet: Subnet, p: Physp):
    t = subnet.pkey_tables
    if t is None:
        return None
    return t.get((p.node.guid, p.num))


def path_pkey_sl(subnet: Subnet, src: Physp, dst: Physp, mask: int, f: dict, log=None):
    """(P_Key, SL, QoS level or None) of the paths between ``src`` and ``dst`` for this
    request, or None (no path)."""
    t1, t2 = _tbl(subnet, src), _tbl(subnet, dst)
    level = None
    if subnet.qos_policy is not None:
        level = subnet.qos_policy.level_for(src, dst, mask, f, subnet)
    qos_sl = level.sl if level is not None else None
    if qos_sl is not None and mask & PR_COMP_SL and f["SL"] != qos_sl:
        if log:
            log.error(f"pr_rcv_get_path_parms: ERR 1F18: QoS level SL ({qos_sl}) doesn't match the requested "
                      f"SL ({f['SL']})")
        return None
    if t1 is None or t2 is None:
        return NO_PKEYS, f["SL"] if mask & PR_COMP_SL else qos_sl or 0, level
    if mask & PR_COMP_RAW and f["RawTraffic"]:
        pkey = find_common_pkey(t1, t2)
    elif mask & PR_COMP_PKEY:
        pkey = f["PKey"]
        if not share_this_pkey(t1, t2, pkey):
            if log:
                log.verbose(f"pr_rcv_get_path_parms: Ports 0x{src.guid:016x} 0x{dst.guid:016x} "
                            f"do not share specified PKey 0x{pkey:04x}")
            return None
        if level is not None and level.pkeys and not any(lo <= pkey & 0x7FFF <= hi for lo, hi in level.pkeys):
            if log:
                log.error(f"pr_rcv_get_path_parms: ERR 1F1D: Ports do not share PKeys defined by QoS level "
                          f"{level.name}")
            return None
    elif level is not None and level.pkeys:
        # osm_qos_level_get_shared_pkey: the first of the level's P_Keys both ports share
        pkey = next((entry_of(t1, k) for lo, hi in level.pkeys for k in range(lo, hi + 1)
                     if share_this_pkey(t1, t2, k)), 0)
        if not pkey:
            if log:
                log.error(f"pr_rcv_get_path_parms: ERR 1F1A: Ports do not share PKeys defined by QoS level "
                          f"{level.name}")
            return None
    else:
        pkey = find_common_pkey(t1, t2)
        if not pkey:
            if log:
                log.error(f"pr_rcv_get_path_parms: ERR 1F1B: Ports src 0x{src.guid:016x} ({src.node.desc} port "
                          f"{src.num}) and dst 0x{dst.guid:016x} ({dst.node.desc} port {dst.num}) do not have "
                          "any shared PKeys")
            return None
    prtn = subnet.partitions.by_pkey.get(pkey & 0x7FFF) if subnet.partitions and pkey else None
    if mask & PR_COMP_SL:
        sl = f["SL"]
    elif qos_sl is not None:
        sl = qos_sl
    else:
        sl = prtn.sl if prtn is not None else 0
    return pkey, sl, level


def has_pkey_of(subnet: Subnet, p: Physp, pkey: int) -> bool:
    """osm_physp_has_pkey on the port's table (a port whose table is unknown: yes)."""
    t = _tbl(subnet, p)
    return t is None or has_pkey(t, pkey)


def requester_shares(subnet: Subnet, req: Physp | None, src: Physp, dst: Physp) -> bool:
    tables = [_tbl(subnet, p) if p is not None else None for p in (req, src, dst)]
    if any(t is None for t in tables):
        return True
    r, s, d = tables
    return share_pkey(r, s) and share_pkey(r, d) and share_pkey(s, d)


def pkey_table_records(subnet: Subnet, ports: list[Physp], mask: int, rec, req: Physp | None) -> list[bytes]:
    """PKeyTableRecords of ``ports`` (the end ports asked about, in LID order)."""
    if subnet.pkey_tables is None:
        return []
    want_port, want_block = rec[4], int.from_bytes(rec[2:4], "big")
    rt = _tbl(subnet, req) if req is not None else None
    out = []
    for port in ports:
        node = port.node
        if not node.is_switch:
            phs = [port]                     # an end node: its port, whatever port was asked
        elif mask & PKTR_COMP_PORT:
            phs = [node.ports[want_port]] if want_port in node.ports else []
        else:
            phs = [node.ports[n] for n in sorted(node.ports)]
        lid = port.lid if not node.is_switch else node.base_lid()
        for ph in phs:
            t = _tbl(subnet, ph)
            if t is None:
                continue
            if rt is not None and not share_pkey(rt, t):
                continue
            blocks = [want_block] if mask & PKTR_COMP_BLOCK else range(len(t.blocks))
            for b in blocks:
                blk = t.blocks[b] if b < len(t.blocks) else None
                data = b"".join(x.to_bytes(2, "big") for x in blk) if blk else bytes(64)
                # BlockNum as opensm writes it: in host (little-endian) order, which saquery prints as is
                out.append(lid.to_bytes(2, "big") + b.to_bytes(2, "little") + bytes([ph.num]) + bytes(3) + data)
    return out
