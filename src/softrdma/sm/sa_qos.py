"""The SA's QoS records (opensm's osm_sa_slvl_record.c, osm_sa_vlarb_record.c), sans-IO.

SLtoVLMappingTableRecord (IBA 15.2.5.4) and VLArbitrationTableRecord
(15.2.5.9) of the tables this SM set (``qos.QosSetup``; a table it never
set reads as zeros, as opensm's do): per end port in port GUID order, or the
one with the LID asked for; a CA port's table as input and output port 0; a
switch's every (output, input) pair -- or the ports asked for -- under its
port 0 LID; VLArbitration blocks 1 to 4 (or the one asked for).  Only ports
the requester shares a P_Key with.
"""

from __future__ import annotations

from ..wire.smp import encode_sl2vl, encode_vlarb
from .sa_pkey import requester_shares
from .subnet import Physp, Subnet

SLVL_RECORD_SIZE = 16          # LID, InputPortNum, OutputPortNum, reserved[4], SLtoVLMappingTable[8]
VLARB_RECORD_SIZE = 72         # LID, OutputPortNum, BlockNum, reserved[4], VLArbitrationTable[64]
SLVL_COMP_LID, SLVL_COMP_IN, SLVL_COMP_OUT = 1, 2, 4
VLA_COMP_LID, VLA_COMP_PORT, VLA_COMP_BLOCK = 1, 2, 4


def _mine(subnet: Subnet, p: Physp):
    t = subnet.qos_tables
    return t.get((p.node.guid, p.num)) if t else None


def _ports(subnet: Subnet, by_lid: dict, mask: int, rec) -> list[Physp]:
    """The end ports asked about: the one with the LID in the record (LID bit 0 of the mask), or all."""
    if mask & 1:
        lid = int.from_bytes(rec[0:2], "big")
        return [by_lid[lid]] if lid in by_lid else []
    return subnet.end_ports()


def _lid(p: Physp) -> int:
    return p.node.base_lid() if p.node.is_switch else p.lid


def _shares(subnet, req, p) -> bool:
    return requester_shares(subnet, req, p, p)


def sl2vl_records(subnet: Subnet, by_lid: dict, mask: int, rec, req: Physp | None) -> list[bytes]:
    out = []
    for port in _ports(subnet, by_lid, mask, rec):
        if not port.node.is_switch:
            if _shares(subnet, req, port):
                m = _mine(subnet, port)
                vls = m.sl2vl.get(0) if m else None
                out.append(_lid(port).to_bytes(2, "big") + bytes(6) + (encode_sl2vl(vls) if vls else bytes(8)))
            continue
        node = port.node
        nums = sorted(node.ports)
        outs = [rec[3]] if mask & SLVL_COMP_OUT else nums
        ins = [rec[2]] if mask & SLVL_COMP_IN else nums
        for o in outs:
            po = node.ports.get(o)
            if po is None or not _shares(subnet, req, po):
                continue
            m = _mine(subnet, po)
            for i in ins:
                if i not in node.ports:
                    continue
                vls = m.sl2vl.get(i) if m else None
                out.append(_lid(port).to_bytes(2, "big") + bytes([i, o]) + bytes(4) +
                           (encode_sl2vl(vls) if vls else bytes(8)))
    return out


def vlarb_records(subnet: Subnet, by_lid: dict, mask: int, rec, req: Physp | None) -> list[bytes]:
    out = []
    for port in _ports(subnet, by_lid, mask, rec):
        node = port.node
        if not node.is_switch:
            phs = [port]
        elif mask & VLA_COMP_PORT:
            phs = [node.ports[rec[2]]] if rec[2] in node.ports else []
        else:
            phs = [node.ports[n] for n in sorted(node.ports)]
        for p in phs:
            if not _shares(subnet, req, p):
                continue
            m = _mine(subnet, p)
            for block in range(1, 5):
                if mask & VLA_COMP_BLOCK and block != rec[3]:
                    continue
                entries = m.vlarb.get(block - 1) if m else None
                out.append(_lid(port).to_bytes(2, "big") + bytes([p.num, block]) + bytes(4) +
                           (encode_vlarb(entries) if entries else bytes(64)))
    return out
