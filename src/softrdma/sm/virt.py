"""Virtualization in the heavy sweep (NVIDIA opensm's ``virt_enabled``):
the vports of the CA ports that support it (PortInfo:CapabilityMask2
IsVirtualizationSupported), through VirtualizationInfo, VPortInfo and
VPortState (``wire.smp_virt``).

``virt_enabled`` 0 ignores them; 1 disables virtualization on every port
that supports it (VirtualizationEnable 0: the VFs stay alias GUIDs of the
port); 2 enables it: each enabled vport (1 .. VPortIndexTop) whose
VPortInfo asks for a LID (LIDRequired) gets one of its own, kept by vport
GUID across sweeps, and is made Active (VPortState); the switches forward
it as its port's LID (the routing gives a vport LID the LFT entries of
its port's base LID), and the SA knows the vport GUID, its LID and its
port (``subnet.vports``: GUID -> (port GUID, LID)) for PathRecords.

``VirtSetup.phases(sweep)`` gives the sweep three phases after the LIDs:
VirtualizationInfo Get (and Set) of the supporting ports, VPortInfo Get of
their vports, then the LIDs and states Set.
"""

from __future__ import annotations

from ..wire.mad import Method
from ..wire.smp import PORT_INFO, build_dr_smp, smp_data
from ..wire.smp_virt import (CAP2_IS_VIRT_SUPPORTED, VIRTUALIZATION_INFO, VIRTUALIZATION_INFO_ATTR, VPORT_INFO,
                             VPORT_INFO_ATTR, VPORT_STATE_ATTR, VPORTS_PER_STATE_BLOCK, encode_vport_states)
from .discovery import dr_status

PORT_ACTIVE = 4
MCAST_LID_BASE = 0xC000


class VirtSetup:
    def __init__(self, virt_enabled: int = 0, log=None):
        self.mode = virt_enabled
        self.log = log
        self.lid_of: dict[int, int] = {}        # vport GUID -> its LID (kept across sweeps)
        self.found: dict = {}                   # Physp -> {index: VPortInfo fields}

    def phases(self, sweep) -> list:
        if not self.mode:
            return []
        return [lambda: self._info(sweep), lambda: self._vports(sweep), lambda: self._assign(sweep)]

    def _ports(self, sub):
        for p in sub.end_ports():
            if not p.node.is_switch and p.port_info and \
                    PORT_INFO.get(p.port_info, "CapabilityMask2") & CAP2_IS_VIRT_SUPPORTED:
                yield p

    def _post(self, sweep, method, attr, p, mod, data, cb) -> None:
        sweep.q.post_send(build_dr_smp(method, attr, p.node.dr_path, mod, data), cb)

    def _info(self, sweep) -> None:
        self.found = {}
        enable = 1 if self.mode == 2 else 0
        for p in self._ports(sweep.subnet):
            def got(r, p=p):
                if r is None or dr_status(r):
                    return
                vi = VIRTUALIZATION_INFO.decode(smp_data(r))
                self.found[p] = {i: None for i in range(1, vi["VPortIndexTop"] + 1)} if enable else {}
                if vi["VirtualizationEnable"] != enable:
                    vi["VirtualizationEnable"] = enable
                    self._post(sweep, Method.SET, VIRTUALIZATION_INFO_ATTR, p, 0,
                               bytes(VIRTUALIZATION_INFO.encode(vi)), lambda r: None)
            self._post(sweep, Method.GET, VIRTUALIZATION_INFO_ATTR, p, 0, b"", got)

    def _vports(self, sweep) -> None:
        for p, vports in self.found.items():
            for i in vports:
                def got(r, p=p, i=i):
                    if r is not None and not dr_status(r):
                        self.found[p][i] = VPORT_INFO.decode(smp_data(r))
                self._post(sweep, Method.GET, VPORT_INFO_ATTR, p, i, b"", got)

    def _assign(self, sweep) -> None:
        """A LID for each vport that requires one, Active."""
        sub = sweep.subnet
        used = set(sub.port_by_lid())
        vports = {}
        for p, infos in self.found.items():
            states = [0] * VPORTS_PER_STATE_BLOCK
            for i, vp in sorted(infos.items()):
                if vp is None or not vp["PortGuid"] or not vp["LidRequired"]:
                    continue
                g = vp["PortGuid"]
                lid = self.lid_of.get(g)
                if lid is None or lid in used:
                    lid = next(x for x in range(1, MCAST_LID_BASE) if x not in used)
                    self.lid_of[g] = lid
                used.add(lid)
                vports[g] = (p.guid, lid)
                if vp["Lid"] != lid:
                    vp["Lid"] = lid
                    self._post(sweep, Method.SET, VPORT_INFO_ATTR, p, i, bytes(VPORT_INFO.encode(vp)), lambda r: None)
                if i < VPORTS_PER_STATE_BLOCK:
                    states[i] = PORT_ACTIVE
                if self.log:
                    self.log.verbose(f"vport {i} of port 0x{p.guid:016x}: GUID 0x{g:016x} LID {lid}")
            if any(states):
                self._post(sweep, Method.SET, VPORT_STATE_ATTR, p, 0, encode_vport_states(states), lambda r: None)
        sub.vports = vports


def route_vports(sub, lfts: dict) -> int:
    """Each switch forwards a vport's LID as its port's base LID; the top LID."""
    top = 0
    for g, (port_guid, lid) in getattr(sub, "vports", {}).items():
        p = sub.ports.get(port_guid)
        if p is None or not p.lid:
            continue
        for lft in lfts.values():
            if len(lft) <= lid:
                lft.extend(b"\xff" * (lid + 1 - len(lft)))
            lft[lid] = lft[p.lid] if p.lid < len(lft) else 0xFF
        top = max(top, lid)
    return top


__all__ = ["VirtSetup", "route_vports"]
