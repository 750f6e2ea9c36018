"""A CA port's virtual ports as its SMA answers for them
(``wire.smp_virt``): VirtualizationInfo, VPortState, VPortInfo.

The HCA behind the port (a softrdma device with SR-IOV VFs) sets them up
through its own SMA with local SMPs, as its firmware does: the number of
vports in VirtualizationInfo, each VF's GUID and LIDRequired in its
VPortInfo.  The SM then enables virtualization (VirtualizationEnable),
gives each vport a LID (VPortInfo) and a state (VPortState).  A vport's
LID is the port's own LID too while virtualization is enabled
(``model.Port.has_lid``): switches forward it to the port, the port takes
it.  Every Set is a read-modify-write of the whole attribute.
"""

from __future__ import annotations

from ..wire import smp
from ..wire.mad import Method
from ..wire.smp import SmpStatus
from ..wire.smp_virt import (VIRTUALIZATION_INFO, VIRTUALIZATION_INFO_ATTR, VPORT_INFO, VPORT_INFO_ATTR,
                             VPORT_STATE_ATTR, VPORTS_PER_STATE_BLOCK, decode_vport_states, encode_vport_states)

MAX_VPORTS = 127                  # VPortCap of a port: one vport per VF a ConnectX-5 may have, + vport 0


class VPortTable:
    """One port's vports: index -> VPortInfo fields; vport 0 is the port itself."""

    def __init__(self):
        self.info = {"VPortCap": MAX_VPORTS, "VPortIndexTop": 0, "VirtualizationEnable": 0,
                     "VClientReregister": 0, "VPortStateChange": 0, "VirtualizationRevision": 1,
                     "CapabilityMask": 0}
        self.vports: dict[int, dict] = {}
        self.lids: frozenset = frozenset()

    def _relid(self) -> None:
        on = self.info["VirtualizationEnable"]
        self.lids = frozenset(v["Lid"] for i, v in self.vports.items()
                              if on and i and v["Lid"] and i <= self.info["VPortIndexTop"])

    def vport(self, i: int) -> dict:
        v = self.vports.get(i)
        if v is None:
            v = self.vports[i] = {"PortGuid": 0, "Lid": 0, "LidByVPortIndex": 0, "LidRequired": 0,
                                  "ClientReregister": 0, "VPortState": 1 if i else 0}
        return v


def _ca_port(node, arrival):
    return None if node.is_switch else node.ports[arrival]


def virtualization_info(node, arrival, method, mod, data):
    p = _ca_port(node, arrival)
    if p is None:
        return SmpStatus.ATTR_UNSUPPORTED, bytes(data[:smp.SMP_DATA_SIZE])
    t = p.vports
    if method == Method.SET:
        if t is None:
            t = p.vports = VPortTable()
        f = VIRTUALIZATION_INFO.decode(data)
        if f["VPortIndexTop"] > t.info["VPortCap"]:
            return SmpStatus.BAD_PARAM, bytes(VIRTUALIZATION_INFO.encode(t.info))
        t.info.update({k: f[k] for k in ("VPortIndexTop", "VirtualizationEnable", "VClientReregister")})
        t._relid()
    if t is None:                   # no vports: the port is not virtualization-capable
        return SmpStatus.ATTR_UNSUPPORTED, bytes(data[:smp.SMP_DATA_SIZE])
    return 0, bytes(VIRTUALIZATION_INFO.encode(t.info))


def vport_info(node, arrival, method, mod, data):
    p = _ca_port(node, arrival)
    t = p.vports if p is not None else None
    i = mod & 0xFFFF
    if t is None or i > t.info["VPortCap"]:
        return (SmpStatus.ATTR_UNSUPPORTED if t is None else SmpStatus.BAD_PARAM), bytes(data[:smp.SMP_DATA_SIZE])
    v = t.vport(i)
    if method == Method.SET:
        f = VPORT_INFO.decode(data)
        v.update({k: f[k] for k in ("PortGuid", "Lid", "LidByVPortIndex", "LidRequired", "ClientReregister")})
        t._relid()
    return 0, bytes(VPORT_INFO.encode(v))


def vport_state(node, arrival, method, mod, data):
    p = _ca_port(node, arrival)
    t = p.vports if p is not None else None
    if t is None:
        return SmpStatus.ATTR_UNSUPPORTED, bytes(data[:smp.SMP_DATA_SIZE])
    lo = mod * VPORTS_PER_STATE_BLOCK
    if method == Method.SET:
        for k, st in enumerate(decode_vport_states(data)):
            i = lo + k
            if 0 < i <= t.info["VPortIndexTop"] and st:
                t.vport(i)["VPortState"] = st
    return 0, encode_vport_states(t.vports[lo + k]["VPortState"] if lo + k in t.vports else 0
                                  for k in range(VPORTS_PER_STATE_BLOCK))


HANDLERS = {VIRTUALIZATION_INFO_ATTR: virtualization_info, VPORT_INFO_ATTR: vport_info,
            VPORT_STATE_ATTR: vport_state}

__all__ = ["HANDLERS", "VPortTable"]
